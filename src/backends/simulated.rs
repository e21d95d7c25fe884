//! The `simulated` backend: deterministic placeholder text, for `--simulate` and `--dry-run`.

use super::{Backend, LlmRequest, LlmResponse};
use crate::llm::BackendError;
use crate::usage::Usage;

/// Answers every call with text naming the stage and visit; never fails.
pub struct SimulatedBackend;

#[async_trait::async_trait]
impl Backend for SimulatedBackend {
    fn name(&self) -> &str {
        "simulated"
    }

    async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
        let mut text = format!(
            "[simulated] Stage `{}`, visit {}: the {} would answer the prompt here.",
            request.node_id,
            request.visit,
            if request.agentic { "agent" } else { "model" }
        );
        if let (Some(thread), false) = (request.thread, request.history.is_empty()) {
            text.push_str(&format!(
                " It continues thread `{thread}` after {} earlier messages.",
                request.history.len()
            ));
        }
        if let Some(first) = super::offered_choices(request.prompt).and_then(|ids| ids.into_iter().next()) {
            // Asked to choose (a fan-in stage): take the first offered, which is the best ranked.
            text.push_str(&format!("\nbest: {first}"));
        }
        // A rough token count (characters / 4) so usage figures are plausible.
        let usage = Usage {
            input_tokens: crate::usage::estimated_tokens(request.prompt.len()),
            output_tokens: crate::usage::estimated_tokens(text.len()),
            ..Usage::default()
        };
        Ok(LlmResponse {
            text,
            model: Some("simulated".to_string()),
            usage: Some(usage),
            ..LlmResponse::default()
        })
    }
}
