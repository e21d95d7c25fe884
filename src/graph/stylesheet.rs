//! The `model_stylesheet` graph attribute: CSS-like rules that give nodes default LLM settings
//! and container images.
//!
//! ```text
//! * { llm_model: claude-sonnet-4-5; llm_provider: anthropic; }
//! .code, #review { model = "gpt-5.2"; reasoning_effort: high }
//! ```
//!
//! Selectors are `*`, a Graphviz shape name, `.class` or `#id`, with specificity 0 to 3; at equal
//! specificity the later rule wins. This module only parses the text and resolves stylesheet
//! values; explicit node attributes overriding them is the caller's job. Errors carry byte offsets
//! into the stylesheet text so the caller can map them back into the DOT file.

use std::fmt;

/// A node setting the stylesheet can provide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StyleProperty {
    LlmModel = 0,
    LlmProvider = 1,
    ReasoningEffort = 2,
    Backend = 3,
    /// The container image (sandbox=podman or docker).
    Image = 4,
}

impl StyleProperty {
    pub const ALL: [StyleProperty; 5] = [
        StyleProperty::LlmModel,
        StyleProperty::LlmProvider,
        StyleProperty::ReasoningEffort,
        StyleProperty::Backend,
        StyleProperty::Image,
    ];

    /// The node attribute the property sets: "llm_model", "llm_provider", "reasoning_effort",
    /// "backend", "image".
    pub fn attribute(self) -> &'static str {
        match self {
            StyleProperty::LlmModel => "llm_model",
            StyleProperty::LlmProvider => "llm_provider",
            StyleProperty::ReasoningEffort => "reasoning_effort",
            StyleProperty::Backend => "backend",
            StyleProperty::Image => "image",
        }
    }

    /// The property a declaration names, accepting the short aliases `model` and `provider`.
    pub fn from_name(name: &str) -> Option<StyleProperty> {
        match name {
            "llm_model" | "model" => Some(StyleProperty::LlmModel),
            "llm_provider" | "provider" => Some(StyleProperty::LlmProvider),
            "reasoning_effort" => Some(StyleProperty::ReasoningEffort),
            "backend" => Some(StyleProperty::Backend),
            "image" => Some(StyleProperty::Image),
            _ => None,
        }
    }
}

/// Properties Fabro's stylesheets have that fabro does not support, and why: an error, never a
/// property silently dropped.
const UNSUPPORTED_PROPERTIES: &[(&str, &str)] = &[(
    "speed",
    "fabro does not support `speed` (Anthropic's fast output mode); remove it, the stage runs at the model's normal speed",
)];

/// Which nodes a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Universal,
    Shape(String),
    Class(String),
    Id(String),
}

impl Selector {
    /// How strongly the selector binds: universal 0 < shape 1 < class 2 < id 3.
    pub fn specificity(&self) -> u8 {
        match self {
            Selector::Universal => 0,
            Selector::Shape(_) => 1,
            Selector::Class(_) => 2,
            Selector::Id(_) => 3,
        }
    }

    /// Whether the selector applies to a node; shape and id compare exactly, case-sensitively.
    pub fn matches(&self, node_id: &str, shape: &str, classes: &[String]) -> bool {
        match self {
            Selector::Universal => true,
            Selector::Shape(s) => s == shape,
            Selector::Class(c) => classes.iter().any(|k| k == c),
            Selector::Id(id) => id == node_id,
        }
    }
}

/// Writes the selector as it appears in a stylesheet, for messages.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Universal => f.write_str("*"),
            Selector::Shape(s) => f.write_str(s),
            Selector::Class(c) => write!(f, ".{c}"),
            Selector::Id(id) => write!(f, "#{id}"),
        }
    }
}

/// One `property: value` pair, with offsets so lints can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    pub property: StyleProperty,
    /// The value with quotes removed and escapes decoded.
    pub value: String,
    /// Byte offset of the property name.
    pub offset: usize,
    /// Byte offset of the value (its opening quote, if quoted).
    pub value_offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    selectors: Vec<(Selector, usize)>,
    declarations: Vec<Declaration>,
}

