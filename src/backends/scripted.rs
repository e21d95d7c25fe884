//! The `scripted` backend: canned responses from a JSON file (`--responses FILE`), so a workflow
//! can be run end to end with known model answers.
//!
//! The file is one JSON object keyed by node id. A value is either one text, used for every visit
//! of the node, or a non-empty array of texts: visit N gets entry N (counting from 1) and the last
//! entry repeats for later visits. Nodes without an entry get the simulated backend's text.
//!
//! ```json
//! { "plan": "Step 1 ...", "review": ["{\"outcome\": \"fail\"}", "{\"outcome\": \"success\"}"] }
//! ```

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::simulated::SimulatedBackend;
use super::{Backend, LlmRequest, LlmResponse};
use crate::llm::BackendError;
use crate::usage::Usage;

/// Why a responses file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read responses file `{path}`: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("responses file `{origin}` is not valid JSON at line {line}, column {column}: {message}")]
    InvalidJson { origin: String, line: usize, column: usize, message: String },
    #[error("responses file `{origin}` must be a JSON object mapping node ids to responses, found {found}")]
    NotAnObject { origin: String, found: &'static str },
    #[error(
        "responses file `{origin}`: the entry for node `{node}` must be a string or a non-empty array \
         of strings, found {found}"
    )]
    WrongShape { origin: String, node: String, found: String },
}

/// Answers from a responses file, per node and visit; falls back to [`SimulatedBackend`] for
/// nodes the file does not mention.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptedBackend {
    /// Never-empty lists of responses by node id.
    responses: HashMap<String, Vec<String>>,
}

impl ScriptedBackend {
    /// Reads a responses file.
    pub fn from_file(path: &Path) -> Result<ScriptedBackend, ScriptError> {
        let origin = path.display().to_string();
        let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
            .map_err(|source| ScriptError::Unreadable { path: origin.clone(), source })?;
        Self::from_json(&text, &origin)
    }

    /// Reads responses from JSON text; `origin` names the text in error messages (usually its path).
    pub fn from_json(text: &str, origin: &str) -> Result<ScriptedBackend, ScriptError> {
        let value: Value = serde_json::from_str(text).map_err(|err| {
            let full = err.to_string();
            // serde_json appends " at line L column C"; the location is reported separately.
            let suffix = format!(" at line {} column {}", err.line(), err.column());
            let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
            ScriptError::InvalidJson {
                origin: origin.to_string(),
                line: err.line(),
                column: err.column(),
                message,
            }
        })?;
        let Value::Object(entries) = value else {
            return Err(ScriptError::NotAnObject { origin: origin.to_string(), found: kind(&value) });
        };
        let mut responses = HashMap::with_capacity(entries.len());
        for (node, entry) in entries {
            let wrong = |found: String| ScriptError::WrongShape {
                origin: origin.to_string(),
                node: node.clone(),
                found,
            };
            let texts = match entry {
                Value::String(text) => vec![text],
                Value::Array(items) if items.is_empty() => return Err(wrong("an empty array".to_string())),
                Value::Array(items) => {
                    let mut texts = Vec::with_capacity(items.len());
                    for (index, item) in items.into_iter().enumerate() {
                        match item {
                            Value::String(text) => texts.push(text),
                            other => {
                                return Err(wrong(format!(
                                    "{} as entry {} of the array",
                                    kind(&other),
                                    index + 1
                                )))
                            }
                        }
                    }
                    texts
                }
                other => return Err(wrong(kind(&other).to_string())),
            };
            responses.insert(node, texts);
        }
        Ok(ScriptedBackend { responses })
    }

    /// The scripted text for a node's visit (1-based), if the file has an entry for the node.
    pub fn response_for(&self, node_id: &str, visit: u32) -> Option<&str> {
        let texts = self.responses.get(node_id)?;
        let index = (visit.max(1) as usize - 1).min(texts.len().saturating_sub(1));
        texts.get(index).map(String::as_str)
    }

    /// How many nodes have scripted responses.
    pub fn len(&self) -> usize {
        self.responses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.responses.is_empty()
    }
}

/// A JSON value's kind, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[async_trait::async_trait]
impl Backend for ScriptedBackend {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
        let Some(text) = self.response_for(request.node_id, request.visit) else {
            return SimulatedBackend.complete(request).await;
        };
        // The same rough token count as the simulated backend (characters / 4).
        let usage = Usage {
            input_tokens: crate::usage::estimated_tokens(request.prompt.len()),
            output_tokens: crate::usage::estimated_tokens(text.len()),
            ..Usage::default()
        };
        Ok(LlmResponse {
            text: text.to_string(),
            model: Some("scripted".to_string()),
            usage: Some(usage),
            ..LlmResponse::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(node_id: &str, visit: u32) -> LlmRequest<'_> {
        LlmRequest {
            node_id,
            visit,
            agentic: true,
            prompt: "Do the thing",
            model: None,
            provider: None,
            reasoning_effort: None,
            timeout: None,
            thread: None,
            history: &[],
            stage: None,
        }
    }

    async fn text(backend: &ScriptedBackend, node_id: &str, visit: u32) -> String {
        backend.complete(&request(node_id, visit)).await.expect("scripted backends never fail").text
    }

    #[test]
    fn is_thread_safe() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ScriptedBackend>();
        assert_eq!(ScriptedBackend::default().name(), "scripted");
    }

