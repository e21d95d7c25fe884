//! Language server benchmark: `fabro lsp`'s serve loop on an in-memory connection (the same
//! messages an editor sends over stdio) with a generated workflow of 1,000 and 10,000 stages open.
//!
//! Run with `cargo run --release --example bench_lsp` (add `-- 10000` to pick sizes). Per size,
//! in 5 rounds, it types 30 keystrokes into one attribute value (the text valid after each), then
//! a new statement on a line of its own in the middle (broken at its last keystroke, `[prompt=`),
//! a keystroke every 40 ms (a fast typist), and measures from the last keystroke of each to the
//! diagnostics published for that version; then hover, completion and a quick fix's code action
//! on the open buffer; and the analysis alone, of the whole text and after one keystroke.
//! Target: diagnostics within 300 ms of the last keystroke at 10,000 stages.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use lsp_server::{Connection, Message, Notification, Request, RequestId};
use serde_json::{json, Value};

const URI: &str = "file:///tmp/fabro-bench-lsp/workflow.dot";

/// `stages` stages of four kinds in a chain, every fourth with a failure route back, and one
/// misspelled attribute (a finding with a quick fix) in the middle.
fn workflow(stages: usize) -> String {
    let mut dot = String::with_capacity(stages * 120);
    dot.push_str("digraph Typing {\n  goal=\"Measure the language server\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for i in 0..stages {
        let _ = match i % 4 {
            0 => writeln!(dot, "  s{i} [shape=parallelogram, script=\"make step{i}\", timeout=\"90s\"]"),
            1 => writeln!(dot, "  s{i} [prompt=\"Review step {i} for $goal\", reasoning_effort=high]"),
            2 if i == stages / 8 * 4 + 2 => {
                writeln!(dot, "  s{i} [shape=tab, prompt=\"Summarize {i}\", max_retires=1]")
            }
            2 => writeln!(dot, "  s{i} [shape=tab, prompt=\"Summarize {i}\"]"),
            _ => writeln!(dot, "  s{i} [shape=diamond, label=\"Route {i}\"]"),
        };
    }
    dot.push_str("  start -> s0\n");
    for i in 0..stages {
        let next = if i + 1 < stages { format!("s{}", i + 1) } else { "exit".to_string() };
        let _ = writeln!(dot, "  s{i} -> {next}");
        if i % 4 == 0 && i > 0 {
            let _ = writeln!(dot, "  s{i} -> s{} [condition=\"outcome=fail\"]", i - 1);
        }
    }
    dot.push_str("}\n");
    dot
}

struct Client {
    connection: Connection,
    next_id: i32,
}

impl Client {
    fn notify(&self, method: &str, params: Value) {
        self.connection
            .sender
            .send(Message::Notification(Notification::new(method.to_string(), params)))
            .unwrap();
    }

    /// Sends a request and waits for its answer (diagnostics on the way are dropped).
    fn ask(&mut self, method: &str, params: Value) -> (Value, Duration) {
        self.next_id += 1;
        let id = RequestId::from(self.next_id);
        let started = Instant::now();
        let request = Request { id: id.clone(), method: method.to_string(), params };
        self.connection.sender.send(Message::Request(request)).unwrap();
        loop {
            match self.connection.receiver.recv().unwrap() {
                Message::Response(response) if response.id == id => {
                    return (response.response_result.unwrap_or(Value::Null), started.elapsed())
                }
                _ => {}
            }
        }
    }

    /// Waits for the diagnostics of `version`; returns how many there are.
    fn diagnostics(&self, version: i64) -> usize {
        loop {
            if let Message::Notification(notification) = self.connection.receiver.recv().unwrap() {
                if notification.method == "textDocument/publishDiagnostics"
                    && notification.params["version"] == version
                {
                    return notification.params["diagnostics"].as_array().map_or(0, Vec::len);
                }
            }
        }
    }
}

struct Typist {
    version: i64,
}

impl Typist {
    /// Types `typed` from `at`, a character every 40 ms (a fast typist); returns the time from the
    /// last keystroke to the diagnostics of the text it made, in milliseconds.
    fn type_text(&mut self, client: &Client, text: &mut String, at: usize, typed: &str) -> f64 {
        for (offset, character) in typed.char_indices() {
            let at = at + offset;
            let range = json!({ "start": position(text, at), "end": position(text, at) });
            text.insert(at, character);
            self.version += 1;
            client.notify(
                "textDocument/didChange",
                json!({
                    "textDocument": { "uri": URI, "version": self.version },
                    "contentChanges": [{ "range": range, "text": character.to_string() }],
                }),
            );
            std::thread::sleep(Duration::from_millis(40));
        }
        let last_keystroke = Instant::now() - Duration::from_millis(40);
        client.diagnostics(self.version);
        last_keystroke.elapsed().as_secs_f64() * 1000.0
    }
}

