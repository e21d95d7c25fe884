//! What parallel branches hand to their join: each branch's result (`parallel.results`), their
//! ranking, and the outcome the best one gives the stage that joins them. The engine's parallel
//! stage and the fan-in handler both use it; neither imports the other.

use serde_json::{Map, Value};

use crate::outcome::{Outcome, StageStatus};

/// How a branch ended, as `parallel.results` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchStatus {
    Success,
    PartialSuccess,
    Retry,
    Fail,
    /// Stopped (or never started) because the join policy no longer needed it.
    Cancelled,
}

impl BranchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BranchStatus::Success => "success",
            BranchStatus::PartialSuccess => "partial_success",
            BranchStatus::Retry => "retry",
            BranchStatus::Fail => "fail",
            BranchStatus::Cancelled => "cancelled",
        }
    }

    /// Success or partial success: what join policies count.
    pub fn is_successful(self) -> bool {
        matches!(self, BranchStatus::Success | BranchStatus::PartialSuccess)
    }

    /// Best first: success, partial success, retry, fail, cancelled.
    pub fn rank(self) -> u8 {
        self as u8
    }

    /// The branch status of a branch whose last stage ended with `status`.
    pub fn of(status: StageStatus) -> BranchStatus {
        match status {
            // A custom outcome ended the branch without failing it.
            StageStatus::Success | StageStatus::Skipped | StageStatus::Custom(_) => BranchStatus::Success,
            StageStatus::PartialSuccess => BranchStatus::PartialSuccess,
            StageStatus::Retry => BranchStatus::Retry,
            StageStatus::Fail => BranchStatus::Fail,
        }
    }
}

/// One entry of `parallel.results`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BranchResult {
    pub branch_id: String,
    pub status: BranchStatus,
    pub notes: Option<String>,
    pub failure_reason: Option<String>,
    pub duration_ms: u64,
    /// The branch's `last_response` context value, if an LLM stage set it.
    pub last_response: Option<String>,
    /// Everything the branch changed relative to the fork, minus engine bookkeeping
    /// (`internal.*`, `current_node`).
    pub context_updates: Map<String, Value>,
    /// The branch's commit, when it worked in its own git worktree.
    pub head_sha: Option<String>,
}

impl BranchResult {
    /// The numeric `score` the branch set in its context, if any.
    pub fn score(&self) -> Option<f64> {
        self.context_updates.get("score").and_then(|score| match score {
            Value::Number(n) => n.as_f64(),
            Value::String(text) => text.trim().parse().ok(),
            _ => None,
        })
    }
}

/// Branches best first: by status, then score (higher first, none last), then declaration order.
pub fn rank(results: &[BranchResult]) -> Vec<&BranchResult> {
    let mut ranked: Vec<(usize, &BranchResult)> = results.iter().enumerate().collect();
    ranked.sort_by(|(a_index, a), (b_index, b)| {
        let score = |r: &BranchResult| r.score().filter(|s| s.is_finite());
        a.status
            .rank()
            .cmp(&b.status.rank())
            .then_with(|| match (score(a), score(b)) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then(a_index.cmp(b_index))
    });
    ranked.into_iter().map(|(_, result)| result).collect()
}

/// The fan-in outcome for `best`: its context updates plus `parallel.fan_in.*`; a failure when no
/// branch succeeded.
pub fn consolidate(results: &[BranchResult], best: &BranchResult) -> Outcome {
    let successes = results.iter().filter(|r| r.status.is_successful()).count();
    let mut outcome = if successes == 0 {
        let reasons: Vec<String> = results
            .iter()
            .map(|r| {
                format!(
                    "`{}` {}: {}",
                    r.branch_id,
                    r.status.as_str(),
                    r.failure_reason.as_deref().unwrap_or("no reason given")
                )
            })
            .collect();
        Outcome::fail(format!("every branch failed: {}", reasons.join("; ")))
    } else {
        let mut outcome = Outcome::success();
        outcome.context_updates = best.context_updates.clone();
        outcome.with_notes(format!(
            "best branch `{}` ({}) of {} ({successes} succeeded)",
            best.branch_id,
            best.status.as_str(),
            results.len()
        ))
    };
    outcome = outcome
        .with_update("parallel.fan_in.best_id", best.branch_id.clone())
        .with_update("parallel.fan_in.best_outcome", best.status.as_str())
        .with_update("parallel.fan_in.best_head_sha", best.head_sha.clone().map_or(Value::Null, Value::from));
    outcome
}