    #[tokio::test]
    async fn visits_take_entries_in_order_and_the_last_repeats() {
        let backend =
            ScriptedBackend::from_json(r#"{"plan": "the plan", "review": ["first", "second"]}"#, "r.json")
                .unwrap();
        assert_eq!(backend.len(), 2);
        assert_eq!(text(&backend, "plan", 1).await, "the plan");
        assert_eq!(text(&backend, "plan", 7).await, "the plan");
        assert_eq!(text(&backend, "review", 1).await, "first");
        assert_eq!(text(&backend, "review", 2).await, "second");
        assert_eq!(text(&backend, "review", 3).await, "second");
        assert_eq!(text(&backend, "review", u32::MAX).await, "second");
        // Visit 0 never happens, but is treated as the first.
        assert_eq!(text(&backend, "review", 0).await, "first");
    }

    #[tokio::test]
    async fn usage_is_estimated_and_model_named() {
        let backend = ScriptedBackend::from_json(r#"{"plan": "12345678"}"#, "r.json").unwrap();
        let response = backend.complete(&request("plan", 1)).await.unwrap();
        assert_eq!(response.model.as_deref(), Some("scripted"));
        assert_eq!(response.usage, Some(Usage::new(3, 2)));
    }

    #[tokio::test]
    async fn nodes_without_an_entry_get_simulated_text() {
        let backend = ScriptedBackend::from_json(r#"{"plan": "the plan"}"#, "r.json").unwrap();
        let simulated = SimulatedBackend.complete(&request("build", 2)).await.unwrap();
        let scripted = backend.complete(&request("build", 2)).await.unwrap();
        assert_eq!(scripted, simulated);
        assert!(scripted.text.starts_with("[simulated]"));
    }

    #[test]
    fn empty_object_and_empty_strings_are_fine() {
        assert!(ScriptedBackend::from_json("{}", "r.json").unwrap().is_empty());
        let backend = ScriptedBackend::from_json(r#"{"plan": ""}"#, "r.json").unwrap();
        assert_eq!(backend.response_for("plan", 1), Some(""));
        assert_eq!(backend.response_for("other", 1), None);
    }

    #[test]
    fn unreadable_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.json");
        let err = ScriptedBackend::from_file(&path).unwrap_err();
        assert!(matches!(err, ScriptError::Unreadable { .. }));
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.starts_with("cannot read responses file"), "{message}");
    }

    #[test]
    fn files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("responses.json");
        std::fs::write(&path, r#"{"plan": ["a", "b"]}"#).unwrap();
        let backend = ScriptedBackend::from_file(&path).unwrap();
        assert_eq!(backend.response_for("plan", 2), Some("b"));

        std::fs::write(&path, "{\n  \"plan\": 3\n}").unwrap();
        let message = ScriptedBackend::from_file(&path).unwrap_err().to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("`plan`"), "{message}");
    }

    #[test]
    fn invalid_json_reports_line_and_column() {
        let err =
            ScriptedBackend::from_json("{\n  \"plan\": \"a\",\n  \"review\" \"b\"\n}", "r.json").unwrap_err();
        match &err {
            ScriptError::InvalidJson { origin, line, column, message } => {
                assert_eq!(origin, "r.json");
                assert_eq!((*line, *column), (3, 12));
                assert!(!message.contains("at line"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("r.json"), "{message}");
        assert!(message.contains("line 3, column 12"), "{message}");

        let message = ScriptedBackend::from_json("", "empty.json").unwrap_err().to_string();
        assert!(message.contains("empty.json") && message.contains("not valid JSON"), "{message}");
    }

    #[test]
    fn wrong_shapes_name_the_node_and_what_is_expected() {
        let cases = [
            (r#"{"plan": 3}"#, "a number"),
            (r#"{"plan": []}"#, "an empty array"),
            (r#"{"plan": null}"#, "null"),
            (r#"{"plan": {"text": "x"}}"#, "an object"),
            (r#"{"plan": ["ok", false]}"#, "a boolean as entry 2 of the array"),
        ];
        for (json, found) in cases {
            let err = ScriptedBackend::from_json(json, "r.json").unwrap_err();
            assert!(matches!(&err, ScriptError::WrongShape { node, .. } if node == "plan"), "{err:?}");
            let message = err.to_string();
            assert!(message.contains("node `plan`"), "{message}");
            assert!(message.contains("must be a string or a non-empty array of strings"), "{message}");
            assert!(message.contains(&format!("found {found}")), "{message}");
        }
    }

    #[test]
    fn the_top_level_must_be_an_object() {
        let message = ScriptedBackend::from_json(r#"["a"]"#, "r.json").unwrap_err().to_string();
        assert!(message.contains("must be a JSON object mapping node ids to responses"), "{message}");
        assert!(message.contains("found an array"), "{message}");
    }
}
