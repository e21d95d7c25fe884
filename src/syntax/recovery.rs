//! Parsing with recovery, for editors: a file with a syntax error still gets the findings of the
//! rest. The statement the error is in is blanked out (spaces, so every other position stays
//! where it was) and the text is parsed again; an error at the end of the file (an unclosed
//! graph) is recovered by closing it.

use std::borrow::Cow;

use super::parser::{parse, statement_could_start};
use super::reparse::{changed_region, reparse, Edit};
use super::syntax_error::SyntaxError;
use super::tree::SyntaxTree;

/// How many times one recovery patches the text before it gives up.
const MAX_RECOVERIES: usize = 16;

/// What [`parse_recovering`] found: every syntax error, and what `use_tree` made of the tree of
/// the text the parser accepted (the original, or with the lines of the errors blanked, positions
/// unchanged; text may be appended), if it got there.
#[derive(Debug, Clone)]
pub struct Recovered<R> {
    pub errors: Vec<SyntaxError>,
    pub parsed: Option<R>,
}

/// Parses `text`; on a syntax error, blanks the line it is on (or closes the graph, for an error at
/// the end) and tries again, up to a bound. The first tree that parses is given to `use_tree`
/// with the text it was parsed from.
pub fn parse_recovering<R>(text: &str, use_tree: impl FnOnce(&str, SyntaxTree<'_>) -> R) -> Recovered<R> {
    recover(text, None, use_tree)
}

/// As [`parse_recovering`], from `earlier`, the tree of the text before `edit`: each attempt
/// first parses again only the statements the edit (and the lines blanked since) touched, and
/// parses the whole text only to find an error as a whole parse reports it.
pub fn reparse_recovering<R>(
    earlier: SyntaxTree<'static>,
    edit: Edit,
    text: &str,
    use_tree: impl FnOnce(&str, SyntaxTree<'_>) -> R,
) -> Recovered<R> {
    recover(text, Some((earlier, edit)), use_tree)
}

fn recover<R>(
    text: &str,
    mut earlier: Option<(SyntaxTree<'static>, Edit)>,
    use_tree: impl FnOnce(&str, SyntaxTree<'_>) -> R,
) -> Recovered<R> {
    let mut errors = Vec::new();
    let mut patched: Cow<'_, str> = Cow::Borrowed(text);
    for _ in 0..MAX_RECOVERIES {
        if let Some((mut tree, edit)) = earlier.take() {
            if reparse(&mut tree, &patched, edit) {
                let parsed = use_tree(&patched, tree);
                return Recovered { errors, parsed: Some(parsed) };
            }
            earlier = Some((tree, edit));
        }
        let error = match parse(&patched) {
            Ok(tree) => {
                let parsed = use_tree(&patched, tree);
                return Recovered { errors, parsed: Some(parsed) };
            }
            Err(error) => error,
        };
        // An error the patched text made (past the end of the original) is not the author's.
        if error.span.start <= text.len() {
            errors.push(error.clone());
        }
        // What the closing brace added cannot be blanked: give up.
        if error.span.start >= text.len() && patched.len() > text.len() {
            return Recovered { errors, parsed: None };
        }
        match patch(&patched, &error) {
            Some(next) if next != patched.as_ref() => {
                if let (Some((_, edit)), Some(blanked)) = (&mut earlier, changed_region(&patched, &next)) {
                    *edit = edit.then(blanked);
                }
                patched = Cow::Owned(next);
            }
            _ => return Recovered { errors, parsed: None },
        }
    }
    Recovered { errors, parsed: None }
}

/// The text with the error's line blanked, or closed with `}` when the error is at its end.
fn patch(text: &str, error: &SyntaxError) -> Option<String> {
    let at = error.span.start.min(text.len());
    if text[at..].trim().is_empty() {
        if text.ends_with("\n}\n") {
            return None; // closing it already did not help
        }
        return Some(format!("{text}\n}}\n"));
    }
    let mut start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let mut end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    // An error at a closing brace is the unfinished statement before it (`a -> ` then `}`); so is
    // an error at most one token into its line where no statement could start: the unfinished
    // statement of the line before took that token (`[prompt=` then `s5 [..]`, `a [pro` then
    // `s5`). Blanking the line before keeps this one, and the statements after it, for the rest.
    let prefix = &text[start..at];
    let at_brace = prefix.trim().is_empty() && text[at..].starts_with('}');
    let taken = prefix.split_whitespace().count() <= 1 && !statement_could_start(error);
    if at_brace || taken {
        let before = text[..start].trim_end();
        if !before.ends_with('{') && !before.is_empty() {
            end = before.len();
            start = before.rfind('\n').map_or(0, |i| i + 1);
        }
    }
    let line = &text[start..end];
    // A line that opens the graph is kept: blanking it loses everything.
    if line.contains('{') && start == first_code_line(text) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    out.extend(std::iter::repeat_n(' ', line.len()));
    out.push_str(&text[end..]);
    Some(out)
}

/// Where the first line that is not blank starts.
fn first_code_line(text: &str) -> usize {
    let trimmed = text.trim_start();
    let at = text.len() - trimmed.len();
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_statement_is_blanked_and_the_rest_parses_at_the_same_positions() {
        let text = "digraph w {\n  start [shape=Mdiamond]\n  a -> ;\n  b [label=\"x\"]\n}\n";
        let recovered = parse_recovering(text, |patched, _| patched.to_string());
        assert_eq!(recovered.errors.len(), 1, "{:?}", recovered.errors);
        let patched = recovered.parsed.expect("recovers");
        assert_eq!(patched.len(), text.len());
        assert_eq!(patched.find("b [label"), text.find("b [label"));
        assert!(!patched.contains("a ->"));
    }

    #[test]
    fn an_unfinished_statement_before_the_closing_brace_is_blanked() {
        let text = "digraph w {\n  start -> exit\n  plan -> \n}\n";
        let recovered = parse_recovering(text, |patched, _| patched.to_string());
        assert_eq!(recovered.errors.len(), 1);
        let patched = recovered.parsed.expect("recovers");
        assert!(patched.contains("start -> exit") && !patched.contains("plan"), "{patched}");
    }

    #[test]
    fn an_unclosed_graph_is_closed() {
        let recovered = parse_recovering("digraph w {\n  start -> exit\n", |patched, tree| {
            assert_eq!(tree.statements.len(), 1);
            patched.to_string()
        });
        assert_eq!(recovered.errors.len(), 1);
        assert!(recovered.parsed.expect("recovers").contains("start -> exit"));
    }

    #[test]
    fn recovering_from_an_earlier_tree_finds_what_a_whole_recovery_finds() {
        let before = "digraph w {\n  start [shape=Mdiamond]\n  a [label=\"x\"]\n  b [label=\"y\"]\n  start -> a -> b\n}\n";
        let tree = parse(before).unwrap().into_owned();
        // A statement half typed on a new line.
        let at = before.find("  b [").unwrap();
        let text = format!("{}  draft [prompt=\n{}", &before[..at], &before[at..]);
        let edit = Edit::replace(at, at, "  draft [prompt=\n".len());
        let whole = parse_recovering(&text, |patched, tree| (patched.to_string(), tree.into_owned()));
        let partial =
            reparse_recovering(tree, edit, &text, |patched, tree| (patched.to_string(), tree.into_owned()));
        assert_eq!(partial.errors, whole.errors);
        assert_eq!(partial.errors.len(), 1, "the statements after the broken one are kept");
        assert_eq!(partial.parsed, whole.parsed);
        let (patched, tree) = partial.parsed.unwrap();
        assert!(!patched.contains("draft") && patched.contains("b [label"), "{patched}");
        assert_eq!(tree.statements.len(), 4);
    }

    #[test]
    fn a_valid_file_has_no_errors_and_garbage_never_panics() {
        let recovered = parse_recovering("digraph w { a -> b }", |patched, _| patched.to_string());
        assert!(recovered.errors.is_empty());
        assert_eq!(recovered.parsed.as_deref(), Some("digraph w { a -> b }"));
        for garbage in
            ["", "}", "{{{{", "digraph", "digraph {", "\"", "digraph w { a [x=\"", "é\n\u{0}ü -> {"]
        {
            let recovered = parse_recovering(garbage, |_, _| ());
            assert!(!recovered.errors.is_empty() || recovered.parsed.is_some(), "{garbage:?}");
        }
    }
}
