//! The run context: JSON values by key, shared by every stage of a run. Engine-managed keys
//! (`outcome`, `current_node`, `internal.*`, `graph.*`, ...) live here next to what stages write.
//!
//! Keys are kept sorted so snapshots, checkpoints and preambles are deterministic.
//!
//! Parallel branches each work on their own copy of the context. Copies are cheap whatever the size
//! of the values: a context is an immutable, shared *base* plus the *changes* made since that base
//! was taken, so [`Context::fork`] costs one reference count and the fork's changes are exactly
//! what the branch wrote ([`Context::changes`]).

pub mod artifacts;

use std::collections::btree_map;
use std::collections::BTreeMap;
use std::iter::Peekable;
use std::sync::Arc;

use serde_json::Value;

/// Whether the engine alone sets `key` (`internal.*`, `graph.*`, `current_node`): a stage's
/// `context_updates` may not change it.
pub fn is_engine_owned(key: &str) -> bool {
    key.starts_with("internal.") || key.starts_with("graph.") || key == "current_node"
}

/// Whether `key` is the engine's bookkeeping of a run (its own keys, plus conversation threads
/// `thread.*`), which reports and `fabro inspect` leave out and a child run never hands back to
/// its parent.
pub fn is_bookkeeping(key: &str) -> bool {
    ["internal.", "graph.", "thread.", "current"].iter().any(|prefix| key.starts_with(prefix))
}

#[derive(Clone, Default)]
pub struct Context {
    /// Values shared with forks; never changed in place while shared. Each value sits behind its
    /// own `Arc` so that even copying the map (when a shared base must absorb changes) copies
    /// keys and pointers, never the values.
    base: Arc<BTreeMap<String, Arc<Value>>>,
    /// What changed since `base`: `Some` for a value set, `None` for a key removed.
    changes: BTreeMap<String, Option<Value>>,
    /// Keys set or removed since the run's journal last recorded this context
    /// ([`Context::mark_journaled`]); a fork starts with none.
    unjournaled: std::collections::BTreeSet<String>,
}

/// What a context changed since its last [`Context::mark_journaled`]: keys set (with their values)
/// and keys removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    pub set: serde_json::Map<String, Value>,
    pub removed: Vec<String>,
}

impl Context {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        match self.changes.get(key) {
            Some(change) => change.as_ref(),
            None => self.base.get(key).map(|value| &**value),
        }
    }

    /// The value as text: strings as they are, other values as compact JSON.
    pub fn get_text(&self, key: &str) -> Option<String> {
        self.get(key).map(|value| match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
    }

    /// Sets `key`; setting the value it already has changes nothing (and leaves nothing for the
    /// journal to record).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        if self.get(&key) == Some(&value) {
            return;
        }
        if !self.unjournaled.contains(&key) {
            self.unjournaled.insert(key.clone());
        }
        self.changes.insert(key, Some(value));
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let previous = self.get(key).cloned();
        // Removing what is not there changes nothing the journal needs to know.
        if previous.is_some() && !self.unjournaled.contains(key) {
            self.unjournaled.insert(key.to_string());
        }
        if self.base.contains_key(key) {
            self.changes.insert(key.to_string(), None);
        } else {
            self.changes.remove(key);
        }
        previous
    }

    /// Merges a stage's `context_updates`.
    pub fn apply(&mut self, updates: &serde_json::Map<String, Value>) {
        for (key, value) in updates {
            self.set(key.clone(), value.clone());
        }
    }

    /// An isolated copy: what either side writes afterwards the other never sees. It costs the
    /// same for a context of ten keys or of ten thousand large values (the values are shared until
    /// one side replaces them), apart from folding this context's own pending changes into its
    /// base first, which is cheap when no other fork still shares that base.
    pub fn fork(&mut self) -> Context {
        self.settle();
        Context { base: Arc::clone(&self.base), ..Context::default() }
    }

    /// The keys set and removed since [`Context::mark_journaled`] (or since the context was
    /// created), with their values now: what the run's journal records after a stage.
    pub fn delta(&self) -> Delta {
        let mut delta = Delta::default();
        for key in &self.unjournaled {
            match self.get(key) {
                Some(value) => {
                    delta.set.insert(key.clone(), value.clone());
                }
                None => delta.removed.push(key.clone()),
            }
        }
        delta
    }

    /// Everything is in the journal now: the next [`Context::delta`] starts empty.
    pub fn mark_journaled(&mut self) {
        self.unjournaled.clear();
    }

    /// Everything set since this context was forked (or created), whose value differs from the
    /// value at that point, in key order. Removed keys are not listed.
    pub fn changes(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.changes.iter().filter_map(|(key, change)| {
            let value = change.as_ref()?;
            (self.base.get(key).map(|base| &**base) != Some(value)).then_some((key.as_str(), value))
        })
    }

    /// Folds the pending changes into the base.
    fn settle(&mut self) {
        if self.changes.is_empty() {
            return;
        }
        let base = Arc::make_mut(&mut self.base);
        for (key, change) in std::mem::take(&mut self.changes) {
            match change {
                Some(value) => {
                    base.insert(key, Arc::new(value));
                }
                None => {
                    base.remove(&key);
                }
            }
        }
    }

    /// Every key and value, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { base: self.base.iter().peekable(), changes: self.changes.iter().peekable() }
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The whole context as one JSON object (what `FABRO_CONTEXT` points scripts at).
    pub fn to_json(&self) -> Value {
        Value::Object(self.to_map())
    }

    /// Every key and value, copied.
    pub fn to_map(&self) -> serde_json::Map<String, Value> {
        self.iter().map(|(key, value)| (key.to_string(), value.clone())).collect()
    }
}

