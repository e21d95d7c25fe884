//! Fan-in stages (`tripleoctagon`): consolidate the branches of the parallel stage before them.
//!
//! The stage reads `parallel.results`, picks the best branch, applies that branch's context
//! updates to the run, and (when branches worked in git worktrees) merges its commit into the work
//! directory. With a `prompt`, the model picks: it sees every branch's result and names one of
//! them exactly, with a last line `best: <branch id>`, a JSON object `{"best_id": "<branch id>"}`
//! or the branch id alone. Without a prompt, branches
//! rank by status (success, partial_success, retry, fail, cancelled), then by the numeric `score`
//! a branch set in its context (higher first; none ranks last), then by declaration order.
//!
//! The stage fails only when every branch failed (or a merge conflicts).

use serde_json::{Map, Value};

use crate::backends::LlmResponse;
use crate::branch_results::{consolidate, rank, BranchResult};
use crate::context::artifacts::ArtifactStore;
use crate::event::Event;
use crate::outcome::{Outcome, StageStatus};
use crate::run_dir::layout;
use crate::stage::{Handler, HandlerError, StageRun};

/// Characters of each context value shown to the model when it picks the best branch.
const VALUE_PREVIEW_CHARS: usize = 500;

pub struct FanInHandler;

#[async_trait::async_trait]
impl Handler for FanInHandler {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let results = branch_results(stage)?;
        if results.is_empty() {
            return Ok(Outcome::fail(format!(
                "fan-in stage `{}` found no `parallel.results`: it must be the join node of a parallel stage",
                stage.node.id
            )));
        }
        let ranked = rank(&results);
        let (best, answer) = match stage.node.prompt() {
            Some(template) => {
                let (best, answer) = ask_model(stage, template, &ranked).await?;
                (best, Some(answer))
            }
            None => (ranked[0], None),
        };
        let mut outcome = consolidate(&results, best);
        if let Some(response) = answer {
            // What the model's choice cost counts like any LLM stage's.
            outcome.usage = response.usage;
            outcome.model = response.model.clone();
            outcome.cost_usd = response.cost_usd;
            let answer = response.text;
            outcome = outcome
                .with_update(
                    "last_response",
                    answer.chars().take(super::llm::LAST_RESPONSE_CHARS).collect::<String>(),
                )
                .with_update(format!("response.{}", stage.node.id), answer);
        }
        if outcome.status == StageStatus::Fail {
            return Ok(outcome);
        }
        let base = stage.context.get_text(crate::worktree::branch::BASE_SHA_KEY);
        match (&best.head_sha, base) {
            (Some(head), Some(base)) => merge_best(stage, &base, head, &best.branch_id, outcome),
            _ => Ok(outcome),
        }
    }
}

/// Merges the best branch's commit into the work directory; a conflict fails the stage.
fn merge_best(
    stage: &StageRun<'_>,
    base: &str,
    head: &str,
    branch_id: &str,
    outcome: Outcome,
) -> Result<Outcome, HandlerError> {
    if stage.run.dry_run {
        return Ok(outcome);
    }
    match crate::worktree::branch::merge_into_work_dir(stage.work_dir, base, head, branch_id) {
        Ok(merge) => {
            let merged = Event::ParallelMerged {
                branch_id: branch_id.to_string(),
                commit: merge.commit.clone(),
                fast_forward: merge.fast_forward,
            };
            stage.run.events.stage_event(&stage.node.id, stage.visit, merged);
            let how = if merge.fast_forward { "fast-forwarded" } else { "merged with a merge commit" };
            let notes = format!(
                "{}; {how} the work directory to {}",
                outcome.notes.clone().unwrap_or_default(),
                merge.commit
            );
            Ok(outcome.with_notes(notes))
        }
        Err(crate::worktree::branch::MergeError::Conflict { paths }) => Ok(Outcome::fail(format!(
            "merging the best branch `{branch_id}` into the work directory conflicts in: {}; resolve by hand \
             (its commit is {head}) or rerun with a different best branch",
            paths.join(", ")
        ))),
        Err(error) => {
            Err(HandlerError::Terminal(format!("cannot merge the best branch `{branch_id}`: {error}")))
        }
    }
}

/// `parallel.results` from the context (read back from the artifact store when it was large).
fn branch_results(stage: &StageRun<'_>) -> Result<Vec<BranchResult>, HandlerError> {
    let Some(value) = stage.context.get("parallel.results") else { return Ok(Vec::new()) };
    let store = ArtifactStore::new(stage.run.run_dir, usize::MAX);
    let resolved = store
        .resolve(value)
        .map_err(|error| HandlerError::Terminal(format!("cannot read `parallel.results`: {error}")))?;
    serde_json::from_value(resolved.unwrap_or_else(|| value.clone())).map_err(|error| {
        HandlerError::Terminal(format!("`parallel.results` is not a list of branch results: {error}"))
    })
}