/// A parsed `model_stylesheet`: rules in source order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stylesheet {
    rules: Vec<Rule>,
}

impl Stylesheet {
    /// Parses the decoded attribute text; an empty or comment-only text gives an empty sheet.
    pub fn parse(text: &str) -> Result<Stylesheet, StylesheetError> {
        let mut parser = Parser { text, pos: 0 };
        let mut rules = Vec::new();
        loop {
            parser.skip_trivia()?;
            if parser.peek().is_none() {
                return Ok(Stylesheet { rules });
            }
            rules.push(parser.rule()?);
        }
    }

    /// True when there are no rules, so callers can skip resolution entirely.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The winning value of each property for a node, by specificity then source order.
    ///
    /// A rule applies with the specificity of its most specific matching selector, as in CSS.
    pub fn resolve(&self, node_id: &str, shape: &str, classes: &[String]) -> ResolvedStyle<'_> {
        let mut best: [Option<(u8, &str)>; StyleProperty::ALL.len()] = [None; StyleProperty::ALL.len()];
        for rule in &self.rules {
            let specificity = rule
                .selectors
                .iter()
                .filter(|(s, _)| s.matches(node_id, shape, classes))
                .map(|(s, _)| s.specificity())
                .max();
            let Some(specificity) = specificity else {
                continue;
            };
            for decl in &rule.declarations {
                let slot = &mut best[decl.property as usize];
                // `>=` so that later rules (and later declarations) win ties.
                if !matches!(slot, Some((s, _)) if *s > specificity) {
                    *slot = Some((specificity, decl.value.as_str()));
                }
            }
        }
        let [llm_model, llm_provider, reasoning_effort, backend, image] = best.map(|b| b.map(|(_, v)| v));
        ResolvedStyle { llm_model, llm_provider, reasoning_effort, backend, image }
    }

    /// Every selector with the byte offset it starts at, for lint rules (e.g. a `#id` naming no node).
    pub fn selectors(&self) -> impl Iterator<Item = (&Selector, usize)> {
        self.rules.iter().flat_map(|r| r.selectors.iter().map(|(s, at)| (s, *at)))
    }

    /// Every declaration in source order, for lint rules about values (e.g. an unknown provider).
    pub fn declarations(&self) -> impl Iterator<Item = &Declaration> {
        self.rules.iter().flat_map(|r| r.declarations.iter())
    }
}

/// The stylesheet's values for one node; `None` where no rule sets the property.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResolvedStyle<'a> {
    pub llm_model: Option<&'a str>,
    pub llm_provider: Option<&'a str>,
    pub reasoning_effort: Option<&'a str>,
    pub backend: Option<&'a str>,
    pub image: Option<&'a str>,
}

