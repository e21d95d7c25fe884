//! Usage ceilings: `--max-tokens`/`--max-cost` (or the graph's `max_tokens`/`max_cost`) pause a
//! run before its next LLM stage once the run's LLM stages have used that much (the engine checks
//! them), and bound what a stage's model calls may still use (handlers and backends read that). A
//! paused run resumes with a raised limit.
//!
//! Stage ceilings (`--max-stage-tokens`/`--max-stage-cost`, the node's `max_stage_tokens`/
//! `max_stage_cost`, the graph's `default_max_stage_*`) bound what one visit of a stage may use:
//! the agent loop stops before its next model call once the stage's own spend reaches one, the run
//! pauses, and the stage runs again on resume only when that bound was raised.

/// Characters per token in every estimate fabro makes without a tokenizer: preambles, the agent
/// context layers, compaction, the simulated and scripted backends.
pub const CHARS_PER_TOKEN: usize = 4;

/// The tokens of `text` by that estimate, rounded up.
pub fn estimated_tokens(chars: usize) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

/// The context window an LLM stage went by, where it came from, and the characters-per-token
/// ratio its estimates used (none: the default 4).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContextWindow {
    pub tokens: u64,
    /// `node` (`context_window`), `config` (the config file's model entry), `known` (fabro's
    /// table), `learned` (a rejection earlier in the run), `server` (the server's model list or
    /// `/props`), `error` (a rejection in this stage), or `default`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chars_per_token: Option<f64>,
}

/// Estimated tokens the agent context layers saved, by layer name, over a stage's calls.
pub type Savings = std::collections::BTreeMap<String, u64>;

/// Tokens a model call (or a stage, or a run) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The part of these tokens a stage's small model used (the sub-conversations of its agentic
    /// tool wrappers); already counted above, so every ceiling counts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_model: Option<Tokens>,
}

impl Usage {
    pub const fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage { input_tokens, output_tokens, small_model: None }
    }

    /// Adds `more` (its small-model part too).
    pub fn add(&mut self, more: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(more.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(more.output_tokens);
        if let Some(small) = more.small_model {
            self.add_small_model(small.input_tokens, small.output_tokens);
        }
    }

    /// Notes that `input`/`output` of these tokens (already counted) were the small model's.
    pub fn add_small_model(&mut self, input: u64, output: u64) {
        let small = self.small_model.get_or_insert_with(Tokens::default);
        small.input_tokens = small.input_tokens.saturating_add(input);
        small.output_tokens = small.output_tokens.saturating_add(output);
    }
}

/// Tokens in and out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tokens {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One model's share of a stage's usage (a stage that failed over used several).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Estimated, when the model's price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Tokens and estimated cost of a run's LLM stages, summed (`UsageTotals::of` in `run_dir`
/// sums a run's stage records).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UsageTotals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Summed over the stages whose cost is known; `None` when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl UsageTotals {
    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The ceilings of a run; `None` means no ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageLimits {
    /// Tokens in and out, summed over the run.
    pub max_tokens: Option<u64>,
    /// Estimated US dollars, summed over the run's stages whose price is known.
    pub max_cost: Option<f64>,
    /// `--max-stage-tokens` / `--max-stage-cost`: every LLM stage's own ceilings, over the node's.
    pub stage: StageLimits,
}

impl UsageLimits {
    /// What is left under the ceilings once the run has used `totals`, for a stage that makes
    /// several model calls; `None` without ceilings.
    pub fn left(&self, totals: UsageTotals) -> Option<UsageLeft> {
        if self.max_tokens.is_none() && self.max_cost.is_none() {
            return None;
        }
        Some(UsageLeft {
            tokens: self.max_tokens.map(|max| max.saturating_sub(totals.tokens())),
            cost_usd: self.max_cost.map(|max| (max - totals.cost_usd.unwrap_or(0.0)).max(0.0)),
        })
    }

    /// Why the run must pause before the next model call, if the run's `totals` have reached a
    /// ceiling.
    pub fn reached(&self, totals: UsageTotals) -> Option<String> {
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

/// What one visit of a stage may use: tokens in and out, and estimated US dollars, counting
/// every model call the stage makes (its small-model sub-conversations included).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageLimits {
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
}

impl StageLimits {
    /// The ceiling a stage that has used `tokens` and `cost_usd` has reached, if any.
    pub fn reached(&self, tokens: u64, cost_usd: f64) -> Option<StageCeiling> {
        let hit = |bound: StageBound, limit: f64| StageCeiling {
            bound,
            limit,
            spent_tokens: tokens,
            spent_usd: cost_usd,
        };
        if let Some(max) = self.max_tokens.filter(|max| tokens >= *max) {
            return Some(hit(StageBound::Tokens, max as f64));
        }
        self.max_cost.filter(|max| cost_usd >= *max).map(|max| hit(StageBound::Cost, max))
    }