/// Asks the model to pick the best branch; its answer must name one (see [`named_branch`]).
async fn ask_model<'r>(
    stage: &StageRun<'_>,
    template: &str,
    ranked: &[&'r BranchResult],
) -> Result<(&'r BranchResult, LlmResponse), HandlerError> {
    let ids: Vec<&str> = ranked.iter().map(|r| r.branch_id.as_str()).collect();
    let mut prompt = super::llm::expand_prompt(template, stage.context);
    prompt.push_str("\n\n## Branches\n\nRanked by status and score, best first.\n");
    for result in ranked {
        prompt.push_str(&describe(result));
    }
    prompt.push_str(&crate::backends::choice_instruction(&ids));
    write(stage, layout::PROMPT, &prompt).await?;
    let (response, _) = super::llm::complete(stage, &super::llm::request_for(stage, &prompt)?).await?;
    write(stage, layout::RESPONSE, &response.text).await?;
    let chosen = named_branch(&response.text);
    match chosen.as_deref().and_then(|id| ranked.iter().find(|r| r.branch_id == id)) {
        Some(best) => Ok((best, response)),
        None => Err(HandlerError::Retryable(format!(
            "the model's answer does not name a branch: it must end with a line `best: <id>`, be a JSON \
             object {{\"best_id\": \"<id>\"}} or be the id alone, where <id> is exactly one of {}{}",
            ids.join(", "),
            chosen.map(|id| format!(" (it named `{id}`)")).unwrap_or_default()
        ))),
    }
}

/// The branch id an answer names, in the forms models use: a last line `best: <id>`, a JSON
/// object `{"best_id": "<id>"}` (alone or in a code fence), or an answer that is one word and
/// nothing else (`b10`). The caller matches it exactly against the branch ids: never a prefix.
fn named_branch(answer: &str) -> Option<String> {
    if let Some(id) = crate::backends::chosen(answer) {
        return Some(id.to_string());
    }
    let trimmed = answer.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(unfenced) {
        return object.get("best_id").and_then(Value::as_str).map(|id| id.trim().to_string());
    }
    let word = trimmed.trim_matches(|c: char| matches!(c, '`' | '"' | '\'' | '*' | '_' | '.'));
    (!word.is_empty() && !word.contains(char::is_whitespace)).then(|| word.to_string())
}

/// One branch as the model sees it.
fn describe(result: &BranchResult) -> String {
    let mut text = format!("\n### `{}`: {}\n", result.branch_id, result.status.as_str());
    if let Some(reason) = &result.failure_reason {
        text.push_str(&format!("- failure: {reason}\n"));
    }
    if let Some(notes) = &result.notes {
        text.push_str(&format!("- notes: {notes}\n"));
    }
    if let Some(score) = result.score() {
        text.push_str(&format!("- score: {score}\n"));
    }
    if let Some(response) = &result.last_response {
        text.push_str(&format!("- last response: {}\n", preview(&Value::String(response.clone()))));
    }
    let updates: &Map<String, Value> = &result.context_updates;
    for (key, value) in
        updates.iter().filter(|(key, _)| !matches!(key.as_str(), "last_response" | "outcome" | "last_stage"))
    {
        text.push_str(&format!("- `{key}`: {}\n", preview(value)));
    }
    text
}

fn preview(value: &Value) -> String {
    let text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let text = text.replace('\n', " ");
    match text.char_indices().nth(VALUE_PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

async fn write(stage: &StageRun<'_>, name: &str, text: &str) -> Result<(), HandlerError> {
    let path = stage.stage_dir.join(name);
    tokio::fs::write(&path, text)
        .await
        .map_err(|error| HandlerError::Terminal(format!("cannot write {}: {error}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::named_branch;

    #[test]
    fn an_answer_names_a_branch_by_best_line_json_or_the_id_alone() {
        assert_eq!(named_branch("Both work.\nbest: careful").as_deref(), Some("careful"));
        assert_eq!(named_branch("b10").as_deref(), Some("b10"));
        assert_eq!(named_branch("  `b10`.\n").as_deref(), Some("b10"));
        assert_eq!(named_branch(r#"{"best_id": "b2", "why": "tests pass"}"#).as_deref(), Some("b2"));
        assert_eq!(named_branch("```json\n{\"best_id\": \"b2\"}\n```").as_deref(), Some("b2"));
        // A `best:` line wins over anything before it.
        assert_eq!(named_branch("b1\nbest: b2").as_deref(), Some("b2"));
    }

    #[test]
    fn prose_or_two_ids_name_no_branch() {
        assert_eq!(named_branch("I would pick b1 or b2"), None);
        assert_eq!(named_branch("b1, b2"), None);
        assert_eq!(named_branch(r#"{"winner": "b1"}"#), None);
        assert_eq!(named_branch(r#"{"best_id": 3}"#), None);
        assert_eq!(named_branch(""), None);
    }
}
