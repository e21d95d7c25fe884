//! The facts a preamble is made of, gathered before a stage runs: the goal, the run id, the
//! completed stages (each a [`StageSummary`] gathered when it completed) and the context values a
//! preamble may show, with offloaded values resolved to their file. Gathering decides what is
//! known; rendering decides how much of it a mode shows, so nothing here formats text.

use std::path::PathBuf;

use serde_json::Value;

use super::PreambleInput;
use crate::context::artifacts::Pointer;
use crate::context::Context;
use crate::graph::settings::FidelityMode;
use crate::run_dir::stage_summary::StageSummary;

/// Everything a preamble can say about the run so far.
#[derive(Debug, Clone)]
pub struct PreambleFacts<'a> {
    /// The workflow's goal, trimmed.
    pub goal: &'a str,
    pub run_id: &'a str,
    /// Completed stage visits, oldest first.
    pub stages: &'a [StageSummary],
    /// The context values a preamble may show, in key order; see [`is_internal_key`].
    pub context: Vec<ContextEntry<'a>>,
}

/// One context value a preamble may show.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextEntry<'a> {
    pub key: &'a str,
    pub value: ContextValue<'a>,
}

/// A context value as a preamble knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum ContextValue<'a> {
    /// A large value in the artifact store: its file and, when the file could be read, its size
    /// in bytes. Its content is never read: a preamble refers to the file instead.
    Offloaded { path: PathBuf, bytes: Option<u64> },
    /// A value held in the context itself.
    Inline(&'a Value),
}

impl<'a> PreambleFacts<'a> {
    /// The facts `mode` renders. Full and truncate show no context, so none is gathered for them;
    /// the other modes get every value they may show, even the ones their budget will leave out.
    pub fn gather(input: &PreambleInput<'a>, mode: FidelityMode) -> PreambleFacts<'a> {
        let shows_context = !matches!(mode, FidelityMode::Full | FidelityMode::Truncate);
        PreambleFacts {
            goal: input.goal.trim(),
            run_id: input.run_id,
            stages: input.stages,
            context: if shows_context { gather_context(input.context) } else { Vec::new() },
        }
    }
}

/// The context values a preamble may show, in key order.
fn gather_context(context: &Context) -> Vec<ContextEntry<'_>> {
    context
        .iter()
        .filter(|(key, _)| !is_internal_key(key))
        .map(|(key, value)| ContextEntry { key, value: ContextValue::of(value) })
        .collect()
}

impl<'a> ContextValue<'a> {
    fn of(value: &'a Value) -> ContextValue<'a> {
        match Pointer::parse(value) {
            // One `stat` per offloaded value (values over 100 KB only); no content is read.
            Some(pointer) => ContextValue::Offloaded {
                bytes: std::fs::metadata(pointer.path()).ok().map(|meta| meta.len()),
                path: pointer.path().to_path_buf(),
            },
            None => ContextValue::Inline(value),
        }
    }
}

/// Whether preambles leave a context key out: engine bookkeeping, and `response.*` (the previous
/// stage's answer, which the preamble shows as such).
pub fn is_internal_key(key: &str) -> bool {
    crate::context::is_bookkeeping(key) || key.starts_with("response.")
}

#[cfg(test)]
mod tests {
    use super::super::render::fixtures::{fixture_context, render, ALL_PREAMBLE_MODES};
    use super::super::{build, PreambleInput};
    use super::*;

    #[test]
    fn gathering_leaves_out_bookkeeping_and_responses_and_reads_no_context_for_truncate() {
        let context = fixture_context();
        let input = PreambleInput { goal: "  Ship it \n", run_id: "r-1", stages: &[], context: &context };
        let facts = PreambleFacts::gather(&input, FidelityMode::Compact);
        assert_eq!(facts.goal, "Ship it");
        let keys: Vec<&str> = facts.context.iter().map(|entry| entry.key).collect();
        assert_eq!(
            keys,
            [
                "command.exit_code",
                "command.output",
                "human.gate.label",
                "last_response",
                "last_stage",
                "outcome",
                "tests_passed"
            ]
        );
        assert!(PreambleFacts::gather(&input, FidelityMode::Truncate).context.is_empty());
    }

    #[test]
    fn internal_keys_never_appear() {
        for mode in ALL_PREAMBLE_MODES {
            let text = render(mode).unwrap();
            for needle in
                ["internal.", "current_node", "graph.goal", "thread.id", "response.plan", "the whole plan"]
            {
                assert!(!text.contains(needle), "{mode}: {needle} in\n{text}");
            }
        }
        assert!(
            is_internal_key("currently") && is_internal_key("response.x") && !is_internal_key("responses")
        );
    }

    #[test]
    fn offloaded_values_show_as_a_reference() {
        let dir = tempfile::tempdir().unwrap();
        let values = dir.path().join("artifacts").join("values");
        std::fs::create_dir_all(&values).unwrap();
        let path = values.join(format!("{}.json", crate::context::artifacts::encode_key("command.output")));
        let raw = format!("\"{}\"", "SECRET-RAW-CONTENT ".repeat(10_000));
        std::fs::write(&path, &raw).unwrap();
        let mut context = Context::new();
        context.set("command.output", format!("file://{}", path.display()));
        context.set("notes", format!("file://{}/artifacts/values/gone.json", dir.path().display()));
        let input = PreambleInput { goal: "g", run_id: "r", stages: &[], context: &context };
        for mode in [FidelityMode::Compact, FidelityMode::SummaryMedium, FidelityMode::SummaryHigh] {
            let text = build(mode, &input).unwrap();
            assert!(text.contains(&format!("(offloaded: {}, 185.5 KB)", path.display())), "{text}");
            assert!(
                text.contains(&format!("(offloaded: {}/artifacts/values/gone.json)", dir.path().display()))
            );
            assert!(!text.contains("SECRET") && !text.contains("file://"), "{text}");
        }
    }
}