fn position(text: &str, offset: usize) -> Value {
    let line = text[..offset].matches('\n').count();
    let character = offset - text[..offset].rfind('\n').map_or(0, |at| at + 1);
    json!({ "line": line, "character": character })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn bench(stages: usize) {
    let (server, client) = Connection::memory();
    let thread = std::thread::spawn(move || fabro::lsp::serve(server));
    let mut client = Client { connection: client, next_id: 0 };
    client.ask("initialize", json!({ "capabilities": {}, "processId": null }));
    client.notify("initialized", json!({}));

    let mut text = workflow(stages);
    let opened = Instant::now();
    client.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": URI, "languageId": "dot", "version": 1, "text": text } }),
    );
    let findings = client.diagnostics(1);
    let open_ms = opened.elapsed().as_secs_f64() * 1000.0;

    // Keystrokes into the goal's value, the text valid after each; and a new statement typed on
    // a line of its own in the middle, broken at the last keystroke of a round (`[prompt=`), then
    // finished.
    let mut typist = Typist { version: 1 };
    let mut valid = Vec::new();
    let mut broken = Vec::new();
    for round in 0..5 {
        let at = text.find("language server").unwrap();
        valid.push(typist.type_text(&client, &mut text, at, &"x".repeat(30)));
        let line = text.find(&format!("\n  s{} [", stages / 2 + 1)).unwrap();
        broken.push(typist.type_text(&client, &mut text, line, &format!("\n  draft{round} [prompt=")));
        let end = line + text[line + 1..].find('\n').unwrap() + 1;
        typist.type_text(&client, &mut text, end, "\"x\"]");
    }

    let middle = text.find(&format!("s{} [", stages / 2 + 1)).unwrap() + 1;
    let hover = client
        .ask(
            "textDocument/hover",
            json!({ "textDocument": { "uri": URI }, "position": position(&text, middle) }),
        )
        .1;
    let bracket = text.find("reasoning_effort").unwrap();
    let completion = client
        .ask(
            "textDocument/completion",
            json!({ "textDocument": { "uri": URI }, "position": position(&text, bracket) }),
        )
        .1;
    let typo = text.find("max_retires").unwrap();
    let range = json!({ "start": position(&text, typo), "end": position(&text, typo + 3) });
    let (actions, action) = client.ask(
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": URI }, "range": range, "context": { "diagnostics": [] } }),
    );
    assert_eq!(actions.as_array().map(Vec::len), Some(1), "the quick fix is offered");

    // The analysis alone: of the whole text, and of one keystroke given the tree before it.
    let path = std::path::Path::new("/tmp/fabro-bench-lsp/workflow.dot");
    let loader = fabro::Loader::new();
    let timed = |work: &mut dyn FnMut()| {
        let started = Instant::now();
        work();
        started.elapsed().as_secs_f64() * 1000.0
    };
    let whole = (0..5)
        .map(|_| {
            timed(&mut || {
                drop(std::hint::black_box(fabro::lsp::analysis::analyze(path, &text, &loader, None)))
            })
        })
        .collect();
    let (_, mut tree) = fabro::lsp::analysis::analyze(path, &text, &loader, None);
    let keystroke = (0..5)
        .map(|_| {
            let at = text.find("language server").unwrap();
            text.insert(at, 'x');
            let edit = fabro::syntax::Edit::replace(at, at, 1);
            let mut earlier = tree
                .take()
                .map(|(tree, unseen)| (tree, Some(unseen.map_or(edit, |unseen| unseen.then(edit)))));
            timed(&mut || {
                let (analysis, kept) = fabro::lsp::analysis::analyze(path, &text, &loader, earlier.take());
                std::hint::black_box(&analysis);
                tree = kept;
            })
        })
        .collect();

    client.ask("shutdown", Value::Null);
    client.notify("exit", Value::Null);
    thread.join().unwrap().unwrap();

    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    let max = |values: &[f64]| values.iter().copied().fold(0.0, f64::max);
    println!(
        "| {stages} | {:.1} MB | {findings} | {open_ms:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} |",
        text.len() as f64 / 1e6,
        median(valid.clone()),
        max(&valid),
        median(broken.clone()),
        max(&broken),
        median(whole),
        median(keystroke),
        ms(hover),
        ms(completion),
        ms(action),
    );
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|arg| arg.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1000, 10000] } else { sizes };
    println!("| stages | file | findings | open ms | keystroke to diagnostics ms, typing in a value (median / max) | the same, a statement half typed | analysis ms (whole text) | analysis ms (after a keystroke) | hover ms | completion ms | code action ms |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for stages in sizes {
        bench(stages);
    }
}
