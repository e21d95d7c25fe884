//! The library's session API, as a program that drives fabro without its CLI uses it: build an
//! engine with `EngineBuilder`, run a workflow, and get typed refusals.

use std::sync::Arc;

use fabro::engine::RunOptions;
use fabro::run_setup::{BackendChoice, EngineBuilder, SetupError};
use fabro::run_status::RunStatus;
use fabro::stage::HandlerRegistry;
use fabro::Loader;
use tokio_util::sync::CancellationToken;

const GATED: &str = r#"digraph gated {
    start  [shape=Mdiamond]
    exit   [shape=Msquare]
    draft  [shape=box, prompt="Draft it"]
    review [shape=hexagon, label="Review"]
    ship   [shape=parallelogram, script="echo shipped > shipped.txt"]
    fix    [shape=parallelogram, script="echo fixed > fixed.txt"]
    start -> draft -> review
    review -> ship [label="[A] Approve"]
    review -> fix  [label="[F] Fix"]
    ship -> exit
    fix -> exit
}
"#;

fn load(dir: &std::path::Path, text: &str) -> fabro::ValidWorkflow {
    let path = dir.join("gated.dot");
    std::fs::write(&path, text).unwrap();
    Loader::new().load_file(&path).unwrap().into_valid().unwrap()
}

#[tokio::test]
async fn a_library_user_runs_a_workflow_with_answers_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let valid = load(dir.path(), GATED);
    std::fs::write(dir.path().join("answers.json"), r#"{"review": "F"}"#).unwrap();
    let engine = EngineBuilder::new(BackendChoice::Simulated)
        .answers_file(dir.path().join("answers.json"))
        .build(&valid)
        .unwrap();
    let options = RunOptions {
        run_dir: Some(dir.path().join("run")),
        work_dir: dir.path().to_path_buf(),
        ..RunOptions::default()
    };
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let events = Arc::clone(&seen);
    let observe =
        move |logged: &fabro::event_log::LoggedEvent| events.lock().unwrap().push(logged.event.clone());
    let report = engine.run(&valid, &options, observe, CancellationToken::new()).await.unwrap();
    assert_eq!(report.result.status, RunStatus::Succeeded);
    assert!(dir.path().join("fixed.txt").is_file(), "the answer `F` routes to fix");
    assert!(!dir.path().join("shipped.txt").exists());
    assert!(matches!(seen.lock().unwrap().last(), Some(fabro::event::Event::RunCompleted(_))));
}

#[test]
fn an_answers_file_for_gates_the_workflow_lacks_is_refused_when_the_engine_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let valid = load(dir.path(), GATED);
    std::fs::write(dir.path().join("answers.json"), r#"{"revue": "F"}"#).unwrap();
    let refused = EngineBuilder::new(BackendChoice::Simulated)
        .answers_file(dir.path().join("answers.json"))
        .build(&valid)
        .err()
        .expect("refused");
    assert!(matches!(refused, SetupError::AnswersMismatch(_)), "{refused:?}");
    assert!(refused.to_string().contains("revue"), "{refused}");
    assert!(refused.to_string().ends_with("; the run did not start"), "{refused}");
}

#[test]
fn a_stage_no_handler_runs_is_refused_with_its_node_and_kind() {
    let dir = tempfile::tempdir().unwrap();
    let valid = load(dir.path(), GATED);
    let refused = EngineBuilder::new(BackendChoice::Simulated)
        .handlers(HandlerRegistry::new())
        .build(&valid)
        .err()
        .expect("refused");
    match refused {
        SetupError::UnhandledStage { node, kind } => {
            assert_eq!((node.as_str(), kind.as_str()), ("start", "start"));
        }
        other => panic!("unexpected refusal: {other:?}"),
    }
}

#[test]
fn a_missing_responses_file_is_a_typed_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let valid = load(dir.path(), GATED);
    let refused = EngineBuilder::new(BackendChoice::Scripted(dir.path().join("nope.json")))
        .build(&valid)
        .err()
        .expect("refused");
    assert!(matches!(refused, SetupError::Responses(_)), "{refused:?}");
    assert!(refused.to_string().contains("nope.json"), "{refused}");
}
