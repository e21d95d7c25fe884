//! Human gates (`shape=hexagon`): ask the run's interviewer to pick one of the gate's outgoing
//! edges and route to it.
//!
//! Each outgoing edge is a choice, in declaration order, named by its label's accelerator key
//! (`[A] Approve`). The question is the node's `prompt`, else its label; `timeout` bounds the wait
//! and `human.default_choice` is taken when it passes. The chosen edge becomes the outcome's
//! preferred label and suggested next stage, and the context records it:
//!
//! | key | value |
//! |---|---|
//! | `human.gate.selected` | the choice's key, or `freeform` |
//! | `human.gate.label` | the chosen edge's full label (its target id when unlabeled) |
//! | `human.gate.target` | the chosen edge's target node id |
//! | `human.gate.text` | the text of a freeform answer |
//!
//! An answer must name a choice (by key, label or target id). Only a gate with
//! `human.freeform=true` or a `freeform=true` edge takes other text: it is kept in
//! `human.gate.text` and routing follows the freeform edge, else the only edge, else the edges'
//! conditions. A freeform edge is not one of the choices; a gate whose only edge is freeform asks
//! for text alone. When no answer can be had (no terminal, answers
//! file used up) the run pauses.

use std::time::Duration;

use crate::event::Event;
use crate::graph::attribute::format_duration;
use crate::graph::{Choice, EdgeRef};
use crate::interview::{choice_for, list_choices, takes_freeform, Answer, Question};
use crate::outcome::{Outcome, Pause, PauseKind};
use crate::stage::{Handler, HandlerError, StageRun};

/// Runs human gates.
#[derive(Debug, Clone, Copy, Default)]
pub struct HumanHandler;

/// One choice with the edge it came from.
struct GateChoice<'w> {
    choice: Choice<'w>,
    /// The edge's label as written, or its target id when unlabeled.
    full_label: &'w str,
}

#[async_trait::async_trait]
impl Handler for HumanHandler {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let node = stage.node;
        let gate = node.id.as_str();
        let edges = match stage.run.workflow.index_of(gate) {
            Some(index) => stage.run.workflow.outgoing(index),
            None => Vec::new(),
        };
        // A `freeform=true` edge is no choice: it takes the text that names none.
        let options: Vec<GateChoice<'_>> =
            edges.iter().filter(|edge| !edge.edge.settings.freeform).map(option_for).collect();
        let free_edge = edges.iter().find(|edge| edge.edge.settings.freeform).map(option_for);
        let choices: Vec<Choice<'_>> = options.iter().map(|option| option.choice.clone()).collect();

        if stage.run.dry_run {
            return Ok(match (options.first(), &free_edge) {
                (Some(first), _) => chosen(first).with_notes(format!("dry run: chose {}", describe(first))),
                (None, Some(free)) => freeform_taken(free, String::new())
                    .with_notes(format!("dry run: took the freeform edge to {}", free.choice.target)),
                (None, None) => {
                    Outcome::fail(format!("human gate `{gate}` has no outgoing edges to choose from"))
                }
            });
        }
        if options.is_empty() && free_edge.is_none() {
            return Ok(Outcome::fail(format!("human gate `{gate}` has no outgoing edges to choose from")));
        }

        let text = node.prompt().unwrap_or_else(|| node.label());
        let timeout = node.settings.stage.timeout;
        let started = Event::InterviewStarted {
            question: text.to_string(),
            choices: options.iter().map(|option| option.full_label.to_string()).collect(),
            timeout: timeout.map(format_duration),
        };
        stage.run.events.stage_event(gate, stage.visit, started);

        let takes_text = takes_freeform(node) || free_edge.is_some();
        let question = Question { gate_id: gate, text, choices: &choices, timeout, freeform: takes_text };
        let answer = tokio::select! {
            biased;
            () = stage.run.cancel.cancelled() => return Err(HandlerError::Cancelled),
            answer = ask(stage, &question) => answer,
        };

