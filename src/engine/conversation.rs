//! What a line's LLM stages carry from one to the next: the preamble and thread of the stage about
//! to run, the conversation threads of `full` fidelity (in memory, and in `threads/` so that a
//! resumed run can rebuild them), and the operator notes delivered to the stage.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::step::{pending_notes, OPERATOR_NOTES_KEY};
use super::walker::LineState;
use crate::chat::ChatMessage;
use crate::chat::ThreadMessage;
use crate::fidelity::preamble::PreambleInput;
use crate::graph::settings::{resolve_fidelity, EdgeSettings, FidelityMode};
use crate::graph::{Node, Workflow};
use crate::outcome::Exchange;
use crate::run_dir::layout;
use crate::stage::child_run::ParentLink;

/// One line's conversation state.
#[derive(Debug, Default, Clone)]
pub(super) struct Conversation {
    /// The preamble of the LLM stage about to run (none under full fidelity).
    pub preamble: Option<String>,
    /// The thread of the full-fidelity LLM stage about to run.
    pub current_thread: Option<String>,
    /// Conversation threads by key.
    pub threads: HashMap<String, Vec<ThreadMessage>>,
    /// Set on resume: the first stage cannot continue a conversation thread that did not survive
    /// the stop, so `full` fidelity becomes `summary:high` for it.
    pub degrade_full_fidelity: bool,
    /// Operator notes (step mode) the LLM stage about to run received; its status.json records them.
    pub delivered_notes: Vec<String>,
}

/// What [`Conversation::prepare`] needs to know about the run.
pub(super) struct RunFacts<'a> {
    pub workflow: &'a Workflow,
    pub run_id: &'a str,
    /// Set when the run is a manager's child: its stages hear from the manager.
    pub parent: Option<&'a ParentLink>,
}

impl Conversation {
    /// A resumed run's conversation: its threads as `threads/` holds them, and the first stage's
    /// `full` fidelity degraded.
    pub fn resumed(run_dir: &Path) -> Conversation {
        Conversation {
            threads: load_threads(run_dir),
            degrade_full_fidelity: true,
            ..Conversation::default()
        }
    }

    /// A branch's conversation: the parent's threads so far.
    pub fn for_branch(&self) -> Conversation {
        Conversation { threads: self.threads.clone(), ..Conversation::default() }
    }

    /// The thread the stage about to run continues, with its messages so far.
    pub fn thread(&self) -> Option<(&str, &[ThreadMessage])> {
        self.current_thread.as_deref().map(|key| (key, self.threads.get(key).map_or(&[][..], Vec::as_slice)))
    }

    /// Resolves the stage's fidelity (entered by the edge with `edge` attributes) and, for LLM
    /// stages, its preamble and thread; delivers waiting operator notes to an LLM stage. Records
    /// the fidelity and thread in the context.
    pub fn prepare(
        &mut self,
        node: &Node,
        edge: Option<&EdgeSettings>,
        run: &RunFacts<'_>,
        state: &mut LineState,
    ) {
        let workflow = run.workflow;
        let mut fidelity = resolve_fidelity(edge, &node.settings.stage, workflow.settings());
        if std::mem::take(&mut self.degrade_full_fidelity) && fidelity == FidelityMode::Full {
            fidelity = FidelityMode::SummaryHigh;
        }
        let full_llm = fidelity == FidelityMode::Full && node.handler_type().is_llm();
        let previous = state.completed.last().map(String::as_str);
        let thread = full_llm
            .then(|| crate::fidelity::resolve_thread(node, edge, workflow, previous))
            .flatten()
            .map(str::to_string);
        self.current_thread = thread.clone();
        state.context.set("internal.fidelity", fidelity.as_str());
        self.preamble = if node.handler_type().receives_preamble() {
            let input = PreambleInput {
                goal: workflow.goal(),
                run_id: run.run_id,
                stages: &state.summaries,
                context: &state.context,
            };
            crate::fidelity::preamble::build(fidelity, &input)
        } else {
            None
        };
        if let Some(parent) = run.parent {
            self.preamble = parent.stage_preamble(node, self.preamble.take());
        }
        if node.handler_type().is_llm() {
            let notes = pending_notes(&state.context);
            if !notes.is_empty() {
                self.preamble = Some(super::step::with_notes(self.preamble.as_deref(), &notes));
                state.context.remove(OPERATOR_NOTES_KEY);
                self.delivered_notes = notes;
            }
        }
        state.context.set("internal.thread_id", thread.map_or(Value::Null, Value::from));
    }

    /// Under `full` fidelity: adds the exchange of stage `node` (what it sent, its tool turns,
    /// what came back) to its thread, in memory and in `threads/<key>.jsonl` of `run_dir`, so the
    /// next stage on the thread sees it and a resumed run can rebuild it.
    pub fn extend_thread(&mut self, run_dir: &Path, node: &str, exchange: Exchange) {
        let Some(key) = self.current_thread.take() else { return };
        let messages = if exchange.conversation.is_empty() {
            vec![ChatMessage::user(exchange.prompt), ChatMessage::assistant(exchange.response, Vec::new())]
        } else {
            exchange.conversation
        };
        let exchange: Vec<ThreadMessage> = messages
            .into_iter()
            .map(|message| ThreadMessage { node: Some(node.to_string()), message })
            .collect();
        let path = layout::thread_file(run_dir, &key);
        let lines: String =
            exchange.iter().filter_map(|m| serde_json::to_string(m).ok()).map(|l| l + "\n").collect();
        let appended = std::fs::create_dir_all(layout::threads_dir(run_dir)).and_then(|()| {
            use std::io::Write as _;
            crate::regular_file::open_append(&path)?.write_all(lines.as_bytes())
        });
        if let Err(error) = appended {
            tracing::warn!(%error, "thread `{key}` not persisted");
        }
        self.threads.entry(key).or_default().extend(exchange);
    }
}

/// Conversation threads persisted in a run directory (`threads/<encoded key>.jsonl`).
fn load_threads(run_dir: &Path) -> HashMap<String, Vec<ThreadMessage>> {
    let mut threads = HashMap::new();
    for entry in std::fs::read_dir(layout::threads_dir(run_dir)).into_iter().flatten().flatten() {
        let Some(key) = entry.file_name().to_str().and_then(layout::thread_key) else { continue };
        let Ok(text) =
            crate::regular_file::read_to_string(entry.path(), crate::regular_file::FileKind::Record)
        else {
            continue;
        };
        let messages = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
        threads.insert(key, messages);
    }
    threads
}