impl<'a> ResolvedStyle<'a> {
    /// The value for one property, so callers can loop over [`StyleProperty::ALL`].
    pub fn get(&self, property: StyleProperty) -> Option<&'a str> {
        match property {
            StyleProperty::LlmModel => self.llm_model,
            StyleProperty::LlmProvider => self.llm_provider,
            StyleProperty::ReasoningEffort => self.reasoning_effort,
            StyleProperty::Backend => self.backend,
            StyleProperty::Image => self.image,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StylesheetError {
    /// Byte offset inside the stylesheet text where the problem is.
    pub offset: usize,
    /// Plain words, without position: the caller adds the location.
    pub message: String,
}

fn error(offset: usize, message: impl Into<String>) -> StylesheetError {
    StylesheetError { offset, message: message.into() }
}

const PROPERTY_LIST: &str = "expected llm_model, llm_provider, reasoning_effort, backend or image";

fn unknown_property(name: &str, offset: usize) -> StylesheetError {
    if let Some((_, why)) = UNSUPPORTED_PROPERTIES.iter().find(|(property, _)| *property == name) {
        return error(offset, *why);
    }
    // Canonical names first: `min_by_key` keeps the first of equally close candidates.
    const NAMES: [&str; 6] =
        ["llm_model", "llm_provider", "reasoning_effort", "backend", "model", "provider"];
    let lower = name.to_ascii_lowercase();
    let hint = NAMES
        .iter()
        .map(|n| (strsim::levenshtein(&lower, n), n))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d);
    let message = match hint {
        Some((_, n)) => {
            format!("unknown property `{name}` (did you mean `{n}`?); {PROPERTY_LIST}")
        }
        None => format!("unknown property `{name}`; {PROPERTY_LIST}"),
    };
    error(offset, message)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Class names, and property names (so `llm-model` reaches the did-you-mean hint).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A recursive-descent parser over the text; `pos` is always on a char boundary.
struct Parser<'t> {
    text: &'t str,
    pos: usize,
}

impl<'t> Parser<'t> {
    fn rest(&self) -> &'t str {
        &self.text[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn eat_while(&mut self, keep: impl Fn(char) -> bool) -> &'t str {
        let rest = self.rest();
        let len = rest.find(|c| !keep(c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    /// Skips whitespace and `/* ... */` comments.
    fn skip_trivia(&mut self) -> Result<(), StylesheetError> {
        loop {
            self.eat_while(char::is_whitespace);
            if !self.rest().starts_with("/*") {
                return Ok(());
            }
            match self.rest()[2..].find("*/") {
                Some(end) => self.pos += end + 4,
                None => return Err(error(self.pos, "unclosed comment")),
            }
        }
    }

    /// What sits at the cursor, for "found ..." messages: a word, one character, or the end.
    fn found(&self) -> String {
        let rest = self.rest();
        match rest.chars().next() {
            None => "the end of the stylesheet".to_string(),
            Some(c) if is_name_char(c) => {
                let len = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
                format!("`{}`", &rest[..len])
            }
            Some(c) => format!("`{c}`"),
        }
    }

    fn rule(&mut self) -> Result<Rule, StylesheetError> {
        let mut selectors = Vec::new();
        loop {
            let start = self.pos;
            let selector = self.selector()?;
            self.skip_trivia()?;
            match self.peek() {
                Some(',') => {
                    self.pos += 1;
                    self.skip_trivia()?;
                }
                Some('{') => {
                    selectors.push((selector, start));
                    break;
                }
                _ => {
                    let message = format!("expected `{{` after selector `{selector}`");
                    return Err(error(self.pos, message));
                }
            }
            selectors.push((selector, start));
        }
        let open = self.pos;
        self.pos += 1;
        let mut declarations = Vec::new();
        loop {
            self.skip_trivia()?;
            match self.peek() {
                None => {
                    let message = "unclosed rule: expected `}` before the end of the stylesheet";
                    return Err(error(open, message));
                }
                Some('}') => {
                    self.pos += 1;
                    return Ok(Rule { selectors, declarations });
                }
                // Empty declarations (`;;`, `{ ; }`) are harmless.
                Some(';') => self.pos += 1,
                Some(_) => {
                    let decl = self.declaration()?;
                    self.skip_trivia()?;
                    match self.peek() {
                        Some(';') => self.pos += 1,
                        Some('}') | None => {}
                        Some(_) => {
                            let name = decl.property.attribute();
                            let message = format!(
                                "expected `;` or `}}` after the value of `{name}`, found {}",
                                self.found()
                            );
                            return Err(error(self.pos, message));
                        }
                    }
                    declarations.push(decl);
                }
            }
        }
    }

    fn selector(&mut self) -> Result<Selector, StylesheetError> {
        match self.peek() {
            Some('*') => {
                self.pos += 1;
                Ok(Selector::Universal)
            }
            Some('.') => {
                self.pos += 1;
                let name = self.eat_while(is_name_char);
                if name.is_empty() {
                    let message = format!("expected a class name after `.`, found {}", self.found());
                    return Err(error(self.pos, message));
                }
                Ok(Selector::Class(name.to_string()))
            }
            Some('#') => {
                self.pos += 1;
                if !self.peek().is_some_and(is_ident_start) {
                    let message = format!("expected a node id after `#`, found {}", self.found());
                    return Err(error(self.pos, message));
                }
                Ok(Selector::Id(self.eat_while(is_ident_char).to_string()))
            }
            Some(c) if is_ident_start(c) => Ok(Selector::Shape(self.eat_while(is_ident_char).into())),
            _ => {
                let message = format!(
                    "expected a selector (`*`, a shape name, `.class` or `#id`), found {}",
                    self.found()
                );
                Err(error(self.pos, message))
            }
        }
    }

    fn declaration(&mut self) -> Result<Declaration, StylesheetError> {
        let offset = self.pos;
        let name = self.eat_while(is_name_char);
        if name.is_empty() {
            return Err(error(offset, format!("expected a property name, found {}", self.found())));
        }
        let property = StyleProperty::from_name(name).ok_or_else(|| unknown_property(name, offset))?;
        self.skip_trivia()?;
        match self.peek() {
            Some(':' | '=') => self.pos += 1,
            _ => return Err(error(self.pos, format!("expected `:` or `=` after `{name}`"))),
        }
        self.skip_trivia()?;
        let value_offset = self.pos;
        let value = match self.peek() {
            Some(quote @ ('"' | '\'')) => self.quoted(quote)?,
            _ => self.bare_value().to_string(),
        };
        if value.is_empty() {
            let found = if self.pos > value_offset { "an empty string".into() } else { self.found() };
            return Err(error(value_offset, format!("expected a value for `{name}`, found {found}")));
        }
        if property == StyleProperty::ReasoningEffort && !matches!(value.as_str(), "low" | "medium" | "high")
        {
            let message = format!("reasoning_effort must be low, medium or high, found `{value}`");
            return Err(error(value_offset, message));
        }
        Ok(Declaration { property, value, offset, value_offset })
    }

    /// An unquoted value runs to whitespace, `;`, a brace, a quote or a comment.
    fn bare_value(&mut self) -> &'t str {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|&(i, c)| {
                c.is_whitespace() || matches!(c, ';' | '{' | '}' | '"' | '\'') || rest[i..].starts_with("/*")
            })
            .map_or(rest.len(), |(i, _)| i);
        self.pos += len;
        &rest[..len]
    }

