//! Run inputs: values a run is started with (`--input key=value`, `--inputs FILE`), which a
//! workflow reads as `{{ inputs.key }}` in any attribute (goal, prompts, scripts, labels), as
//! `inputs.key` in conditions, and which command stages get as `FABRO_INPUT_<KEY>`. A
//! `{{ inputs.key }}` that no input defines is an error with its position, never an empty string.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Attributes, Value as AttrValue, Workflow};
use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::source::Span;

/// A run's inputs by name.
pub type Inputs = BTreeMap<String, Value>;

/// Why inputs cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("`{0}` is not an input: write key=value, e.g. ticket=PAY-12")]
    NotAssignment(String),
    #[error("`{0}` is not an input name: use letters, digits and `_`, starting with a letter or `_`")]
    BadName(String),
    #[error("cannot read the inputs file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("the inputs file {path} is not {format}: {message}")]
    Parse { path: String, format: &'static str, message: String },
}

/// Whether `name` can be an input's name (it is read as `inputs.name` and `FABRO_INPUT_NAME`).
pub fn is_input_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `key=value`: the value as JSON when it parses as JSON (`3`, `true`, `["a"]`), else as text.
pub fn parse_assignment(text: &str) -> Result<(String, Value), InputError> {
    let (key, value) = text.split_once('=').ok_or_else(|| InputError::NotAssignment(text.to_string()))?;
    let key = key.trim();
    if !is_input_name(key) {
        return Err(InputError::BadName(key.to_string()));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

/// The inputs in a TOML (`.toml`) or JSON file: a table or object of name = value.
pub fn read_file(path: &Path) -> Result<Inputs, InputError> {
    let shown = path.display().to_string();
    let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
        .map_err(|source| InputError::Read { path: shown.clone(), source })?;
    let is_toml = path.extension().is_some_and(|ext| ext == "toml");
    let parsed: Result<Value, String> = if is_toml {
        toml::from_str::<toml::Table>(&text)
            .map_err(|error| error.to_string())
            .and_then(|table| serde_json::to_value(table).map_err(|error| error.to_string()))
    } else {
        serde_json::from_str(&text).map_err(|error| error.to_string())
    };
    let format = if is_toml { "a TOML table" } else { "a JSON object" };
    let parse_error = |message: String| InputError::Parse { path: shown.clone(), format, message };
    let Value::Object(map) = parsed.map_err(parse_error)? else {
        return Err(parse_error("it is not a table of name = value".to_string()));
    };
    let mut inputs = Inputs::new();
    for (key, value) in map {
        if !is_input_name(&key) {
            return Err(InputError::BadName(key));
        }
        inputs.insert(key, value);
    }
    Ok(inputs)
}

/// The inputs of `--inputs FILE` (when given), then each `--input key=value`, which wins.
pub fn gather(file: Option<&Path>, assignments: &[String]) -> Result<Inputs, InputError> {
    let mut inputs = file.map(read_file).transpose()?.unwrap_or_default();
    for assignment in assignments {
        let (key, value) = parse_assignment(assignment)?;
        inputs.insert(key, value);
    }
    Ok(inputs)
}

/// An input's value as text: strings as they are, anything else as JSON.
pub fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The inputs a workflow's text reads (`{{ inputs.key }}`), each once, in the order they first
/// appear: what a run of it must be given (the web view asks for them).
pub fn referenced(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (name, _) in fill(text, &Inputs::new()).1 {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Fills `{{ inputs.key }}` in every text attribute of the workflow (graph, subgraphs, nodes,
/// edges) with `workflow.inputs()`; each one no input defines is an error at its place.
pub fn render(workflow: &mut Workflow) -> Vec<Diagnostic> {
    let inputs = workflow.inputs().clone();
    let source = workflow.source().clone();
    let mut diagnostics = Vec::new();
    let mut render_all = |attributes: &mut Attributes, owner: &dyn Fn(Diagnostic) -> Diagnostic| {
        for (key, attr) in attributes.iter_mut() {
            let AttrValue::Text(text) = &attr.value else { continue };
            if !text.contains("{{") {
                continue;
            }
            let (rendered, missing) = fill(text, &inputs);
            for (name, offset) in missing {
                let at = source.offset_in_literal(attr.span, offset);
                diagnostics.push(owner(undefined(&name, key, &inputs).span(Span::at(at))));
            }
            attr.value = AttrValue::Text(rendered);
        }
    };
    render_all(workflow.attributes_mut(), &|d| d);
    for subgraph in workflow.subgraphs_mut() {
        render_all(&mut subgraph.attributes, &|d| d);
    }
    for node in workflow.nodes_mut() {
        let id = node.id.clone();
        render_all(&mut node.attributes, &|d| d.node(&id));
    }
    for edge in workflow.edges_mut() {
        render_all(&mut edge.attributes, &|d| d);
    }
    diagnostics
}

fn undefined(name: &str, key: &str, inputs: &Inputs) -> Diagnostic {
    let mut message = format!("`{key}` reads `{{{{ inputs.{name} }}}}`, but the run has no input `{name}`");
    if let Some(similar) = did_you_mean(name, inputs.keys().map(String::as_str)) {
        message.push_str(&format!(" (did you mean `{similar}`?)"));
    }
    if !inputs.is_empty() {
        let names: Vec<&str> = inputs.keys().map(String::as_str).collect();
        message.push_str(&format!("; its inputs: {}", names.join(", ")));
    }
    Diagnostic::error("undefined_input", message)
        .fix(format!("start the run with `--input {name}=VALUE` (or `--inputs FILE.toml`), or fix the name"))
}

/// `text` with each `{{ inputs.name }}` replaced by its input, and the names (with their byte
/// offset in `text`) that no input defines.
fn fill(text: &str, inputs: &Inputs) -> (String, Vec<(String, usize)>) {
    let mut out = String::with_capacity(text.len());
    let mut missing = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return (out, missing);
        };
        let inner = after[..end].trim();
        match inner.strip_prefix("inputs.").filter(|name| is_input_name(name)) {
            Some(name) => match inputs.get(name) {
                Some(value) => out.push_str(&text_of(value)),
                None => {
                    missing.push((name.to_string(), text.len() - rest.len() + start));
                    out.push_str(&rest[start..start + 2 + end + 2]);
                }
            },
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    (out, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_filled_and_the_undefined_ones_found_where_they_are() {
        let inputs: Inputs = [("ticket".to_string(), json!("PAY-12")), ("n".to_string(), json!(3))].into();
        let (text, missing) =
            fill("Work on {{ inputs.ticket }} ({{inputs.n}}x) {{ inputs.tikcet }} {{ goal }}", &inputs);
        assert_eq!(text, "Work on PAY-12 (3x) {{ inputs.tikcet }} {{ goal }}");
        assert_eq!(missing, [("tikcet".to_string(), 44)]);
        assert_eq!(fill("no close {{ inputs.x", &inputs).0, "no close {{ inputs.x");
    }

    #[test]
    fn the_inputs_a_text_reads_are_named_once_in_order() {
        let text = "a [prompt=\"{{ inputs.ticket }} {{inputs.repo}}\"] b [script=\"echo {{ inputs.ticket }} {{ goal }}\"]";
        assert_eq!(referenced(text), ["ticket", "repo"]);
        assert!(referenced("digraph x {}").is_empty());
    }

    #[test]
    fn assignments_take_json_values_and_plain_names() {
        assert_eq!(parse_assignment("n=3").unwrap(), ("n".to_string(), json!(3)));
        assert_eq!(parse_assignment("t=PAY-12").unwrap(), ("t".to_string(), json!("PAY-12")));
        assert_eq!(parse_assignment("url=http://x/?a=b").unwrap().1, json!("http://x/?a=b"));
        assert!(matches!(parse_assignment("noequals"), Err(InputError::NotAssignment(_))));
        assert!(matches!(parse_assignment("a-b=1"), Err(InputError::BadName(_))));
    }

    #[test]
    fn files_are_toml_tables_or_json_objects() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("i.toml"), "ticket = \"PAY-12\"\nretries = 2\n").unwrap();
        std::fs::write(dir.path().join("i.json"), r#"{"ticket": "PAY-13"}"#).unwrap();
        std::fs::write(dir.path().join("bad.json"), "[1]").unwrap();
        assert_eq!(read_file(&dir.path().join("i.toml")).unwrap()["retries"], json!(2));
        assert_eq!(read_file(&dir.path().join("i.json")).unwrap()["ticket"], json!("PAY-13"));
        assert!(read_file(&dir.path().join("bad.json")).unwrap_err().to_string().contains("not a table"));
        assert!(matches!(read_file(&dir.path().join("none.toml")), Err(InputError::Read { .. })));
    }
}
