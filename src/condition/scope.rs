//! The scope conditions are evaluated in while a run goes on: a stage's outcome (when there is
//! one) and the run context, with offloaded values (artifact pointers) loaded back.

use serde_json::Value;

use super::ConditionScope;
use crate::context::artifacts::{is_pointer, ArtifactStore};
use crate::context::Context;
use crate::outcome::{Outcome, StageStatus};

/// What conditions read: the stage's outcome and the run context, with offloaded values
/// (artifact pointers) that the conditions read loaded back, so they compare like inline ones.
/// Without an outcome (a lifecycle hook's run moments) `outcome` is unset.
pub struct Scope<'a> {
    pub outcome: Option<&'a Outcome>,
    pub context: &'a Context,
    resolved: std::collections::HashMap<String, Value>,
}

impl<'a> Scope<'a> {
    pub fn new(outcome: Option<&'a Outcome>, context: &'a Context) -> Self {
        Scope { outcome, context, resolved: std::collections::HashMap::new() }
    }

    /// Loads the offloaded values among `keys` from `store`. A pointer that cannot be read
    /// stays a pointer (and compares as its text), with a warning.
    pub fn resolving<'k>(mut self, keys: impl IntoIterator<Item = &'k str>, store: &ArtifactStore) -> Self {
        for key in keys {
            let Some(value) = self.context.get(key).filter(|v| is_pointer(v)) else { continue };
            match store.resolve(value) {
                Ok(Some(loaded)) => {
                    self.resolved.insert(key.to_string(), loaded);
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "cannot read the offloaded value of `{key}`"),
            }
        }
        self
    }
}

impl ConditionScope for Scope<'_> {
    fn outcome(&self) -> Option<StageStatus> {
        self.outcome.map(|outcome| outcome.status)
    }

    fn preferred_label(&self) -> Option<&str> {
        self.outcome.and_then(|outcome| outcome.preferred_label.as_deref())
    }

    fn context(&self, key: &str) -> Option<&Value> {
        self.resolved.get(key).or_else(|| self.context.get(key))
    }
}