        match answer {
            Answer::Choice(index) => {
                let Some(option) = options.get(index) else {
                    return Err(HandlerError::Terminal(format!(
                        "the interviewer answered choice {} but human gate `{gate}` has {} choices",
                        index + 1,
                        options.len()
                    )));
                };
                completed(stage, option.choice.key.clone(), Some(option));
                Ok(chosen(option).with_notes(format!("chose {}", describe(option))))
            }
            Answer::Freeform(text) => Ok(freeform(stage, &options, free_edge.as_ref(), text)),
            // Interviewers that ask a person ask again; recorded answers are checked before the
            // run starts. An answer that still names no choice routes nowhere.
            Answer::Unrecognized(text) => Err(HandlerError::Paused(Pause::new(
                PauseKind::Answer,
                format!(
                    "human gate `{gate}` got the answer `{text}`, which names none of its choices ({}); \
                     the checkpoint is saved. Resume with an answer that names a choice, or set \
                     human.freeform=true on the gate to accept free text",
                    list_choices(&choices)
                ),
            ))),
            Answer::Timeout => Ok(timed_out(stage, &options, &choices, timeout)),
            // The CLI prints how to resume; the reason says what the gate needs.
            Answer::Unavailable => Err(HandlerError::Paused(Pause::new(
                PauseKind::Answer,
                match options.first() {
                    Some(first) => format!(
                        "human gate `{gate}` is waiting for an answer: {} (answers file: {{\"{gate}\": [\"{}\"]}})",
                        list_choices(&choices),
                        first.choice.key
                    ),
                    None => format!(
                        "human gate `{gate}` is waiting for a free-text answer (answers file: {{\"{gate}\": [\"your text\"]}})"
                    ),
                },
            ))),
        }
    }
}

/// Asks the interviewer, giving up after the gate's timeout even if the interviewer does not
/// watch it itself.
async fn ask(stage: &StageRun<'_>, question: &Question<'_>) -> Answer {
    let asking = stage.run.services.interviewer.ask(question);
    match question.timeout {
        Some(timeout) => tokio::time::timeout(timeout, asking).await.unwrap_or(Answer::Timeout),
        None => asking.await,
    }
}

fn option_for<'w>(edge: &EdgeRef<'w>) -> GateChoice<'w> {
    let target = edge.to.id.as_str();
    let label = edge.edge.label();
    GateChoice { choice: Choice::from_edge(label, target), full_label: label.unwrap_or(target) }
}

/// `[A] Approve -> deploy`
fn describe(option: &GateChoice<'_>) -> String {
    format!("[{}] {} -> {}", option.choice.key, option.choice.label, option.choice.target)
}

/// Success routed along the option's edge.
fn chosen(option: &GateChoice<'_>) -> Outcome {
    Outcome {
        preferred_label: Some(option.full_label.to_string()),
        suggested_next_ids: vec![option.choice.target.to_string()],
        ..Outcome::success()
    }
    .with_update("human.gate.selected", option.choice.key.as_str())
    .with_update("human.gate.label", option.full_label)
    .with_update("human.gate.target", option.choice.target)
}

/// Records `interview.completed`: the answer and the choice it led to, if any.
fn completed(stage: &StageRun<'_>, answer: String, option: Option<&GateChoice<'_>>) {
    let completed = Event::InterviewCompleted {
        answer,
        key: option.map(|o| o.choice.key.clone()),
        label: option.map(|o| o.full_label.to_string()),
        target: option.map(|o| o.choice.target.to_string()),
    };
    stage.run.events.stage_event(&stage.node.id, stage.visit, completed);
}

