//! `--answers FILE`: recorded answers for human gates, a JSON object mapping gate ids to the
//! answers to give, in order, each time that gate asks:
//!
//! ```json
//! {"review": ["R", "Approve"], "confirm": "yes"}
//! ```
//!
//! An answer that names a choice (by key, label or target id) picks it; any other text is a
//! freeform answer where the gate declares `human.freeform=true`, and an error everywhere else:
//! [`AnswersFile::check`] refuses such a file before the run starts, along with keys that name
//! no gate. A gate with no answer left gets [`Answer::Unavailable`], so the run pauses.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use super::{answer_for, closest_choice, list_choices, Answer, Gate, Interviewer, Question};

/// Why an answers file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AnswersError {
    #[error("cannot read answers file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}:{line}:{column}: answers are not valid JSON: {message}")]
    Json { origin: String, line: usize, column: usize, message: String },
    #[error(
        "{origin}: answers must be a JSON object mapping gate ids to lists of answers, \
         e.g. {{\"review\": [\"A\"]}}; found {found}"
    )]
    NotAnObject { origin: String, found: &'static str },
    #[error("{origin}: the answers for gate `{gate}` must be a string or a list of strings; found {found}")]
    BadAnswers { origin: String, gate: String, found: String },
    #[error("{origin}: `{gate}` is not a human gate of this workflow{}", gate_list(known))]
    UnknownGate { origin: String, gate: String, known: Vec<String> },
    #[error(transparent)]
    NoSuchChoice(Box<NoSuchChoice>),
}

/// An answer that names none of its gate's choices.
#[derive(Debug, thiserror::Error)]
#[error(
    "{origin}: answer {position} for gate `{gate}`, `{answer}`, names none of its choices: {choices}{}; \
     answer with a choice's key, label or target id{}",
    suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default(),
    if *freeform_hint { ", or set human.freeform=true on the gate to accept free text" } else { "" }
)]
pub struct NoSuchChoice {
    pub origin: String,
    pub gate: String,
    /// 1-based position of the answer in the gate's list.
    pub position: usize,
    pub answer: String,
    /// `[A] Approve, [R] Request changes`
    pub choices: String,
    pub suggestion: Option<String>,
    /// The text looks like prose rather than a typo of a choice.
    pub freeform_hint: bool,
}

fn gate_list(known: &[String]) -> String {
    match known {
        [] => "; it has no human gates".to_string(),
        _ => format!("; its gates are: {}", known.join(", ")),
    }
}

/// Answers read from a file, handed out in order per gate.
#[derive(Debug)]
pub struct AnswersFile {
    origin: String,
    answers: Mutex<HashMap<String, VecDeque<String>>>,
}

impl AnswersFile {
    /// Reads and checks `path`.
    pub fn from_file(path: &Path) -> Result<AnswersFile, AnswersError> {
        let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
            .map_err(|source| AnswersError::Read { path: path.to_path_buf(), source })?;
        AnswersFile::from_json(&text, &path.display().to_string())
    }

    /// Reads answers from JSON text; `origin` names it in errors (usually the file's path).
    pub fn from_json(text: &str, origin: &str) -> Result<AnswersFile, AnswersError> {
        let value: Value = serde_json::from_str(text).map_err(|error| AnswersError::Json {
            origin: origin.to_string(),
            line: error.line(),
            column: error.column(),
            message: without_position(&error),
        })?;
        let Value::Object(map) = value else {
            return Err(AnswersError::NotAnObject { origin: origin.to_string(), found: json_type(&value) });
        };
        let mut answers = HashMap::with_capacity(map.len());
        for (gate, value) in map {
            let bad = |found: String| AnswersError::BadAnswers {
                origin: origin.to_string(),
                gate: gate.clone(),
                found,
            };
            let queue: VecDeque<String> = match value {
                Value::String(answer) => VecDeque::from([answer]),
                Value::Array(items) => {
                    let mut queue = VecDeque::with_capacity(items.len());
                    for (position, item) in items.into_iter().enumerate() {
                        match item {
                            Value::String(answer) => queue.push_back(answer),
                            other => {
                                return Err(bad(format!(
                                    "{} at position {}",
                                    json_type(&other),
                                    position + 1
                                )))
                            }
                        }
                    }
                    queue
                }
                other => return Err(bad(json_type(&other).to_string())),
            };
            answers.insert(gate, queue);
        }
        Ok(AnswersFile { origin: origin.to_string(), answers: Mutex::new(answers) })
    }

