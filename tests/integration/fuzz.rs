//! Deterministic fuzzing: no input may make the parser, the loader (parse, build, transforms, every
//! lint rule) or the condition language panic, overflow the stack or report a position outside the
//! text. No fuzzing crate: a small xorshift64* generator with fixed seeds makes every run the same,
//! so a failure is reproducible, and the failing input is printed (shrunk) with the panic message.
//!
//! Inputs: mutations of real workflows (`workflows/*.dot`) and of inline seeds that use every
//! construct, random DOT token soups, randomly generated workflows built from the attribute schema,
//! and random condition strings; and run directories where a hostile stage replaced files with
//! links, FIFOs, huge or garbled files, which every reader of a run must survive.

use crate::common;

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Once;
use std::time::{Duration, Instant};

use fabro::condition::{Condition, ConditionScope};
use fabro::graph::attribute::{ValueType, ATTRIBUTES};
use fabro::graph::stylesheet::Stylesheet;
use fabro::outcome::StageStatus;
use fabro::source::{SourceFile, Span};
use fabro::{LoadError, Loader};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Randomness

/// xorshift64* (Vigna): tiny, fast and good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // The state must never be zero; mix the seed so nearby seeds diverge at once.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`%.
    fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn pick_ref<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A byte offset on a char boundary of `text` (0..=len).
    fn boundary(&mut self, text: &str) -> usize {
        let mut at = self.below(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    }

    /// A char-aligned range of up to `max` bytes inside `text`.
    fn range(&mut self, text: &str, max: usize) -> (usize, usize) {
        let start = self.boundary(text);
        let mut end = (start + 1 + self.below(max)).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        (start, end)
    }
}

// ---------------------------------------------------------------------------------------------
// Catching panics quietly and reporting the input

thread_local! {
    /// Set while a fuzz case runs: the panic hook records instead of printing.
    static CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that stays silent for fuzz cases but records the message and
/// location; panics anywhere else (a failing assertion in a test body) print as usual.
fn install_quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let captured = CAPTURE.with(|slot| {
                let mut slot = slot.borrow_mut();
                match slot.as_mut() {
                    Some(message) => {
                        let payload = info
                            .payload()
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| info.payload().downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "<non-string panic payload>".to_string());
                        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
                        *message = format!("{payload} (at {location})");
                        true
                    }
                    None => false,
                }
            });
            if !captured {
                default(info);
            }
        }));
    });
}

/// Runs `case`, returning the panic message (with its location) if it panicked.
fn catch(case: impl FnOnce()) -> Result<(), String> {
    install_quiet_hook();
    CAPTURE.with(|slot| *slot.borrow_mut() = Some(String::new()));
    let result = panic::catch_unwind(AssertUnwindSafe(case));
    let message = CAPTURE.with(|slot| slot.borrow_mut().take()).unwrap_or_default();
    result.map_err(|_| message)
}