    /// Whether a stage stopped at `ceiling` may run again under these limits: the bound it reached
    /// is now higher, or gone.
    pub fn raised_past(&self, ceiling: &StageCeiling) -> bool {
        let now = match ceiling.bound {
            StageBound::Tokens => self.max_tokens.map(|max| max as f64),
            StageBound::Cost => self.max_cost,
        };
        now.is_none_or(|limit| limit > ceiling.limit)
    }
}

/// Which stage ceiling was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StageBound {
    #[serde(rename = "max_stage_tokens")]
    Tokens,
    #[serde(rename = "max_stage_cost")]
    Cost,
}

impl StageBound {
    pub fn as_str(self) -> &'static str {
        match self {
            StageBound::Tokens => "max_stage_tokens",
            StageBound::Cost => "max_stage_cost",
        }
    }

    /// What the bound counts, as a command line placeholder.
    pub fn unit(self) -> &'static str {
        match self {
            StageBound::Tokens => "N",
            StageBound::Cost => "USD",
        }
    }
}

/// A stage that stopped at one of its ceilings: the bound, its limit (tokens or US dollars) and
/// what the stage had used. Kept in the run's context while the run is paused for it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageCeiling {
    pub bound: StageBound,
    pub limit: f64,
    pub spent_tokens: u64,
    pub spent_usd: f64,
}

impl StageCeiling {
    /// The context key that remembers a paused stage's ceiling until it runs again.
    pub fn context_key(node_id: &str) -> String {
        format!("internal.stage_ceiling.{node_id}")
    }

    /// Why the run paused, and how to go on.
    pub fn reason(&self, node_id: &str) -> String {
        match self.bound {
            StageBound::Tokens => format!(
                "stage `{node_id}` reached its token ceiling: {} tokens used, max_stage_tokens is {}; resume with a \
                 higher --max-stage-tokens (or raise the node's max_stage_tokens)",
                self.spent_tokens, self.limit as u64
            ),
            StageBound::Cost => format!(
                "stage `{node_id}` reached its cost ceiling: an estimated ${:.4} used, max_stage_cost is ${:.4}; \
                 resume with a higher --max-stage-cost (or raise the node's max_stage_cost)",
                self.spent_usd, self.limit
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(tokens: u64, cost_usd: Option<f64>) -> UsageTotals {
        UsageTotals { input_tokens: tokens, output_tokens: 0, cost_usd }
    }

    #[test]
    fn ceilings_are_reached_at_the_limit() {
        let limits = UsageLimits { max_tokens: Some(100), ..UsageLimits::default() };
        assert_eq!(limits.reached(used(60, None)), None);
        let reason = limits.reached(used(100, None)).unwrap();
        assert!(reason.contains("used 100 tokens and the limit is 100"), "{reason}");
        let limits = UsageLimits { max_cost: Some(0.5), ..UsageLimits::default() };
        assert_eq!(limits.reached(used(1, Some(0.2))), None);
        assert!(limits.reached(used(2, Some(0.5))).unwrap().contains("$0.5000"));
        assert_eq!(UsageLimits::default().reached(used(1_000_000, Some(100.0))), None);
    }

    #[test]
    fn what_is_left_bounds_a_stage() {
        let limits = UsageLimits { max_tokens: Some(100), max_cost: Some(1.0), ..UsageLimits::default() };
        let left = limits.left(used(30, Some(0.5))).unwrap();
        assert_eq!(left, UsageLeft { tokens: Some(70), cost_usd: Some(0.5) });
        assert_eq!(left.exhausted_by(69, 0.1), None);
        assert!(left.exhausted_by(70, 0.1).unwrap().contains("70 tokens used, 70 were left"));
        assert!(left.exhausted_by(1, 0.6).unwrap().contains("cost ceiling"));
        assert_eq!(UsageLimits::default().left(UsageTotals::default()), None);
    }

    #[test]
    fn a_stage_ceiling_is_reached_at_its_bound_and_resumes_only_raised() {
        let limits = StageLimits { max_tokens: Some(1_000), max_cost: Some(0.5) };
        assert_eq!(limits.reached(999, 0.49), None);
        let tokens = limits.reached(1_000, 0.1).unwrap();
        assert_eq!((tokens.bound, tokens.limit), (StageBound::Tokens, 1_000.0));
        assert!(tokens.reason("fix").contains("1000 tokens used, max_stage_tokens is 1000"));
        let cost = limits.reached(10, 0.5).unwrap();
        assert_eq!(cost.bound, StageBound::Cost);
        assert!(cost.reason("fix").contains("--max-stage-cost"), "{}", cost.reason("fix"));
        assert!(!limits.raised_past(&cost));
        assert!(StageLimits { max_cost: Some(0.75), ..limits }.raised_past(&cost));
        assert!(StageLimits { max_cost: None, ..limits }.raised_past(&cost));
        // Raising the other bound does not let it go on.
        assert!(!StageLimits { max_tokens: Some(5_000), ..limits }.raised_past(&cost));
        assert_eq!(StageLimits::default().reached(u64::MAX, f64::MAX), None);
    }
}