/// The context's keys and values in key order: the base merged with the changes.
pub struct Iter<'a> {
    base: Peekable<btree_map::Iter<'a, String, Arc<Value>>>,
    changes: Peekable<btree_map::Iter<'a, String, Option<Value>>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (self.base.peek(), self.changes.peek()) {
                (None, None) => return None,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((base_key, _)), Some((change_key, _))) => base_key.cmp(change_key),
            };
            if order == std::cmp::Ordering::Less {
                let (key, value) = self.base.next()?;
                return Some((key.as_str(), &**value));
            }
            if order == std::cmp::Ordering::Equal {
                self.base.next();
            }
            let (key, change) = self.changes.next()?;
            if let Some(value) = change {
                return Some((key.as_str(), value));
            }
        }
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl serde::Serialize for Context {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> serde::Deserialize<'de> for Context {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let values = BTreeMap::<String, Value>::deserialize(deserializer)?;
        let values = values.into_iter().map(|(key, value)| (key, Arc::new(value))).collect();
        Ok(Context { base: Arc::new(values), ..Context::default() })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn context(pairs: &[(&str, Value)]) -> Context {
        let mut context = Context::new();
        for (key, value) in pairs {
            context.set(*key, value.clone());
        }
        context
    }

    #[test]
    fn forks_are_isolated_both_ways() {
        let mut parent = context(&[("a", json!(1)), ("b", json!("two"))]);
        let mut left = parent.fork();
        let mut right = parent.fork();
        left.set("a", 10);
        left.remove("b");
        right.set("c", "new");
        parent.set("d", true);

        assert_eq!(left.to_json(), json!({"a": 10}));
        assert_eq!(right.to_json(), json!({"a": 1, "b": "two", "c": "new"}));
        assert_eq!(parent.to_json(), json!({"a": 1, "b": "two", "d": true}));
    }

    #[test]
    fn changes_are_what_a_fork_wrote_that_differs() {
        let mut parent = context(&[("a", json!(1)), ("b", json!(2))]);
        let mut branch = parent.fork();
        branch.set("a", 1); // same value: not a change
        branch.set("b", 3);
        branch.set("c", 4);
        branch.remove("a");
        let changes: Vec<_> = branch.changes().map(|(k, v)| (k.to_string(), v.clone())).collect();
        assert_eq!(changes, vec![("b".to_string(), json!(3)), ("c".to_string(), json!(4))]);
    }

    #[test]
    fn iteration_merges_base_and_changes_in_key_order() {
        let mut parent = context(&[("b", json!(1)), ("d", json!(2))]);
        let mut fork = parent.fork();
        fork.set("a", 0);
        fork.set("c", 0);
        fork.set("d", 9);
        fork.remove("b");
        fork.set("e", 0);
        let keys: Vec<_> = fork.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(keys, ["a=0", "c=0", "d=9", "e=0"]);
        assert_eq!(fork.len(), 4);
        assert_eq!(fork.get("b"), None);
        assert_eq!(fork.get("d"), Some(&json!(9)));
    }

    #[test]
    fn removing_then_setting_again_restores_the_key() {
        let mut parent = context(&[("k", json!(1))]);
        let mut fork = parent.fork();
        assert_eq!(fork.remove("k"), Some(json!(1)));
        assert_eq!(fork.remove("k"), None);
        fork.set("k", 2);
        assert_eq!(fork.get("k"), Some(&json!(2)));
        let mut fresh = Context::new();
        fresh.set("x", 1);
        fresh.remove("x");
        assert!(fresh.is_empty());
    }

    #[test]
    fn forking_shares_values_instead_of_copying_them() {
        let big = Value::String("x".repeat(1 << 20));
        let mut parent = context(&[("big", big)]);
        let forks: Vec<Context> = (0..100).map(|_| parent.fork()).collect();
        // Every fork points at the same base: one copy of the megabyte, not a hundred.
        assert!(forks.iter().all(|fork| Arc::ptr_eq(&fork.base, &parent.base)));
    }

    #[test]
    fn a_fork_of_a_fork_shares_the_values_of_both() {
        let mut parent = context(&[("big", Value::String("x".repeat(1 << 20)))]);
        let mut branch = parent.fork();
        branch.set("small", 1);
        let nested = branch.fork();
        let value = |c: &Context| c.get("big").map(|v| v as *const Value);
        assert_eq!(value(&nested), value(&parent));
        assert_eq!(nested.get("small"), Some(&json!(1)));
    }

    #[test]
    fn serializes_as_one_sorted_object_and_reads_back_equal() {
        let mut parent = context(&[("b", json!(1)), ("a", json!([1, 2]))]);
        let mut fork = parent.fork();
        fork.set("c", "x");
        fork.remove("b");
        let text = serde_json::to_string(&fork).unwrap();
        assert_eq!(text, r#"{"a":[1,2],"c":"x"}"#);
        let back: Context = serde_json::from_str(&text).unwrap();
        assert_eq!(back, fork);
    }
}