/// Greedy shrinking: drops chunks (halving their size) while `case` still panics, so a failure is
/// reported with a small input. Bounded so a pathological case cannot stall the suite.
fn shrink(input: &str, case: &dyn Fn(&str)) -> String {
    let mut best: Vec<char> = input.chars().collect();
    let mut chunk = (best.len() / 2).max(1);
    let mut attempts = 0;
    while chunk >= 1 && attempts < 3_000 {
        let mut i = 0;
        let mut progressed = false;
        while i < best.len() && attempts < 3_000 {
            let end = (i + chunk).min(best.len());
            let candidate: String = best[..i].iter().chain(&best[end..]).collect();
            attempts += 1;
            if catch(|| case(&candidate)).is_err() {
                best = candidate.chars().collect();
                progressed = true;
            } else {
                i += chunk;
            }
        }
        if !progressed {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    best.into_iter().collect()
}

/// Collects failures of one fuzz target and fails the test with the first few, shrunk.
struct Failures {
    target: &'static str,
    cases: usize,
    failures: Vec<(String, String)>,
    /// The slowest input so far: how long it took and its first characters.
    slowest: (Duration, String),
}

impl Failures {
    fn new(target: &'static str) -> Failures {
        Failures { target, cases: 0, failures: Vec::new(), slowest: (Duration::ZERO, String::new()) }
    }

    fn run(&mut self, input: &str, case: &dyn Fn(&str)) {
        self.cases += 1;
        let started = Instant::now();
        let outcome = catch(|| case(input));
        let took = started.elapsed();
        if took > self.slowest.0 {
            self.slowest = (took, input.chars().take(60).collect());
        }
        if let Err(message) = outcome {
            if self.failures.len() < 5 {
                let small = shrink(input, case);
                let message = catch(|| case(&small)).err().unwrap_or(message);
                self.failures.push((small, message));
            } else {
                self.failures.push((String::new(), message));
            }
        }
    }

    fn finish(self) -> usize {
        if !self.failures.is_empty() {
            let mut report =
                format!("{}: {} of {} inputs panicked\n", self.target, self.failures.len(), self.cases);
            for (input, message) in self.failures.iter().take(5) {
                report.push_str(&format!("\n  input (shrunk): {input:?}\n  panic: {message}\n"));
            }
            panic!("{report}");
        }
        let (took, input) = &self.slowest;
        eprintln!("{}: slowest input took {took:?}: {input:?}...", self.target);
        self.cases
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds

/// Inline seeds that between them use every construct the grammar knows, valid and rejected.
const SEEDS: &[&str] = &[
    // Everything fabro supports: comments of all three kinds, graph attributes, a multi-line
    // stylesheet, defaults, quoted ids, escapes, concatenation, chained edges, conditions.
    r#"/* block comment */
// line comment
# hash comment
digraph "Full Seed" {
    goal = "Ship \"it\" safely\nwith a second line"
    default_max_retries = 2
    default_fidelity = "summary:high"
    retry_target = plan
    model_stylesheet = "
        * { llm_model: claude-sonnet-4-5; llm_provider: anthropic; }
        box { llm_model: claude-opus-4-6 }
        .code, #review { model = \"gpt-5.2\"; reasoning_effort: high; }
        /* a comment */
    "
    graph [rankdir=LR, label="Pipeline"]
    node [shape=box, timeout=15m]
    edge [weight=1]

    start [shape=Mdiamond, label="Start"]
    exit [shape=Msquare]
    plan [shape=tab, prompt="Plan: $goal", class="code, fast"; max_retries=3]
    "quoted id" [label="a" + "b" + "c"]
    review [prompt="Review \\ the \t diff", reasoning_effort=medium, goal_gate=true]
    gate [shape=hexagon, human.default_choice=approve]
    wait [shape=insulator, duration="1h30m"]
    run [shape=parallelogram, script="cargo test --workspace"]
    fan [shape=component, join_policy=k_of_n, join_k=2]
    join [shape=tripleoctagon]
    42 [label=-1.5]

    subgraph cluster_loop {
        label = "Loop A"
        node [fidelity=full, thread_id=loop]
        fix [prompt="Fix"]
        subgraph inner { test [shape=parallelogram, script="make test"] }
    }

    start -> plan -> review -> gate;
    gate -> run [label="[A] Approve", condition="outcome=success && context.tests.passed"]
    gate -> fix [label="[F] Fix", condition="outcome!=success || !(preferred_label=Fix)"]
    run -> fan -> fix -> join -> exit
    fan -> test -> join
    review -> wait -> exit [condition="context.score >= 0.5 && context.branch matches '^feat/'"]
    plan -> "quoted id" -> exit [condition="context.items contains \"a b\""]
}
"#,
    // The rejected constructs, one per seed, so mutations start from each rejection path.
    "strict digraph G {\n  a -> b\n}\n",
    "graph G {\n  a -- b\n}\n",
    "digraph G {\n  start -> a -- b\n}\n",
    "digraph G {\n  a [label=<<b>bold</b> <i>x</i>>]\n}\n",
    "digraph A {\n  a\n}\ndigraph B {\n  b\n}\n",
    "digraph G {\n  a -> { b c }\n}\n",
    "digraph G {\n  subgraph s { x } -> y\n}\n",
    "",
    "   /* nothing */ // here\n# at all\n",
    // Small valid workflows with lint findings.
    "digraph linear {\n  start [shape=Mdiamond]\n  work [prompt=\"do it\"]\n  exit [shape=Msquare]\n  start -> work -> exit\n}\n",
    "digraph w {\r\n\tstart -> a -> exit\r\n\ta [label=\"Ünïcødé 😀\", max_retries=-1, timeout=10]\r\n\ta -> a [condition=\"outcome=sucess\"]\r\n}\r\n",
    "digraph {\n  start; exit; x [type=custom_thing]; y [shape=ellipse]\n  start -> x -> y -> exit\n  exit -> start\n  x -> ghost [fidelity=bogus, thread_id=t]\n  p [prompt=\"@prompts/does_not_exist.md\"]\n}\n",
    "digraph g { model_stylesheet=\"#nosuch { model: x } * { reasoning_effort: extreme }\" start -> exit }",
    "digraph g { a [label=\"multi\\\nline continuation\", condition=\"x\"] a -> b [condition=\"((a || b) && !c) || d <= 3\"] }",
];

/// DOT tokens and awkward characters that mutations insert.
const DOT_TOKENS: &[&str] = &[
    "->",
    "--",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "=",
    ";",
    ",",
    "/*",
    "*/",
    "//",
    "#",
    "\\",
    "<",
    ">",
    "\n",
    "\r\n",
    "\r",
    "\t",
    " ",
    "é",
    "😀",
    "\u{FEFF}",
    "\u{0}",
    "\u{2028}",
    "e\u{301}",
    "+",
    "\"\" + \"",
    "digraph",
    "graph",
    "subgraph",
    "strict",
    "node",
    "edge",
    "start",
    "exit",
    "label",
    "condition",
    "shape",
    "Mdiamond",
    "Msquare",
    "model_stylesheet",
    "prompt",
    "@",
    "$goal",
    "-1",
    ".5",
    "1e9",
    "99999999999999999999",
    "\\\"",
    "\\n",
    "\\\n",
    "<<",
    ">>",
    "a.b.c",
    "&&",
    "||",
    "!",
    "(",
    ")",
    "'",
    ":",
    "*",
    "%",
];

/// Every `.dot` file in `workflows/`, if the directory exists.
fn workflow_files() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "dot"));
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect()
}

fn all_seeds() -> Vec<String> {
    let mut seeds: Vec<String> = SEEDS.iter().map(|s| s.to_string()).collect();
    seeds.extend(workflow_files());
    seeds
}

// ---------------------------------------------------------------------------------------------
// Mutation

const MAX_INPUT: usize = 12_000;

fn random_char(rng: &mut Rng) -> char {
    match rng.below(6) {
        0 => rng.pick(&['é', '😀', 'ß', '字', '\u{FEFF}', '\u{0301}', '\u{10FFFF}', '\u{7F}', '\u{0}']),
        1 => rng.pick(&['\n', '\r', '\t', ' ', '\u{B}', '\u{C}']),
        _ => (0x20 + rng.below(0x5F) as u8) as char,
    }
}

/// One random edit: insertion, deletion, duplication, splicing, replacement or truncation.
fn mutate_once(rng: &mut Rng, text: &mut String, seeds: &[String]) {
    match rng.below(9) {
        0 | 1 => {
            let at = rng.boundary(text);
            text.insert_str(at, rng.pick(DOT_TOKENS));
        }
        2 => {
            let at = rng.boundary(text);
            text.insert(at, random_char(rng));
        }
        3 | 4 => {
            if !text.is_empty() {
                let (start, end) = rng.range(text, 24);
                text.replace_range(start..end, "");
            }
        }
        5 => {
            if !text.is_empty() {
                let (start, end) = rng.range(text, 200);
                let copy = text[start..end].to_string();
                let at = rng.boundary(text);
                text.insert_str(at, &copy);
            }
        }
        6 => {
            // Splice: this text up to a point, another seed from a point.
            let other = rng.pick_ref(seeds);
            let cut = rng.boundary(text);
            let from = rng.boundary(other);
            text.truncate(cut);
            text.push_str(&other[from..]);
        }
        7 => {
            if !text.is_empty() {
                let (start, end) = rng.range(text, 8);
                text.replace_range(start..end, rng.pick(DOT_TOKENS));
            }
        }
        _ => {
            let cut = rng.boundary(text);
            text.truncate(cut);
        }
    }
    if text.len() > MAX_INPUT {
        let mut cut = MAX_INPUT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
}

fn mutated(rng: &mut Rng, seeds: &[String]) -> String {
    let mut text = rng.pick_ref(seeds).clone();
    for _ in 0..1 + rng.below(5) {
        mutate_once(rng, &mut text, seeds);
    }
    text
}

/// Random tokens, mostly inside `digraph G { ... }` so the parser gets past the header.
fn token_soup(rng: &mut Rng) -> String {
    const WORDS: &[&str] = &[
        "a",
        "b",
        "start",
        "exit",
        "node",
        "edge",
        "graph",
        "subgraph",
        "digraph",
        "strict",
        "label",
        "shape",
        "Mdiamond",
        "Msquare",
        "hexagon",
        "condition",
        "prompt",
        "\"x y\"",
        "\"outcome=success\"",
        "\"a\\\"b\"",
        "\"unterminated",
        "42",
        "-3.14",
        "<b>",
        "<",
        ">",
        "->",
        "--",
        "=",
        ";",
        ",",
        "[",
        "]",
        "{",
        "}",
        "/*",
        "*/",
        "//",
        "#",
        "\n",
        "\\",
        "é",
        "😀",
        "model_stylesheet",
        "\"* { model: m; }\"",
        "\"#x { reasoning_effort: max }\"",
        "max_retries",
        "timeout",
        "\"5x\"",
        "goal_gate",
        "true",
        "retry_target",
        "a.b",
        "+",
        "\"p\" + \"q\"",
    ];
    let mut text = String::new();
    let wrapped = rng.chance(80);
    if wrapped {
        text.push_str("digraph G {\n");
    }
    for _ in 0..rng.below(60) {
        text.push_str(rng.pick(WORDS));
        text.push_str(rng.pick(&[" ", " ", "", "\n", "\t"]));
    }
    if wrapped && rng.chance(80) {
        text.push_str("\n}\n");
    }
    text
}

/// A random value for an attribute of type `value_type`, sometimes deliberately wrong.
fn attribute_value(rng: &mut Rng, value_type: ValueType) -> String {
    if rng.chance(15) {
        return rng.pick(&["\"\"", "\"  \"", "x", "-1", "1.5", "\"é😀\"", "true", "\"10\""]).to_string();
    }
    match value_type {
        ValueType::Text => {
            format!("\"{}\"", rng.pick(&["some text", "@prompts/plan.md", "$goal now", "a\\\"b"]))
        }
        ValueType::Integer | ValueType::Count => {
            rng.pick(&["0", "3", "-2", "99999999999999999999"]).to_string()
        }
        ValueType::Float => rng.pick(&["0.5", "1", "0", "1.5", "NaN", "inf"]).to_string(),
        ValueType::Dollars => rng.pick(&["0.5", "20", "0", "-1", "inf"]).to_string(),
        ValueType::Boolean => rng.pick(&["true", "false", "TRUE", "yes"]).to_string(),
        ValueType::Duration => {
            rng.pick(&["250ms", "15m", "1h30m", "2d", "10", "5x", "99999999999999999999d"]).to_string()
        }
        ValueType::OneOf(words) => {
            if rng.chance(80) {
                rng.pick(words).to_string()
            } else {
                "\"nope\"".to_string()
            }
        }
    }
}

/// A syntactically valid workflow with random nodes, attributes from the schema, subgraphs,
/// defaults, conditions and a stylesheet, to drive every lint rule.
fn generated_workflow(rng: &mut Rng) -> String {
    const SHAPES: &[&str] = &[
        "Mdiamond",
        "Msquare",
        "box",
        "tab",
        "hexagon",
        "diamond",
        "component",
        "tripleoctagon",
        "parallelogram",
        "insulator",
        "house",
        "ellipse",
        "circle",
    ];
    let ids: Vec<String> = (0..2 + rng.below(8))
        .map(|i| match i {
            0 => "start".to_string(),
            1 => "exit".to_string(),
            _ => format!("n{i}"),
        })
        .collect();
    let mut text = String::from("digraph generated {\n");
    if rng.chance(50) {
        text.push_str(&format!("  goal = \"goal {}\"\n", rng.below(100)));
    }
    if rng.chance(40) {
        let sheet = rng.pick(&[
            "* { llm_model: m; } .loop-a { reasoning_effort: low }",
            "#n2 { provider: openai } box { model: 'x y' }",
            "#missing { model: q }",
            "* { reasoning_effort: extreme }",
            "* { llm_model m }",
            "/* unclosed",
        ]);
        text.push_str(&format!("  model_stylesheet = \"{sheet}\"\n"));
    }
    for _ in 0..rng.below(3) {
        let spec = rng.pick_ref(ATTRIBUTES);
        text.push_str(&format!("  {} = {}\n", spec.name, attribute_value(rng, spec.value_type)));
    }
    if rng.chance(30) {
        let spec = rng.pick_ref(ATTRIBUTES);
        text.push_str(&format!("  node [{}={}]\n", spec.name, attribute_value(rng, spec.value_type)));
    }
    let in_subgraph = rng.below(ids.len());
    for (i, id) in ids.iter().enumerate() {
        if i == in_subgraph {
            text.push_str("  subgraph cluster_x {\n    label = \"Loop A\"\n");
        }
        let mut attributes = Vec::new();
        if rng.chance(70) {
            attributes.push(format!("shape={}", rng.pick(SHAPES)));
        }
        for _ in 0..rng.below(4) {
            let spec = rng.pick_ref(ATTRIBUTES);
            attributes.push(format!("{}={}", spec.name, attribute_value(rng, spec.value_type)));
        }
        text.push_str(&format!("  {id} [{}]\n", attributes.join(", ")));
        if i == in_subgraph {
            text.push_str("  }\n");
        }
    }
    for _ in 0..rng.below(2 * ids.len()) {
        let from = rng.pick_ref(&ids);
        let to = if rng.chance(10) { "ghost".to_string() } else { rng.pick_ref(&ids).clone() };
        let mut attributes = Vec::new();
        if rng.chance(50) {
            let condition = random_condition(rng).replace('\\', "\\\\").replace('"', "\\\"");
            attributes.push(format!("condition=\"{condition}\""));
        }
        if rng.chance(30) {
            attributes.push(format!("label=\"{}\"", rng.pick(&["[A] Approve", "Fix", "approve"])));
        }
        if rng.chance(20) {
            let spec = rng.pick_ref(ATTRIBUTES);
            attributes.push(format!("{}={}", spec.name, attribute_value(rng, spec.value_type)));
        }
        text.push_str(&format!("  {from} -> {to} [{}]\n", attributes.join("; ")));
    }
    text.push_str("}\n");
    text
}

// ---------------------------------------------------------------------------------------------
// Conditions

const CONDITION_TOKENS: &[&str] = &[
    "outcome",
    "preferred_label",
    "context.x",
    "context.tests.passed",
    "context.score",
    "context.items",
    "context.context.x",
    "x-y",
    "_k",
    "=",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    " contains ",
    " matches ",
    "!",
    "&&",
    "||",
    "(",
    ")",
    "success",
    "partial_success",
    "fail",
    "FAILED",
    "sucess",
    "retry",
    "skipped",
    "\"quoted \\\" text\"",
    "\"\\q\"",
    "\"\\",
    "\"",
    "'",
    "'single'",
    "'^feat/.*$'",
    "'['",
    "'(a|b)*c'",
    "'\\d{2,5}'",
    "'a{999}{999}'",
    "1",
    "-2.5",
    "1e400",
    "NaN",
    "inf",
    "true",
    "0",
    "é",
    "😀",
    "a.b",
    ".",
    "-",
    " ",
    " ",
    "\t",
    "\n",
    "&",
    "|",
];

fn random_condition(rng: &mut Rng) -> String {
    let mut text = String::new();
    if rng.chance(50) {
        // Mostly well-formed: clause (op clause)*.
        for i in 0..1 + rng.below(4) {
            if i > 0 {
                text.push_str(rng.pick(&[" && ", " || ", "&&", " && !"]));
            }
            if rng.chance(20) {
                text.push_str(rng.pick(&["(", "!(", "!!("]));
            }
            text.push_str(rng.pick(&CONDITION_TOKENS[..9]));
            if rng.chance(80) {
                text.push_str(rng.pick(&CONDITION_TOKENS[9..18]));
                text.push_str(rng.pick(&CONDITION_TOKENS[23..]));
            }
            if rng.chance(15) {
                text.push(')');
            }
        }
    } else {
        for _ in 0..rng.below(14) {
            text.push_str(rng.pick(CONDITION_TOKENS));
            if rng.chance(30) {
                text.push(' ');
            }
        }
    }
    if rng.chance(20) && !text.is_empty() {
        // A character-level edit as well.
        let at = rng.boundary(&text);
        match rng.below(3) {
            0 => text.insert(at, random_char(rng)),
            1 => text.truncate(at),
            _ => {
                let (start, end) = rng.range(&text, 4);
                text.replace_range(start..end, "");
            }
        }
    }
    text
}

/// The run state a condition reads, in a few shapes.
struct Scope {
    outcome: Option<StageStatus>,
    label: Option<String>,
    context: serde_json::Map<String, Value>,
}

impl ConditionScope for Scope {
    fn outcome(&self) -> Option<StageStatus> {
        self.outcome
    }

    fn preferred_label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    fn context(&self, key: &str) -> Option<&Value> {
        self.context.get(key)
    }
}

fn scopes() -> Vec<Scope> {
    let object = |value: Value| value.as_object().cloned().unwrap_or_default();
    vec![
        Scope { outcome: None, label: None, context: Default::default() },
        Scope {
            outcome: Some(StageStatus::Success),
            label: Some("Fix".into()),
            context: object(json!({
                "x": "é😀", "tests.passed": true, "score": 0.75, "items": ["a b", 1, null, {"k": []}],
                "context.x": "literal", "x-y": "feat/1", "_k": 0
            })),
        },
        Scope {
            outcome: Some(StageStatus::Fail),
            label: Some(String::new()),
            context: object(json!({
                "x": null, "tests.passed": "false", "score": "1e400", "items": {"a": 1},
                "_k": 1.7976931348623157e308, "x-y": -0.0
            })),
        },
    ]
}

/// One condition: parse, and if it parses, query and evaluate it on every scope.
fn check_condition(text: &str, scopes: &[Scope]) {
    match Condition::parse(text) {
        Ok(condition) => {
            assert_eq!(condition.text(), text);
            let _ = (condition.context_keys(), condition.tests_outcome(), condition.tested_outcomes());
            for scope in scopes {
                let first = condition.evaluate(scope);
                assert_eq!(first, condition.evaluate(scope), "evaluation is deterministic");
            }
        }
        Err(error) => {
            assert!(
                error.offset <= text.len() && text.is_char_boundary(error.offset),
                "condition error offset {} is outside {text:?} or not on a char boundary",
                error.offset
            );
            assert!(!error.message.is_empty(), "condition error without a message");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workflow invariants

fn assert_span_in(text: &str, span: Span, what: &str) {
    assert!(
        span.start <= span.end && span.end <= text.len(),
        "{what}: span {}..{} outside the text ({} bytes)",
        span.start,
        span.end,
        text.len()
    );
    assert!(
        text.is_char_boundary(span.start) && text.is_char_boundary(span.end),
        "{what}: span {}..{} is not on char boundaries",
        span.start,
        span.end
    );
}

/// Parses and loads `text`, checking every position the library reports.
fn check_workflow(text: &str) {
    let parsed = fabro::syntax::parse(text);
    if let Err(error) = &parsed {
        assert_span_in(text, error.span, "syntax error");
        assert!(!error.to_string().is_empty(), "syntax error without a message");
    }
    let loaded = Loader::new().load_source(SourceFile::new("fuzz.dot", text));
    match loaded {
        Err(LoadError::Syntax { error, file }) => {
            assert_eq!(file.text(), text);
            assert_eq!(parsed.as_ref().err(), Some(&error), "the loader reports the parser's error");
            let location = file.location(error.span.start);
            assert!(location.line >= 1 && location.column >= 1);
        }
        Err(other) => panic!("load_source returned a non-syntax error: {other}"),
        Ok(checked) => {
            assert!(parsed.is_ok(), "the loader accepted text the parser rejects");
            let workflow = &checked.workflow;
            let source = workflow.source();
            assert_eq!(source.text(), text);
            let line_count = text.matches('\n').count() + 1;
            for diagnostic in &checked.diagnostics {
                assert!(!diagnostic.rule.is_empty() && !diagnostic.message.is_empty());
                if let Some(id) = &diagnostic.node_id {
                    assert!(
                        workflow.node(id).is_some(),
                        "diagnostic names unknown node {id:?}: {diagnostic:?}"
                    );
                }
                if let Some((from, to)) = &diagnostic.edge {
                    assert!(
                        workflow.node(from).is_some() && workflow.node(to).is_some(),
                        "diagnostic names an unknown edge: {diagnostic:?}"
                    );
                }
                let Some(span) = diagnostic.span else { continue };
                assert_span_in(text, span, &format!("diagnostic {}", diagnostic.rule));
                let location = source.location(span.start);
                assert!(
                    location.line >= 1 && location.line <= line_count,
                    "line out of range: {diagnostic:?}"
                );
                let width = source.line_text(location.line).chars().count();
                assert!(
                    location.column >= 1 && location.column <= width + 1,
                    "column {} beyond line {} ({width} chars): {diagnostic:?}",
                    location.column,
                    location.line
                );
                assert_eq!(diagnostic.location(source), Some(location));
            }
            let scopes = scopes();
            for edge in workflow.edges() {
                let written = edge.edge.attributes.non_empty_text("condition");
                match (&edge.edge.condition, written) {
                    (Some(Err(error)), Some(written)) => assert!(
                        error.offset <= written.len() && written.is_char_boundary(error.offset),
                        "condition error offset {} outside {written:?}",
                        error.offset
                    ),
                    (Some(Ok(condition)), _) => {
                        for scope in &scopes {
                            condition.evaluate(scope);
                        }
                    }
                    _ => {}
                }
            }
            if let Some(sheet) = workflow.attributes().non_empty_text("model_stylesheet") {
                match Stylesheet::parse(sheet) {
                    Err(error) => assert!(
                        error.offset <= sheet.len() && sheet.is_char_boundary(error.offset),
                        "stylesheet error offset {} outside {sheet:?}",
                        error.offset
                    ),
                    Ok(parsed) => {
                        for (_, offset) in parsed.selectors() {
                            assert!(offset <= sheet.len() && sheet.is_char_boundary(offset));
                        }
                    }
                }
            }
            // Both ends of the CLI: a valid workflow converts, an invalid one lists its errors.
            let has_errors = checked.has_errors();
            match checked.into_valid() {
                Ok(valid) => assert!(!has_errors && valid.warnings.iter().all(|d| !d.is_error())),
                Err(invalid) => assert!(has_errors && invalid.diagnostics.iter().any(|d| d.is_error())),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn mutated_workflows_never_panic() {
    let started = Instant::now();
    let seeds = all_seeds();
    let mut failures = Failures::new("mutated workflows");
    for seed in &seeds {
        failures.run(seed, &check_workflow);
    }
    let mut rng = Rng::new(0xFAB0_0001);
    for _ in 0..10_000 {
        let input = mutated(&mut rng, &seeds);
        failures.run(&input, &check_workflow);
    }
    let cases = failures.finish();
    assert!(cases >= 10_000);
    eprintln!("mutated workflows: {cases} inputs in {:?}", started.elapsed());
}

#[test]
fn token_soups_and_generated_workflows_never_panic() {
    let started = Instant::now();
    let mut failures = Failures::new("token soups and generated workflows");
    let mut rng = Rng::new(0xFAB0_0002);
    for _ in 0..3_000 {
        let input = token_soup(&mut rng);
        failures.run(&input, &check_workflow);
    }
    let mut rng = Rng::new(0xFAB0_0003);
    let seeds = all_seeds();
    for i in 0..4_000 {
        let mut input = generated_workflow(&mut rng);
        if i % 3 == 0 {
            // Some generated workflows get a mutation or two as well.
            for _ in 0..1 + rng.below(2) {
                mutate_once(&mut rng, &mut input, &seeds);
            }
        }
        failures.run(&input, &check_workflow);
    }
    let cases = failures.finish();
    assert!(cases >= 7_000);
    eprintln!("token soups and generated workflows: {cases} inputs in {:?}", started.elapsed());
}

#[test]
fn random_conditions_never_panic() {
    let started = Instant::now();
    let scopes = scopes();
    let check = |text: &str| check_condition(text, &scopes);
    let mut failures = Failures::new("conditions");
    for fixed in ["", " ", "\n", "(", ")", "!", "\"", "'", "\\", "a matches '('", "outcome", "é", "😀=😀"]
    {
        failures.run(fixed, &check);
    }
    let mut rng = Rng::new(0xFAB0_0004);
    for _ in 0..20_000 {
        let text = random_condition(&mut rng);
        failures.run(&text, &check);
    }
    let cases = failures.finish();
    assert!(cases >= 20_000);
    eprintln!("conditions: {cases} inputs in {:?}", started.elapsed());
}

/// Runs `work` on a thread with the default 2 MiB stack (what `std::thread::spawn` gives a library
/// user) and fails if it takes longer than `limit`. A stack overflow would abort the process.
fn within(limit: Duration, what: &str, work: impl FnOnce() -> String + Send + 'static) -> String {
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            let _ = sender.send(work());
        })
        .expect("spawn");
    match receiver.recv_timeout(limit) {
        Ok(outcome) => outcome,
        Err(_) => panic!("{what}: no result within {limit:?} (or the worker panicked)"),
    }
}

fn load_summary(text: String) -> String {
    match Loader::new().load_source(SourceFile::new("deep.dot", text)) {
        Ok(checked) => format!("ok with {} diagnostics", checked.diagnostics.len()),
        Err(LoadError::Syntax { error, .. }) => format!("syntax error: {error}"),
        Err(other) => panic!("unexpected load error: {other}"),
    }
}

#[test]
fn deep_nesting_and_huge_inputs_return_without_overflowing() {
    let limit = Duration::from_secs(20);
    let cases: Vec<(&str, String)> = vec![
        ("10,000 unclosed `subgraph {`", format!("digraph G {{ {}", "subgraph { ".repeat(10_000))),
        (
            "10,000 closed `subgraph {`",
            format!("digraph G {{ {} a {} }}", "subgraph { ".repeat(10_000), "} ".repeat(10_000)),
        ),
        ("10,000 bare `{`", format!("digraph G {{ {}{} }}", "{ ".repeat(10_000), "} ".repeat(10_000))),
        ("10,000 `<` in a label", format!("digraph G {{ a [label={}] }}", "<".repeat(10_000))),
        (
            "10,000 balanced `<...>` in a label",
            format!("digraph G {{ a [label={}{}] }}", "<".repeat(10_000), ">".repeat(10_000)),
        ),
        ("1 MB quoted label", format!("digraph G {{ a [label=\"{}\"] }}", "x".repeat(1 << 20))),
        ("1 MB bare id", format!("digraph G {{ {} }}", "a".repeat(1 << 20))),
        ("1 MB comment", format!("digraph G {{ /*{}*/ }}", "*".repeat(1 << 20))),
        ("1 MB unterminated string", format!("digraph G {{ a [label=\"{}", "y".repeat(1 << 20))),
        (
            "10,000 `(` in an edge condition",
            format!("digraph G {{ start -> exit [condition=\"{}\"] }}", "(".repeat(10_000)),
        ),
        ("1 MB condition", format!("digraph G {{ start -> exit [condition=\"{}x\"] }}", "!".repeat(1 << 20))),
        ("10,000 chained edges", format!("digraph G {{ {}b }}", "a -> ".repeat(10_000))),
        ("1 MB of newlines", format!("digraph G {{{}}}", "\n".repeat(1 << 20))),
    ];
    for (what, text) in cases {
        let outcome = within(limit, what, move || load_summary(text));
        eprintln!("{what}: {outcome}");
    }
    let conditions: Vec<(&str, String)> = vec![
        ("10,000 `(`", "(".repeat(10_000)),
        ("10,000 `()`", format!("{}x{}", "(".repeat(10_000), ")".repeat(10_000))),
        ("10,000 `!(`", format!("{}x", "!(".repeat(10_000))),
        ("1 MB of `!`", format!("{}x", "!".repeat(1 << 20))),
        ("1 MB clause chain", "x && ".repeat(200_000) + "y"),
        ("1 MB quoted value", format!("x = \"{}\"", "v".repeat(1 << 20))),
    ];
    for (what, text) in conditions {
        let outcome = within(limit, what, move || {
            let scopes = scopes();
            match Condition::parse(&text) {
                Ok(condition) => {
                    for scope in &scopes {
                        condition.evaluate(scope);
                    }
                    "ok".to_string()
                }
                Err(error) => format!("error at {}: {}", error.offset, error.message),
            }
        });
        eprintln!("condition {what}: {outcome}");
    }
}

/// Unclosed nested subgraphs must fail in time linear in their depth, not exponential.
#[test]
fn unclosed_nested_subgraphs_fail_quickly() {
    for depth in [5, 10, 30, 90] {
        let text = format!("digraph G {{\n{}", "  subgraph {\n".repeat(depth));
        let outcome =
            within(Duration::from_secs(10), &format!("{depth} unclosed `subgraph {{`"), move || {
                load_summary(text)
            });
        assert!(outcome.starts_with("syntax error"), "{depth} unclosed subgraphs: {outcome}");
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile run directories

/// What a hostile stage (or anyone else who can write a run directory) leaves where fabro
/// expects one of its files.
#[derive(Debug, Clone, Copy)]
enum Planted {
    LinkToSecret,
    LinkToZero,
    LinkToEnviron,
    Fifo,
    /// A sparse file of 2 GiB: past every size limit, costless on disk.
    Huge,
    Directory,
    Garbage,
}

const PLANTS: &[Planted] = &[
    Planted::LinkToSecret,
    Planted::LinkToZero,
    Planted::LinkToEnviron,
    Planted::Fifo,
    Planted::Huge,
    Planted::Directory,
    Planted::Garbage,
];

/// The files of a paused run that readers open, stage files first.
const RUN_FILES: &[&str] = &[
    "stages/work/1/stdout.log",
    "stages/work/1/stderr.log",
    "stages/work/1/status.json",
    "stages/work/1/context.json",
    "stages/work/1/attempts",
    "stages/work/1.process.json",
    "events.jsonl",
    "journal.jsonl",
    "checkpoint.json",
    "manifest.json",
    "workflow.dot",
    "config-files.json",
    "result.json",
];

const HOSTILE_SECRET: &str = "BEGIN-PRIVATE-KEY-4c1d";

fn plant(path: &Path, what: Planted, secret: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
    match what {
        Planted::LinkToSecret => std::os::unix::fs::symlink(secret, path).unwrap(),
        Planted::LinkToZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        Planted::LinkToEnviron => std::os::unix::fs::symlink("/proc/self/environ", path).unwrap(),
        Planted::Fifo => {
            let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: mkfifo reads the NUL-terminated path only.
            assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        }
        Planted::Huge => std::fs::File::create(path).unwrap().set_len(2 << 30).unwrap(),
        Planted::Directory => std::fs::create_dir(path).unwrap(),
        Planted::Garbage => std::fs::write(path, "{\"not\": [\"what was expected\"").unwrap(),
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `fabro ARGS` in `dir` with a secret in its environment; `None` when it still runs after 15
/// seconds (it is killed).
fn hostile_reader(dir: &Path, args: &[&str]) -> Option<std::process::Output> {
    let mut child = common::fabro_command(dir, args)
        .env("ANTHROPIC_API_KEY", format!("sk-ant-{HOSTILE_SECRET}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn hostile_run_directories_never_hang_leak_or_crash_a_reader() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let secret = dir.join("id_ed25519");
    std::fs::write(&secret, HOSTILE_SECRET).unwrap();
    std::fs::write(
        dir.join("w.dot"),
        "digraph hostile {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
         work [shape=parallelogram, script=\"echo built; echo warned >&2\"]\n  \
         gate [shape=hexagon, label=\"Ship?\"]\n  start -> work -> gate\n  gate -> exit [label=\"[Y] Yes\"]\n}\n",
    )
    .unwrap();
    let paused = common::fabro_in(dir, &["run", "w.dot", "--run-dir", "pristine", "-q"]);
    assert_eq!(paused.status.code(), Some(3), "{}", String::from_utf8_lossy(&paused.stderr));

    let mut rng = Rng::new(0x005e_ed41);
    let mut failures = Vec::new();
    for case in 0..24 {
        let name = format!("runs/case{case}");
        let run = dir.join(&name);
        copy_tree(&dir.join("pristine"), &run);
        // A run id of its own, so that `fabro serve` tells the copies apart.
        let mut manifest: Value =
            serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
        manifest["run_id"] = json!(format!("case-{case}"));
        std::fs::write(run.join("manifest.json"), manifest.to_string()).unwrap();
        let mut planted = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let (file, what) = (rng.pick(RUN_FILES), rng.pick(PLANTS));
            plant(&run.join(file), what, &secret);
            planted.push(format!("{file}={what:?}"));
        }
        // Readers first; fork, rewind and resume write, so they come last.
        let readers: [&[&str]; 9] = [
            &["inspect", &name],
            &["logs", &name],
            &["report", &name],
            &["retro", &name],
            &["graph", &name, "--format", "dot"],
            &["runs", "--dir", "runs", "--all"],
            &["fork", "--at", "work", &name],
            &["rewind", "--to", "work", &name],
            &["resume", &name, "--auto-approve", "-q"],
        ];
        for args in readers {
            let Some(output) = hostile_reader(dir, args) else {
                failures.push(format!("{} hung with {}", args.join(" "), planted.join(", ")));
                continue;
            };
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let problem = if output.status.code().is_none_or(|code| code == 101) || said.contains("panicked")
            {
                Some("crashed")
            } else if said.contains(HOSTILE_SECRET) {
                Some("printed the secret")
            } else {
                None
            };
            if let Some(problem) = problem {
                failures.push(format!("{} {problem} with {}: {}", args.join(" "), planted.join(", "), said));
            }
        }
    }
    // The web view reads the same directories: every page answers in time, without the secret.
    failures.extend(serve_pages_of_hostile_runs(dir, 24));
    // Nothing fabro wrote holds the secret (the planted links themselves are not followed).
    let mut pending = vec![dir.join("runs")];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() && entry.metadata().unwrap().len() < (1 << 20) {
                let text = String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned();
                if text.contains(HOSTILE_SECRET) {
                    failures.push(format!("{} holds the secret", entry.path().display()));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

/// Starts `fabro serve` over `runs/` and asks for the list, each run's page, its stage page and
/// its events; returns what hung, failed on the server's side or showed the secret.
fn serve_pages_of_hostile_runs(dir: &Path, cases: usize) -> Vec<String> {
    use std::io::BufRead;
    let mut server = common::fabro_command(dir, &["serve", "--dir", "runs"])
        .env("ANTHROPIC_API_KEY", format!("sk-ant-{HOSTILE_SECRET}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let base = first.trim().strip_prefix("fabro serve: ").expect(&first).trim_end_matches('/').to_string();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().unwrap();
    let mut failures = Vec::new();
    let mut paths = vec!["/".to_string()];
    for case in 0..cases {
        paths.push(format!("/runs/case-{case}"));
        paths.push(format!("/runs/case-{case}/stages/work/1"));
    }
    for path in paths {
        let answer = runtime.block_on(async {
            let response = client.get(format!("{base}{path}")).send().await?;
            let status = response.status().as_u16();
            Ok::<_, reqwest::Error>((status, response.text().await.unwrap_or_default()))
        });
        match answer {
            Err(error) => failures.push(format!("serve {path}: {error}")),
            Ok((status, _)) if status >= 500 => failures.push(format!("serve {path}: HTTP {status}")),
            Ok((_, body)) if body.contains(HOSTILE_SECRET) => {
                failures.push(format!("serve {path} shows the secret"))
            }
            Ok(_) => {}
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    failures
}