/// A freeform answer: text that names a choice (an interviewer that does not match) takes it;
/// other text takes the gate's `freeform=true` edge, else the only edge if there is one, else
/// leaves routing to the edges' conditions.
fn freeform(
    stage: &StageRun<'_>,
    options: &[GateChoice<'_>],
    free_edge: Option<&GateChoice<'_>>,
    text: String,
) -> Outcome {
    let choices: Vec<Choice<'_>> = options.iter().map(|option| option.choice.clone()).collect();
    if let Some(option) = choice_for(&text, &choices).and_then(|index| options.get(index)) {
        completed(stage, text.clone(), Some(option));
        return chosen(option)
            .with_update("human.gate.text", text)
            .with_notes(format!("chose {}", describe(option)));
    }
    let (taken, why) = match (free_edge, options) {
        (Some(free), _) => (Some(free), "the freeform edge"),
        (None, [only]) => (Some(only), "the only choice"),
        (None, _) => (None, ""),
    };
    completed(stage, text.clone(), taken);
    match taken {
        Some(edge) => {
            freeform_taken(edge, text).with_notes(format!("freeform answer; {why} is {}", describe(edge)))
        }
        None => Outcome::success()
            .with_notes("freeform answer")
            .with_update("human.gate.selected", "freeform")
            .with_update("human.gate.text", text),
    }
}

/// Free text routed along `edge`.
fn freeform_taken(edge: &GateChoice<'_>, text: String) -> Outcome {
    Outcome {
        preferred_label: Some(edge.full_label.to_string()),
        suggested_next_ids: vec![edge.choice.target.to_string()],
        ..Outcome::success()
    }
    .with_update("human.gate.label", edge.full_label)
    .with_update("human.gate.target", edge.choice.target)
    .with_update("human.gate.selected", "freeform")
    .with_update("human.gate.text", text)
}

/// Nobody answered in time: take `human.default_choice` if it names a choice, else fail.
fn timed_out(
    stage: &StageRun<'_>,
    options: &[GateChoice<'_>],
    choices: &[Choice<'_>],
    timeout: Option<Duration>,
) -> Outcome {
    let gate = stage.node.id.as_str();
    let default = stage.node.settings.human().and_then(|human| human.default_choice.clone());
    let option = default.as_deref().and_then(|text| choice_for(text, choices)).and_then(|i| options.get(i));
    let waited = timeout.map(|t| format!(" after {}", format_duration(t))).unwrap_or_default();
    let timed_out = Event::InterviewTimeout {
        timeout: timeout.map(format_duration),
        default: default.clone(),
        key: option.map(|o| o.choice.key.clone()),
        label: option.map(|o| o.full_label.to_string()),
        target: option.map(|o| o.choice.target.to_string()),
    };
    stage.run.events.stage_event(gate, stage.visit, timed_out);
    match (option, default) {
        (Some(option), _) => chosen(option)
            .with_notes(format!("no answer{waited}; took the default choice {}", describe(option))),
        (None, Some(default)) => Outcome::fail(format!(
            "human gate `{gate}` timed out{waited}; its default choice `{default}` names none of its choices"
        )),
        (None, None) => Outcome::fail(format!("human gate `{gate}` timed out with no default choice")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::{json, Value};

    use super::*;
    use crate::event_log::{EventLog, LoggedEvent};
    use crate::handlers::test_support::{FixedAnswer, Fixture};
    use crate::interview::answers::AnswersFile;
    use crate::interview::{AutoApprove, FirstAvailable, Interviewer, NoAnswers};
    use crate::outcome::StageStatus;

    const GATE: &str = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        gate [shape=hexagon, label="Ship it?", human.default_choice="S", timeout=5s]
        deploy [shape=parallelogram, script="true"]
        revise [shape=parallelogram, script="true"]
        start -> gate
        gate -> deploy [label="[A] Approve"]
        gate -> revise [label="R) Request changes"]
        gate -> exit [label="[S] Skip"]
        deploy -> exit
        revise -> gate
    }"#;

    /// A fixture for `dot` whose events are collected.
    fn fixture_with(dot: &str, interviewer: Arc<dyn Interviewer>) -> (Fixture, Arc<Mutex<Vec<LoggedEvent>>>) {
        let mut fixture = Fixture::new(dot);
        fixture.services.interviewer = interviewer;
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut log =
            EventLog::open(&fixture.dir.path().join("events.jsonl"), "test-run", 0).expect("event log");
        let sink = events.clone();
        log.observe(move |event| sink.lock().unwrap().push(event.clone()));
        fixture.events = log;
        (fixture, events)
    }

    fn fixture(answer: Answer) -> (Fixture, Arc<Mutex<Vec<LoggedEvent>>>) {
        fixture_with(GATE, Arc::new(FixedAnswer(answer)))
    }

    async fn run(fixture: &Fixture) -> Result<Outcome, HandlerError> {
        HumanHandler.run(&fixture.stage("gate")).await
    }

    fn update<'a>(outcome: &'a Outcome, key: &str) -> Option<&'a str> {
        outcome.context_updates.get(key).and_then(Value::as_str)
    }

    /// The event as its JSON fields, with its name under `event`.
    fn fields(event: &LoggedEvent) -> Value {
        serde_json::to_value(&event.event).unwrap()
    }

    fn names(events: &Mutex<Vec<LoggedEvent>>) -> Vec<String> {
        events
            .lock()
            .unwrap()
            .iter()
            .map(|event| fields(event)["event"].as_str().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_choice_routes_along_its_edge() {
        let (fixture, events) = fixture(Answer::Choice(1));
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.preferred_label.as_deref(), Some("R) Request changes"));
        assert_eq!(outcome.suggested_next_ids, ["revise"]);
        assert_eq!(update(&outcome, "human.gate.selected"), Some("R"));
        assert_eq!(update(&outcome, "human.gate.label"), Some("R) Request changes"));
        assert_eq!(update(&outcome, "human.gate.target"), Some("revise"));
        assert_eq!(update(&outcome, "human.gate.text"), None);
        assert_eq!(outcome.notes.as_deref(), Some("chose [R] Request changes -> revise"));

        let events = events.lock().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(fields(&events[0])["event"], "interview.started");
        assert_eq!(events[0].node_id.as_deref(), Some("gate"));
        assert_eq!(events[0].visit, Some(1));
        assert_eq!(fields(&events[0])["question"], "Ship it?");
        assert_eq!(fields(&events[0])["choices"], json!(["[A] Approve", "R) Request changes", "[S] Skip"]));
        assert_eq!(fields(&events[0])["timeout"], "5s");
        assert_eq!(fields(&events[1])["event"], "interview.completed");
        assert_eq!(fields(&events[1])["answer"], "R");
        assert_eq!(fields(&events[1])["key"], "R");
        assert_eq!(fields(&events[1])["label"], "R) Request changes");
        assert_eq!(fields(&events[1])["target"], "revise");
    }

    #[tokio::test]
    async fn a_choice_out_of_range_is_a_terminal_error() {
        let (fixture, _) = fixture(Answer::Choice(3));
        let error = run(&fixture).await.unwrap_err();
        assert!(
            matches!(&error, HandlerError::Terminal(m) if m.contains("choice 4") && m.contains("3 choices"))
        );
    }

    #[tokio::test]
    async fn an_answer_naming_no_choice_routes_nowhere() {
        let (fixture, events) = fixture(Answer::Unrecognized("Request change".into()));
        let error = run(&fixture).await.unwrap_err();
        let HandlerError::Paused(pause) = &error else { panic!("{error:?}") };
        assert_eq!(pause.kind, PauseKind::Answer);
        let message = &pause.reason;
        assert!(message.contains("`Request change`, which names none of its choices"), "{message}");
        assert!(message.contains("[A] Approve, [R] Request changes, [S] Skip"), "{message}");
        assert_eq!(names(&events), ["interview.started"]);
    }

    #[tokio::test]
    async fn freeform_text_is_recorded_without_a_route() {
        let (fixture, events) = fixture(Answer::Freeform("add more tests first".into()));
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.preferred_label, None);
        assert!(outcome.suggested_next_ids.is_empty());
        assert_eq!(update(&outcome, "human.gate.selected"), Some("freeform"));
        assert_eq!(update(&outcome, "human.gate.text"), Some("add more tests first"));
        assert_eq!(update(&outcome, "human.gate.target"), None);
        let events = events.lock().unwrap();
        assert_eq!(fields(&events[1])["event"], "interview.completed");
        assert_eq!(fields(&events[1])["answer"], "add more tests first");
        assert_eq!(fields(&events[1])["key"], Value::Null);
    }

    #[tokio::test]
    async fn freeform_text_naming_a_choice_takes_it() {
        let (fixture, _) = fixture(Answer::Freeform("Approve".into()));
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.preferred_label.as_deref(), Some("[A] Approve"));
        assert_eq!(outcome.suggested_next_ids, ["deploy"]);
        assert_eq!(update(&outcome, "human.gate.selected"), Some("A"));
        assert_eq!(update(&outcome, "human.gate.text"), Some("Approve"));
    }

    #[tokio::test]
    async fn freeform_text_at_a_gate_with_one_edge_follows_it() {
        let dot = r#"digraph t {
            start [shape=Mdiamond]
            exit [shape=Msquare]
            note [shape=hexagon, prompt="Anything to add?"]
            start -> note -> exit
        }"#;
        let (fixture, events) = fixture_with(dot, Arc::new(FixedAnswer(Answer::Freeform("ship it".into()))));
        let outcome = HumanHandler.run(&fixture.stage("note")).await.unwrap();
        assert_eq!(outcome.preferred_label.as_deref(), Some("exit"));
        assert_eq!(outcome.suggested_next_ids, ["exit"]);
        assert_eq!(update(&outcome, "human.gate.selected"), Some("freeform"));
        assert_eq!(update(&outcome, "human.gate.text"), Some("ship it"));
        assert_eq!(update(&outcome, "human.gate.target"), Some("exit"));
        let events = events.lock().unwrap();
        assert_eq!(fields(&events[0])["question"], "Anything to add?");
        assert_eq!(fields(&events[0])["choices"], json!(["exit"]));
        assert!(fields(&events[0]).get("timeout").is_none());
        assert_eq!(fields(&events[1])["target"], "exit");
    }

    #[tokio::test]
    async fn a_timeout_takes_the_default_choice() {
        let (fixture, events) = fixture(Answer::Timeout);
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.preferred_label.as_deref(), Some("[S] Skip"));
        assert_eq!(outcome.suggested_next_ids, ["exit"]);
        assert_eq!(update(&outcome, "human.gate.selected"), Some("S"));
        assert_eq!(update(&outcome, "human.gate.target"), Some("exit"));
        let notes = outcome.notes.unwrap();
        assert!(notes.contains("default choice [S] Skip -> exit") && notes.contains("after 5s"), "{notes}");
        assert_eq!(names(&events), ["interview.started", "interview.timeout"]);
        let events = events.lock().unwrap();
        assert_eq!(fields(&events[1])["default"], "S");
        assert_eq!(fields(&events[1])["target"], "exit");
    }

    #[tokio::test]
    async fn a_timeout_without_a_default_fails() {
        let dot = GATE.replace(r#"human.default_choice="S", "#, "");
        let (fixture, events) = fixture_with(&dot, Arc::new(FixedAnswer(Answer::Timeout)));
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(
            outcome.failure_reason.as_deref(),
            Some("human gate `gate` timed out with no default choice")
        );
        assert_eq!(names(&events), ["interview.started", "interview.timeout"]);
    }

    #[tokio::test]
    async fn the_gate_times_out_even_if_the_interviewer_does_not() {
        struct Never;
        #[async_trait::async_trait]
        impl Interviewer for Never {
            async fn ask(&self, _question: &Question<'_>) -> Answer {
                std::future::pending().await
            }
        }
        let dot = GATE.replace("timeout=5s", "timeout=10ms");
        let (fixture, _) = fixture_with(&dot, Arc::new(Never));
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.suggested_next_ids, ["exit"]);
    }

    #[tokio::test]
    async fn no_answer_pauses_the_run_with_an_example() {
        let (fixture, events) = fixture(Answer::Unavailable);
        let error = run(&fixture).await.unwrap_err();
        assert_eq!(
            error,
            HandlerError::Paused(Pause::new(
                PauseKind::Answer,
                "human gate `gate` is waiting for an answer: [A] Approve, [R] Request changes, [S] Skip \
                 (answers file: {\"gate\": [\"A\"]})"
            ))
        );
        assert_eq!(names(&events), ["interview.started"]);

        let (fixture, _) = fixture_with(GATE, Arc::new(NoAnswers));
        assert!(matches!(run(&fixture).await, Err(HandlerError::Paused(_))));
    }

    #[tokio::test]
    async fn dry_run_takes_the_first_choice_without_asking() {
        let (mut fixture, events) = fixture(Answer::Unavailable);
        fixture.dry_run = true;
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.suggested_next_ids, ["deploy"]);
        assert_eq!(update(&outcome, "human.gate.selected"), Some("A"));
        assert_eq!(outcome.notes.as_deref(), Some("dry run: chose [A] Approve -> deploy"));
        assert!(names(&events).is_empty());
    }

    #[tokio::test]
    async fn cancellation_stops_the_wait() {
        struct Never;
        #[async_trait::async_trait]
        impl Interviewer for Never {
            async fn ask(&self, _question: &Question<'_>) -> Answer {
                std::future::pending().await
            }
        }
        let (fixture, _) = fixture_with(GATE, Arc::new(Never));
        let cancel = fixture.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            cancel.cancel();
        });
        assert_eq!(run(&fixture).await, Err(HandlerError::Cancelled));
    }

    #[tokio::test]
    async fn answers_file_drives_successive_visits() {
        let answers = AnswersFile::from_json(r#"{"gate": ["revise", "Approve"]}"#, "answers.json").unwrap();
        let (fixture, _) = fixture_with(GATE, Arc::new(answers));
        assert_eq!(run(&fixture).await.unwrap().suggested_next_ids, ["revise"]);
        assert_eq!(run(&fixture).await.unwrap().suggested_next_ids, ["deploy"]);
        assert!(matches!(run(&fixture).await, Err(HandlerError::Paused(_))));
    }

    #[tokio::test]
    async fn a_chain_falls_back_to_auto_approve() {
        let answers = AnswersFile::from_json(r#"{"gate": ["S"]}"#, "answers.json").unwrap();
        let chain = FirstAvailable(vec![Arc::new(answers), Arc::new(AutoApprove)]);
        let (fixture, _) = fixture_with(GATE, Arc::new(chain));
        assert_eq!(run(&fixture).await.unwrap().suggested_next_ids, ["exit"]);
        assert_eq!(run(&fixture).await.unwrap().suggested_next_ids, ["deploy"]);
    }

    #[tokio::test]
    async fn console_answers_route_the_gate() {
        let console = crate::interview::console::Console::with_io(&b"request changes\n"[..], std::io::sink());
        let (fixture, _) = fixture_with(GATE, Arc::new(console));
        let outcome = run(&fixture).await.unwrap();
        assert_eq!(outcome.suggested_next_ids, ["revise"]);
        assert!(matches!(run(&fixture).await, Err(HandlerError::Paused(_))), "input exhausted");
    }
}
