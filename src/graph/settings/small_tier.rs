//! The small-tier parent guard (`small_tier_parent=`): what happens when an agent stage would run
//! its tool loop on a small-tier model (haiku, flash, mini, nano), which loses track of long loops.

use super::ModelTier;

/// What the guard does with an agent stage on a small-tier model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmallTierParent {
    /// A validation warning, and an `agent.small_tier_parent` event when the model is only known
    /// at run time (the default).
    #[default]
    Warn,
    /// A validation error; a run whose stage resolves to such a model is refused.
    Refuse,
    /// Nothing.
    Allow,
}

impl SmallTierParent {
    pub const NAMES: &'static [&'static str] = &["warn", "refuse", "allow"];

    pub fn from_name(name: &str) -> Option<SmallTierParent> {
        match name.trim() {
            "warn" => Some(SmallTierParent::Warn),
            "refuse" => Some(SmallTierParent::Refuse),
            "allow" => Some(SmallTierParent::Allow),
            _ => None,
        }
    }
}

/// Whether `model` is a small-tier model.
pub fn is_small_tier(model: &str) -> bool {
    ModelTier::of(model) == Some(ModelTier::Small)
}

/// A stronger model of the same family, to suggest instead of a small-tier one.
pub fn stronger_model(model: &str) -> &'static str {
    match crate::models::infer_provider(model) {
        Some("anthropic") => "claude-sonnet-4-5",
        Some("gemini") => "gemini-2.5-pro",
        _ => "gpt-5",
    }
}

/// Why an agent stage on `model` is a problem, and what to do about it.
pub fn complaint(node_id: &str, model: &str) -> (String, String) {
    (
        format!(
            "agent stage `{node_id}` runs on `{model}`, a small-tier model: small models lose track of long tool \
             loops and often cost more in the end"
        ),
        format!(
            "use a stronger model such as `{}` for the agent (a small model suits one-shot prompts), or set \
             small_tier_parent=allow",
            stronger_model(model)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_models_get_a_stronger_sibling() {
        assert!(is_small_tier("claude-haiku-4-5") && is_small_tier("gpt-5-mini"));
        assert!(!is_small_tier("claude-sonnet-4-5") && !is_small_tier("local-model"));
        assert_eq!(stronger_model("claude-haiku-4-5"), "claude-sonnet-4-5");
        assert_eq!(stronger_model("gemini-2.5-flash"), "gemini-2.5-pro");
        assert_eq!(stronger_model("gpt-5-nano"), "gpt-5");
        assert_eq!(SmallTierParent::from_name(" refuse"), Some(SmallTierParent::Refuse));
        assert_eq!(SmallTierParent::from_name("never"), None);
    }
}
