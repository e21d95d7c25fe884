//! The run's secrets: the environment variables that hold keys, and their values.
//!
//! The names are the provider keys fabro knows ([`PROVIDER_KEYS`]), every `api_key_env` of the
//! config file's providers and every `allowed_env_vars` of its MCP servers (and of
//! `--mcp-config`); the values are those variables' values as fabro found them, plus the values
//! of MCP headers and of keys written into the config file. Every program fabro starts for a
//! stage or a hook gets an environment without these names ([`strip_env`], called where the
//! command is built, in [`crate::sandbox::Confinement::command`]); every text fabro writes or
//! prints goes through [`redact`] (the event log, the journal, whole-file writes such as
//! status.json and checkpoints, command output on its way into the context, and stderr).
//!
//! The set is one per process and only grows: fabro registers what it knows as soon as it knows
//! it, and a name or value once secret stays secret. Redacting too much is harmless; redacting
//! too little is the bug this module exists for. This module must never log a value.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock, RwLock};

use crate::redaction::Secrets;

/// The variables that hold the keys of the providers fabro knows (model providers, and the
/// search provider of agent stages' `web_search`).
pub const PROVIDER_KEYS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "FABRO_LLM_API_KEY",
    "BRAVE_API_KEY",
];

#[derive(Default)]
struct Registry {
    names: BTreeSet<String>,
    /// Values registered directly (header values, keys written into the config file).
    values: BTreeSet<String>,
    /// What [`redact`] uses: the values of `names` in the environment and `values`.
    secrets: Secrets,
}

impl Registry {
    fn rebuild(&mut self) {
        let from_env = self.names.iter().filter_map(|name| std::env::var(name).ok());
        self.secrets = Secrets::new(from_env.chain(self.values.iter().cloned()));
    }
}

static REGISTRY: LazyLock<RwLock<Arc<Registry>>> = LazyLock::new(|| {
    let mut registry =
        Registry { names: PROVIDER_KEYS.iter().map(|n| n.to_string()).collect(), ..Registry::default() };
    registry.rebuild();
    RwLock::new(Arc::new(registry))
});

fn current() -> Arc<Registry> {
    match REGISTRY.read() {
        Ok(registry) => registry.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// Adds variable `names` (their values read from the environment now) and secret `values`.
pub fn register(names: impl IntoIterator<Item = String>, values: impl IntoIterator<Item = String>) {
    let names: Vec<String> =
        names.into_iter().map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect();
    let values: Vec<String> = values.into_iter().collect();
    let known = current();
    if names.iter().all(|n| known.names.contains(n)) && values.iter().all(|v| known.values.contains(v)) {
        return;
    }
    let mut guard = match REGISTRY.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let mut next =
        Registry { names: guard.names.clone(), values: guard.values.clone(), ..Registry::default() };
    next.names.extend(names);
    next.values.extend(values);
    next.rebuild();
    *guard = Arc::new(next);
}

/// The names of the variables that hold secrets, sorted.
pub fn names() -> Vec<String> {
    current().names.iter().cloned().collect()
}

/// The secret values, for the parts that redact on their own (transcripts, provider errors).
pub fn values() -> Secrets {
    current().secrets.clone()
}

/// `text` with every secret (and its reversed and base64 forms) replaced by `[REDACTED]`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let registry = current();
    match registry.secrets.is_empty() {
        true => Cow::Borrowed(text),
        false => registry.secrets.redact_cow(text),
    }
}

/// `bytes` with every secret replaced, for files and lines fabro writes.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let registry = current();
    match registry.secrets.is_empty() {
        true => Cow::Borrowed(bytes),
        false => registry.secrets.redact_bytes(bytes),
    }
}

/// `value` with every secret in its serialized strings replaced; `value` itself when it holds
/// none or no longer reads as a `T` once redacted (a secret inside a number?).
pub fn redact_serialized<T: serde::Serialize + serde::de::DeserializeOwned>(value: T) -> T {
    let registry = current();
    if registry.secrets.is_empty() {
        return value;
    }
    let Ok(json) = serde_json::to_value(&value) else { return value };
    let redacted = registry.secrets.redact_json(&json);
    if redacted == json {
        return value;
    }
    serde_json::from_value(redacted).unwrap_or(value)
}

/// Removes every secret variable from `command`'s environment but those in `keep` (a stage's
/// `sandbox_env`, which names what it lets through on purpose).
pub fn strip_env(command: &mut tokio::process::Command, keep: &[String]) {
    for name in current().names.iter().filter(|name| !keep.contains(name)) {
        command.env_remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_names_are_stripped_and_their_values_redacted() {
        // (No variable is set here: the environment is shared by the tests' threads.)
        register(["FABRO_TEST_SECRET_UNIT".to_string()], ["unit-secret-value-123".to_string()]);
        assert!(names().contains(&"FABRO_TEST_SECRET_UNIT".to_string()));
        assert!(names().contains(&"ANTHROPIC_API_KEY".to_string()));
        assert_eq!(redact("a unit-secret-value-123 b"), "a [REDACTED] b");
        assert_eq!(redact_bytes(b"x 321-eulav-terces-tinu"), &b"x [REDACTED]"[..]);
        assert_eq!(redact("nothing here"), Cow::Borrowed("nothing here"));
        let mut command = tokio::process::Command::new("env");
        strip_env(&mut command, &["ANTHROPIC_API_KEY".to_string()]);
        let removed: Vec<String> = command
            .as_std()
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert!(removed.contains(&"FABRO_TEST_SECRET_UNIT".to_string()), "{removed:?}");
        assert!(removed.contains(&"OPENAI_API_KEY".to_string()), "{removed:?}");
        assert!(!removed.contains(&"ANTHROPIC_API_KEY".to_string()), "{removed:?}");
    }
}
