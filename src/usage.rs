//! Usage ceilings: `--max-tokens`/`--max-cost` (or the graph's `max_tokens`/`max_cost`) pause a
//! run before its next LLM stage once the run's LLM stages have used that much (the engine checks
//! them), and bound what a stage's model calls may still use (handlers and backends read that). A
//! paused run resumes with a raised limit.

use crate::graph::Workflow;
use crate::run_dir::{StageRecord, UsageTotals};

/// Tokens a model call (or a stage, or a run) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The ceilings of a run; `None` means no ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageLimits {
    /// Tokens in and out, summed over the run.
    pub max_tokens: Option<u64>,
    /// Estimated US dollars, summed over the run's stages whose price is known.
    pub max_cost: Option<f64>,
}

impl UsageLimits {
    /// The command line's limits, else the graph's attributes.
    pub fn resolve(given: UsageLimits, workflow: &Workflow) -> UsageLimits {
        let graph = workflow.attributes();
        UsageLimits {
            max_tokens: given
                .max_tokens
                .or_else(|| graph.integer("max_tokens").and_then(|n| u64::try_from(n).ok())),
            max_cost: given.max_cost.or_else(|| graph.float("max_cost")),
        }
    }

    /// What is left under the ceilings after `stages`, for a stage that makes several model
    /// calls; `None` without ceilings.
    pub fn left(&self, stages: &[StageRecord]) -> Option<UsageLeft> {
        if self.max_tokens.is_none() && self.max_cost.is_none() {
            return None;
        }
        let totals = UsageTotals::of(stages).unwrap_or_default();
        Some(UsageLeft {
            tokens: self.max_tokens.map(|max| max.saturating_sub(totals.tokens())),
            cost_usd: self.max_cost.map(|max| (max - totals.cost_usd.unwrap_or(0.0)).max(0.0)),
        })
    }

    /// Why the run must pause before the next model call, if a ceiling has been reached.
    pub fn reached(&self, stages: &[StageRecord]) -> Option<String> {
        let totals = UsageTotals::of(stages).unwrap_or_default();
        if let Some(max) = self.max_tokens.filter(|max| totals.tokens() >= *max) {
            return Some(format!(
                "token ceiling reached: the run has used {} tokens and the limit is {max}; resume with a higher \
                 --max-tokens",
                totals.tokens()
            ));
        }
        let cost = totals.cost_usd.unwrap_or(0.0);
        if let Some(max) = self.max_cost.filter(|max| cost >= *max) {
            return Some(format!(
                "cost ceiling reached: the run has cost an estimated ${cost:.4} and the limit is ${max:.4}; resume \
                 with a higher --max-cost"
            ));
        }
        None
    }
}

/// What a stage may still use before the run's ceilings are reached.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageLeft {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

impl UsageLeft {
    /// Why a stage that has used `tokens` and `cost_usd` must stop before its next model call.
    pub fn exhausted_by(&self, tokens: u64, cost_usd: f64) -> Option<String> {
        if let Some(left) = self.tokens.filter(|left| tokens >= *left) {
            return Some(format!(
                "token ceiling reached during the stage ({tokens} tokens used, {left} were left); resume with a \
                 higher --max-tokens"
            ));
        }
        if let Some(left) = self.cost_usd.filter(|left| cost_usd >= *left) {
            return Some(format!(
                "cost ceiling reached during the stage (an estimated ${cost_usd:.4} used, ${left:.4} was left); \
                 resume with a higher --max-cost"
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::StageStatus;
    use crate::usage::Usage;

    fn stage(tokens: u64, cost: Option<f64>) -> StageRecord {
        StageRecord {
            node_id: "a".into(),
            visit: 1,
            status: StageStatus::Success,
            duration_ms: 1,
            handler: Some(crate::graph::HandlerType::Agent),
            failure_reason: None,
            usage: Some(Usage { input_tokens: tokens, output_tokens: 0 }),
            cost_usd: cost,
            branch: None,
            dir: None,
        }
    }

    #[test]
    fn ceilings_are_reached_at_the_limit() {
        let limits = UsageLimits { max_tokens: Some(100), max_cost: None };
        assert_eq!(limits.reached(&[stage(60, None)]), None);
        let reason = limits.reached(&[stage(60, None), stage(40, None)]).unwrap();
        assert!(reason.contains("used 100 tokens and the limit is 100"), "{reason}");
        let limits = UsageLimits { max_tokens: None, max_cost: Some(0.5) };
        assert_eq!(limits.reached(&[stage(1, Some(0.2))]), None);
        assert!(limits.reached(&[stage(1, Some(0.2)), stage(1, Some(0.3))]).unwrap().contains("$0.5000"));
        assert_eq!(UsageLimits::default().reached(&[stage(1_000_000, Some(100.0))]), None);
    }

    #[test]
    fn what_is_left_bounds_a_stage() {
        let limits = UsageLimits { max_tokens: Some(100), max_cost: Some(1.0) };
        let left = limits.left(&[stage(30, Some(0.5))]).unwrap();
        assert_eq!(left, UsageLeft { tokens: Some(70), cost_usd: Some(0.5) });
        assert_eq!(left.exhausted_by(69, 0.1), None);
        assert!(left.exhausted_by(70, 0.1).unwrap().contains("70 tokens used, 70 were left"));
        assert!(left.exhausted_by(1, 0.6).unwrap().contains("cost ceiling"));
        assert_eq!(UsageLimits::default().left(&[]), None);
    }
}