    /// Where the answers came from, as given to [`AnswersFile::from_json`].
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Refuses answers that could route a gate the wrong way, before anything runs: a key that
    /// names none of `gates`, or an answer that names none of its gate's choices at a gate that
    /// takes no freeform text.
    pub fn check(&self, gates: &[Gate<'_>]) -> Result<(), AnswersError> {
        let answers = self.lock();
        let mut ids: Vec<&String> = answers.keys().collect();
        ids.sort();
        for id in ids {
            let Some(gate) = gates.iter().find(|gate| gate.id == id.as_str()) else {
                let mut known: Vec<String> = gates.iter().map(|gate| gate.id.to_string()).collect();
                known.sort();
                known.dedup();
                return Err(AnswersError::UnknownGate {
                    origin: self.origin.clone(),
                    gate: id.clone(),
                    known,
                });
            };
            if gate.freeform {
                continue;
            }
            for (position, answer) in answers[id].iter().enumerate() {
                let question = Question {
                    gate_id: gate.id,
                    text: "",
                    choices: &gate.choices,
                    timeout: None,
                    freeform: false,
                };
                if let Answer::Unrecognized(text) = answer_for(answer, &question) {
                    let suggestion =
                        closest_choice(&text, &gate.choices).map(|choice| choice.label.to_string());
                    return Err(AnswersError::NoSuchChoice(Box::new(NoSuchChoice {
                        origin: self.origin.clone(),
                        gate: id.clone(),
                        position: position + 1,
                        freeform_hint: suggestion.is_none() && text.split_whitespace().count() > 2,
                        answer: text,
                        choices: list_choices(&gate.choices),
                        suggestion,
                    })));
                }
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<String>>> {
        // A panic while the lock was held cannot leave the map half-updated.
        self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl Interviewer for AnswersFile {
    async fn ask(&self, question: &Question<'_>) -> Answer {
        let next = self.lock().get_mut(question.gate_id).and_then(VecDeque::pop_front);
        match next {
            Some(text) => answer_for(&text, question),
            None => Answer::Unavailable,
        }
    }
}

/// serde_json's message without its trailing ` at line L column C` (the error names those).
fn without_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Choice;

    fn choices() -> Vec<Choice<'static>> {
        vec![
            Choice::from_edge(Some("[A] Approve"), "deploy"),
            Choice::from_edge(Some("R) Request changes"), "revise"),
            Choice::from_edge(Some("[S] Skip"), "exit"),
        ]
    }

    async fn ask(answers: &AnswersFile, gate_id: &str, choices: &[Choice<'_>]) -> Answer {
        answers.ask(&Question { gate_id, text: "Ship it?", choices, timeout: None, freeform: false }).await
    }

    #[tokio::test]
    async fn answers_are_consumed_in_order_per_gate() {
        let answers = AnswersFile::from_json(
            r#"{"gate": ["R", "request changes", "[S] Skip", "deploy", "ship it tomorrow"], "other": "a"}"#,
            "answers.json",
        )
        .unwrap();
        let choices = choices();
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Choice(1));
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Choice(1));
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Choice(2));
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Choice(0));
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Unrecognized("ship it tomorrow".into()));
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Unavailable);
        assert_eq!(ask(&answers, "gate", &choices).await, Answer::Unavailable);
        // A single string is a one-element list; other gates keep their own queue.
        assert_eq!(ask(&answers, "other", &choices).await, Answer::Choice(0));
        assert_eq!(ask(&answers, "other", &choices).await, Answer::Unavailable);
        assert_eq!(ask(&answers, "unknown", &choices).await, Answer::Unavailable);
        assert_eq!(answers.origin(), "answers.json");
    }

    fn gates(freeform: bool) -> Vec<Gate<'static>> {
        vec![
            Gate { id: "review", choices: choices(), freeform },
            Gate { id: "confirm", choices: vec![Choice::from_edge(Some("[Y] Yes"), "go")], freeform: false },
        ]
    }

    #[test]
    fn check_refuses_unknown_gates_and_answers_naming_no_choice() {
        let ok = AnswersFile::from_json(
            r#"{"review": ["A", "revise", "request changes"], "confirm": "y"}"#,
            "a.json",
        );
        assert!(ok.unwrap().check(&gates(false)).is_ok());

        let typo = AnswersFile::from_json(r#"{"review": ["A", "Request change"]}"#, "a.json").unwrap();
        assert_eq!(
            typo.check(&gates(false)).unwrap_err().to_string(),
            "a.json: answer 2 for gate `review`, `Request change`, names none of its choices: \
             [A] Approve, [R] Request changes, [S] Skip (did you mean `Request changes`?); \
             answer with a choice's key, label or target id"
        );
        let prose = AnswersFile::from_json(r#"{"review": "ship it next week"}"#, "a.json").unwrap();
        let message = prose.check(&gates(false)).unwrap_err().to_string();
        assert!(message.ends_with("or set human.freeform=true on the gate to accept free text"), "{message}");
        // A freeform gate takes any text.
        assert!(prose.check(&gates(true)).is_ok());

        let unknown = AnswersFile::from_json(r#"{"reveiw": "A"}"#, "a.json").unwrap();
        assert_eq!(
            unknown.check(&gates(false)).unwrap_err().to_string(),
            "a.json: `reveiw` is not a human gate of this workflow; its gates are: confirm, review"
        );
        assert_eq!(
            unknown.check(&[]).unwrap_err().to_string(),
            "a.json: `reveiw` is not a human gate of this workflow; it has no human gates"
        );
    }

    #[test]
    fn errors_name_the_file_position_or_gate() {
        let error = AnswersFile::from_json("{\n  \"gate\": [\"A\",]\n}", "a.json").unwrap_err();
        assert!(matches!(error, AnswersError::Json { line: 2, .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.starts_with("a.json:2:"), "{message}");
        assert!(message.contains("answers are not valid JSON"), "{message}");
        assert!(!message.contains(" at line "), "{message}");

        let error = AnswersFile::from_json(r#"["A"]"#, "a.json").unwrap_err();
        assert_eq!(
            error.to_string(),
            "a.json: answers must be a JSON object mapping gate ids to lists of answers, \
             e.g. {\"review\": [\"A\"]}; found a list"
        );

        let error = AnswersFile::from_json(r#"{"review": 3}"#, "a.json").unwrap_err();
        assert_eq!(
            error.to_string(),
            "a.json: the answers for gate `review` must be a string or a list of strings; found a number"
        );
        let error =
            AnswersFile::from_json(r#"{"ok": "A", "review": ["A", {"x": 1}]}"#, "a.json").unwrap_err();
        assert_eq!(
            error.to_string(),
            "a.json: the answers for gate `review` must be a string or a list of strings; \
             found an object at position 2"
        );
        let error = AnswersFile::from_json(r#"{"review": null}"#, "a.json").unwrap_err();
        assert!(error.to_string().ends_with("found null"), "{error}");
    }

    #[tokio::test]
    async fn files_are_read_and_unreadable_files_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.json");
        std::fs::write(&path, r#"{"gate": ["A"]}"#).unwrap();
        let answers = AnswersFile::from_file(&path).unwrap();
        assert_eq!(ask(&answers, "gate", &choices()).await, Answer::Choice(0));
        assert_eq!(ask(&answers, "gate", &choices()).await, Answer::Unavailable);
        assert_eq!(answers.origin(), path.display().to_string());

        std::fs::write(&path, "{").unwrap();
        let message = AnswersFile::from_file(&path).unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("{}:1:1: answers are not valid JSON", path.display())),
            "{message}"
        );

        let missing = dir.path().join("missing.json");
        let error = AnswersFile::from_file(&missing).unwrap_err();
        assert!(matches!(error, AnswersError::Read { .. }));
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("cannot read answers file {}: ", missing.display())),
            "{message}"
        );
    }
}
