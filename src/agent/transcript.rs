//! `stages/<node>/<visit>/transcript.jsonl`: every model turn, tool call and tool result of a
//! stage that talks to a real provider, one JSON object per line, secrets redacted. It is also
//! where the stage's events go (the run's event log, with node and visit).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_json::{json, Value};

use crate::event::Event;
use crate::event_log::{now_rfc3339, EventLog};
use crate::llm::chat::ChatResponse;
use crate::redaction::Secrets;
use crate::run_dir::layout;

/// The transcript entry of one model answer: text, tool calls, the provider's thinking when it
/// sent any, usage, model and stop reason.
pub fn assistant_record(turn: u32, response: &ChatResponse) -> Value {
    let mut entry = json!({"turn": turn, "text": response.text, "tool_calls": response.tool_calls,
                           "usage": response.usage, "model": response.model, "stop_reason": response.stop_reason});
    if let Some(thinking) = response.thinking() {
        entry["thinking"] = json!(thinking);
    }
    entry
}

/// Records one stage's conversation.
pub struct Transcript<'a> {
    path: Option<PathBuf>,
    /// Opened at the first entry and kept: an entry costs one write.
    file: std::sync::Mutex<Option<std::fs::File>>,
    events: Option<&'a EventLog>,
    node_id: &'a str,
    visit: u32,
    secrets: Secrets,
}

impl<'a> Transcript<'a> {
    /// Appends to `<stage_dir>/transcript.jsonl` and emits events to `events`, when given.
    pub fn new(
        stage_dir: Option<&Path>,
        events: Option<&'a EventLog>,
        node_id: &'a str,
        visit: u32,
        secrets: Secrets,
    ) -> Transcript<'a> {
        Transcript {
            path: stage_dir.map(|d| d.join(layout::TRANSCRIPT)),
            file: std::sync::Mutex::new(None),
            events,
            node_id,
            visit,
            secrets,
        }
    }

    /// Appends one entry (`type` plus `fields`). A transcript that cannot be written is a warning.
    pub fn record(&self, kind: &str, fields: Value) {
        let Some(path) = &self.path else { return };
        let mut entry = json!({"ts": now_rfc3339(), "type": kind});
        if let (Value::Object(entry), Value::Object(fields)) = (&mut entry, self.secrets.redact_json(&fields))
        {
            entry.extend(fields);
        }
        let line = entry.to_string() + "\n";
        let Ok(mut file) = self.file.lock() else { return };
        let written = match file.as_mut() {
            Some(open) => open.write_all(line.as_bytes()),
            None => crate::regular_file::open_append(path)
                .and_then(|open| file.insert(open).write_all(line.as_bytes())),
        };
        if let Err(error) = written {
            tracing::warn!(%error, path = %path.display(), "transcript entry not written");
        }
    }

    /// Writes the events so far to `events.jsonl` now, for watchers (`fabro logs -f`), instead
    /// of at the stage's end.
    pub fn flush_events(&self) {
        if let Some(events) = self.events {
            events.flush();
        }
    }

    /// Emits a stage event, secrets redacted from its fields. An event that no longer reads as
    /// one once redacted (a secret in a number?) is dropped rather than written unredacted.
    pub fn event(&self, event: Event) {
        let Some(events) = self.events else { return };
        if self.secrets.is_empty() {
            events.stage_event(self.node_id, self.visit, event);
            return;
        }
        let redacted = serde_json::to_value(&event)
            .and_then(|fields| Event::deserialize(self.secrets.redact_json(&fields)));
        match redacted {
            Ok(event) => events.stage_event(self.node_id, self.visit, event),
            Err(error) => tracing::warn!(%error, "event dropped: it does not read as one once redacted"),
        }
    }

    /// The transcript of the stage's sub-conversation `n` (an agentic tool wrapper's):
    /// `<stage_dir>/subtasks/<n>.jsonl`, with the stage's events.
    pub fn subtask(&self, n: u32) -> Transcript<'a> {
        let path =
            self.path.as_ref().and_then(|path| path.parent()).map(|dir| dir.join("subtasks")).and_then(
                |dir| match std::fs::create_dir_all(&dir) {
                    Ok(()) => Some(dir.join(format!("{n}.jsonl"))),
                    Err(error) => {
                        tracing::warn!(%error, dir = %dir.display(), "subtask transcript not written");
                        None
                    }
                },
            );
        Transcript {
            path,
            file: std::sync::Mutex::new(None),
            events: self.events,
            node_id: self.node_id,
            visit: self.visit,
            secrets: self.secrets.clone(),
        }
    }

    /// The transcript of sub-agent `id`'s conversation: `<stage_dir>/subagents/<id>.jsonl`, without
    /// the stage's events (the parent's `agent.sub.*` events tell its life).
    pub fn subagent(&self, id: &str) -> Transcript<'a> {
        let path =
            self.path.as_ref().and_then(|path| path.parent()).map(|dir| dir.join("subagents")).and_then(
                |dir| match std::fs::create_dir_all(&dir) {
                    Ok(()) => Some(dir.join(format!("{id}.jsonl"))),
                    Err(error) => {
                        tracing::warn!(%error, dir = %dir.display(), "sub-agent transcript not written");
                        None
                    }
                },
            );
        Transcript {
            path,
            file: std::sync::Mutex::new(None),
            events: None,
            node_id: self.node_id,
            visit: self.visit,
            secrets: self.secrets.clone(),
        }
    }

    /// Where the transcript is written (none outside a run).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    pub fn node_id(&self) -> &str {
        self.node_id
    }

    pub fn visit(&self) -> u32 {
        self.visit
    }
}
