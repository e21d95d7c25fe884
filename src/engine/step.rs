//! Step mode (`fabro run --step`): after every stage of the main line, a reviewer sees what the
//! stage did and where the run goes next, and decides: go on, leave a note for the next LLM
//! stage, or stop here (the run pauses and resumes at the next stage).
//!
//! A note waits in the context under [`OPERATOR_NOTES_KEY`], so it is checkpointed with the run
//! and survives a pause or a resume; the next LLM stage receives it in its preamble, and its
//! `status.json` records it.

/// Where operator notes wait for the next LLM stage.
pub const OPERATOR_NOTES_KEY: &str = "internal.operator_notes";

/// The heading the notes get in a preamble.
pub const OPERATOR_NOTES_HEADING: &str = "## Note from the operator";

/// What the reviewer is shown about a finished stage.
#[derive(Debug, Clone)]
pub struct StageReview<'a> {
    pub node_id: &'a str,
    pub visit: u32,
    pub status: &'a str,
    pub failure_reason: Option<&'a str>,
    /// The context keys the stage set, sorted.
    pub changed_keys: Vec<&'a str>,
    /// The stage the run goes to next; `None` when the run ends here.
    pub next_node: Option<&'a str>,
}

/// What the reviewer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDecision {
    Continue,
    /// Go on, and tell the next LLM stage this.
    Note(String),
    /// Pause the run here; it resumes at the next stage.
    Stop,
}

/// Reviews each stage in step mode (the CLI asks on the terminal).
#[async_trait::async_trait]
pub trait StepReviewer: Send + Sync {
    async fn review(&self, stage: &StageReview<'_>) -> StepDecision;
}

/// Operator notes waiting in `context` for the next LLM stage.
pub fn pending_notes(context: &crate::context::Context) -> Vec<String> {
    context
        .get(OPERATOR_NOTES_KEY)
        .and_then(serde_json::Value::as_array)
        .map(|notes| notes.iter().filter_map(|note| note.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The preamble with the operator's notes after it, under [`OPERATOR_NOTES_HEADING`].
pub fn with_notes(preamble: Option<&str>, notes: &[String]) -> String {
    let mut text = preamble.map(|p| format!("{}\n\n", p.trim_end())).unwrap_or_default();
    text.push_str(OPERATOR_NOTES_HEADING);
    text.push_str("\n\n");
    for note in notes {
        text.push_str(note.trim());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_follow_the_preamble_under_their_heading() {
        assert_eq!(
            with_notes(Some("Goal: x\n"), &["Use the v2 API.".into(), " Keep it small. ".into()]),
            "Goal: x\n\n## Note from the operator\n\nUse the v2 API.\nKeep it small.\n"
        );
        assert_eq!(with_notes(None, &["Stop.".into()]), "## Note from the operator\n\nStop.\n");
    }
}
