//! The run context: JSON values by key, shared by every stage of a run. Engine-managed keys
//! (`outcome`, `current_node`, `internal.*`, `graph.*`, ...) live here next to what stages write.
//!
//! Keys are kept sorted so snapshots, checkpoints and preambles are deterministic.

pub mod artifacts;

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Context {
    values: BTreeMap<String, Value>,
}

impl Context {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// The value as text: strings as they are, other values as compact JSON.
    pub fn get_text(&self, key: &str) -> Option<String> {
        self.values.get(key).map(|value| match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
    }

    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.values.insert(key.into(), value.into());
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.values.remove(key)
    }

    /// Merges a stage's `context_updates`.
    pub fn apply(&mut self, updates: &serde_json::Map<String, Value>) {
        for (key, value) in updates {
            self.values.insert(key.clone(), value.clone());
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.values.iter().map(|(key, value)| (key.as_str(), value))
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The whole context as one JSON object (what `FABRO_CONTEXT` points scripts at).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.values).unwrap_or(Value::Null)
    }
}