    /// A quoted value; `\"`, `\'` and `\\` are escapes, any other backslash is kept literally.
    fn quoted(&mut self, quote: char) -> Result<String, StylesheetError> {
        let open = self.pos;
        let body = &self.rest()[1..];
        let mut value = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == quote {
                self.pos += 1 + i + 1;
                return Ok(value);
            }
            if c != '\\' {
                value.push(c);
                continue;
            }
            match chars.next() {
                Some((_, e @ ('"' | '\'' | '\\'))) => value.push(e),
                Some((_, e)) => {
                    value.push('\\');
                    value.push(e);
                }
                None => break,
            }
        }
        Err(error(open, format!("unclosed string: expected a closing `{quote}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
* { llm_model: claude-sonnet-4-5; llm_provider: anthropic; }
box { llm_model: claude-opus-4-6 }
.code, .critical { llm_model: claude-opus-4-6; reasoning_effort: high; }
#critical_review { model = "gpt-5.2"; provider = openai; reasoning_effort: high; }
/* comments allowed */
"#;

    fn parse(text: &str) -> Stylesheet {
        match Stylesheet::parse(text) {
            Ok(sheet) => sheet,
            Err(e) => panic!("{text:?} failed at {}: {}", e.offset, e.message),
        }
    }

    fn err(text: &str) -> (usize, String) {
        match Stylesheet::parse(text) {
            Ok(sheet) => panic!("{text:?} parsed: {sheet:?}"),
            Err(e) => (e.offset, e.message),
        }
    }

    fn classes(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn model<'a>(sheet: &'a Stylesheet, id: &str, shape: &str, cls: &[&str]) -> Option<&'a str> {
        sheet.resolve(id, shape, &classes(cls)).llm_model
    }

    #[test]
    fn parses_the_example() {
        let sheet = parse(EXAMPLE);
        let selectors: Vec<String> = sheet.selectors().map(|(s, _)| s.to_string()).collect();
        assert_eq!(selectors, ["*", "box", ".code", ".critical", "#critical_review"]);
        let offsets: Vec<usize> = sheet.selectors().map(|(_, at)| at).collect();
        for (selector, at) in selectors.iter().zip(offsets) {
            assert!(EXAMPLE[at..].starts_with(selector.as_str()));
        }

        let plain = sheet.resolve("a", "ellipse", &[]);
        assert_eq!(plain.llm_model, Some("claude-sonnet-4-5"));
        assert_eq!(plain.llm_provider, Some("anthropic"));
        assert_eq!(plain.reasoning_effort, None);

        let review = sheet.resolve("critical_review", "box", &classes(&["code"]));
        assert_eq!(review.get(StyleProperty::LlmModel), Some("gpt-5.2"));
        assert_eq!(review.get(StyleProperty::LlmProvider), Some("openai"));
        assert_eq!(review.get(StyleProperty::ReasoningEffort), Some("high"));
        assert_eq!(sheet.declarations().count(), 8);
    }

    #[test]
    fn each_selector_kind_matches() {
        let sheet = parse("* { model: u } tab { model: s } .c { model: k } #n { model: i }");
        assert_eq!(model(&sheet, "x", "box", &[]), Some("u"));
        assert_eq!(model(&sheet, "x", "tab", &[]), Some("s"));
        assert_eq!(model(&sheet, "x", "box", &["other", "c"]), Some("k"));
        assert_eq!(model(&sheet, "n", "box", &[]), Some("i"));
        assert_eq!(parse("#n { model: i }").resolve("m", "box", &[]), ResolvedStyle::default());
    }

    #[test]
    fn specificity_beats_source_order() {
        assert_eq!(Selector::Universal.specificity(), 0);
        let sheet = parse("#n { model: i } .c { model: k } tab { model: s } * { model: u }");
        assert_eq!(model(&sheet, "n", "tab", &["c"]), Some("i"));
        assert_eq!(model(&sheet, "x", "tab", &["c"]), Some("k"));
        assert_eq!(model(&sheet, "x", "tab", &[]), Some("s"));
        assert_eq!(model(&sheet, "x", "box", &[]), Some("u"));
    }

    #[test]
    fn later_rule_wins_at_equal_specificity() {
        let sheet = parse(".a { model: first; provider: p } .b { model: second }");
        let style = sheet.resolve("x", "box", &classes(&["a", "b"]));
        assert_eq!(style.llm_model, Some("second"));
        assert_eq!(style.llm_provider, Some("p"));
        assert_eq!(model(&parse("* { model: a; model: b }"), "x", "box", &[]), Some("b"));
    }

    #[test]
    fn selector_list_uses_the_most_specific_match() {
        let sheet = parse(".a, #b { model: list } .c { model: class }");
        assert_eq!(model(&sheet, "x", "box", &["a"]), Some("list"));
        assert_eq!(model(&sheet, "b", "box", &[]), Some("list"));
        // Via `#b` the list rule has id specificity, so the later class rule loses.
        assert_eq!(model(&sheet, "b", "box", &["c"]), Some("list"));
        assert_eq!(model(&sheet, "x", "box", &["a", "c"]), Some("class"));
    }

    #[test]
    fn aliases_separators_and_quotes() {
        let sheet = parse(r#"* { model = 'it\'s'; provider: "open\"ai\\" ; reasoning_effort = "low" }"#);
        let style = sheet.resolve("x", "box", &[]);
        assert_eq!(style.llm_model, Some("it's"));
        assert_eq!(style.llm_provider, Some("open\"ai\\"));
        assert_eq!(style.reasoning_effort, Some("low"));
        let sheet = parse("* { llm_model: a/b:c=d }");
        assert_eq!(model(&sheet, "x", "box", &[]), Some("a/b:c=d"));
        assert_eq!(
            StyleProperty::ALL.map(StyleProperty::attribute),
            ["llm_model", "llm_provider", "reasoning_effort", "backend", "image"]
        );
    }

    #[test]
    fn comments_and_empty_sheets() {
        for text in ["", "  \n\t", "/* only */", "/**/ /* a */\n"] {
            assert!(parse(text).is_empty(), "{text:?}");
        }
        let sheet = parse("/*a*/*/*b*/{/*c*/model/*d*/:/*e*/x/*f*/;/*g*/}/*h*/");
        assert_eq!(model(&sheet, "n", "box", &[]), Some("x"));
        assert!(!sheet.is_empty());
        assert!(parse("box {} .a { ; ; }").declarations().next().is_none());
    }

    #[test]
    fn a_container_image_is_a_property_too() {
        let sheet = parse("* { image: debian:12 } .rust { image: \"localhost/rust:1.85\" }");
        let rust = ["rust".to_string()];
        assert_eq!(sheet.resolve("n", "box", &rust).get(StyleProperty::Image), Some("localhost/rust:1.85"));
        assert_eq!(sheet.resolve("n", "box", &[]).get(StyleProperty::Image), Some("debian:12"));
        assert_eq!(StyleProperty::from_name("image").map(StyleProperty::attribute), Some("image"));
    }

    #[test]
    fn error_messages_and_offsets() {
        let cases: [(&str, usize, &str); 13] = [
            (".code llm_model: x }", 6, "expected `{` after selector `.code`"),
            (
                "box { llm_modle: x }",
                6,
                "unknown property `llm_modle` (did you mean `llm_model`?); expected llm_model, \
                 llm_provider, reasoning_effort, backend or image",
            ),
            (
                "box { temperature: 1 }",
                6,
                "unknown property `temperature`; expected llm_model, llm_provider, reasoning_effort, backend or image",
            ),
            ("box { llm_model x }", 16, "expected `:` or `=` after `llm_model`"),
            ("box { llm_model: x", 4, "unclosed rule: expected `}` before the end of the stylesheet"),
            (
                "box { reasoning_effort: extreme }",
                24,
                "reasoning_effort must be low, medium or high, found `extreme`",
            ),
            ("box {} % {}", 7, "expected a selector (`*`, a shape name, `.class` or `#id`), found `%`"),
            ("box {} /* x", 7, "unclosed comment"),
            (".a, { }", 4, "expected a selector (`*`, a shape name, `.class` or `#id`), found `{`"),
            ("#9 { }", 1, "expected a node id after `#`, found `9`"),
            ("* { model: }", 11, "expected a value for `model`, found `}`"),
            ("* { model: 'x }", 11, "unclosed string: expected a closing `'`"),
            ("* { model: a b }", 13, "expected `;` or `}` after the value of `llm_model`, found `b`"),
        ];
        for (text, offset, message) in cases {
            assert_eq!(err(text), (offset, message.to_string()), "{text:?}");
        }
    }

    #[test]
    fn random_input_never_panics() {
        const PIECES: [&str; 28] = [
            "*",
            "box",
            ".",
            "#",
            "a",
            "_",
            "-",
            "{",
            "}",
            ";",
            ":",
            "=",
            ",",
            " ",
            "\n",
            "\"",
            "'",
            "\\",
            "/",
            "/*",
            "*/",
            "llm_model",
            "model",
            "reasoning_effort",
            "high",
            "é",
            "%",
            "9",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..3000 {
            let len = next() % 24;
            let text: String = (0..len).map(|_| PIECES[(next() % 28) as usize]).collect();
            match Stylesheet::parse(&text) {
                Ok(sheet) => {
                    ok += 1;
                    let _ = sheet.resolve("a", "box", &classes(&["a"]));
                    assert!(sheet.selectors().all(|(_, at)| at < text.len()));
                }
                Err(e) => {
                    failed += 1;
                    assert!(e.offset <= text.len() && text.is_char_boundary(e.offset), "{text:?}");
                    assert!(!e.message.is_empty());
                }
            }
        }
        assert!(ok > 0 && failed > 0);
    }
}
