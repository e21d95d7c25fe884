//! The run's event log: one JSON object per line in `events.jsonl`, each with `seq`, `ts`,
//! `run_id`, `event`, and `node_id`/`visit` where they apply. Observers (the CLI's progress view)
//! see every event as it is written.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

/// One event, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub seq: u64,
    pub ts: String,
    pub event: String,
    pub node_id: Option<String>,
    pub visit: Option<u32>,
    /// Event-specific fields (`from`, `to`, `reason`, `status`, ...).
    pub fields: Map<String, Value>,
}

type Observer = Box<dyn Fn(&Event) + Send + Sync>;

/// Appends events to `events.jsonl` and tells observers. Writing never fails the run: an event
/// that cannot be written is logged with `tracing` and the run goes on.
pub struct EventLog {
    run_id: String,
    state: Mutex<EventState>,
    observers: Vec<Observer>,
}

struct EventState {
    seq: u64,
    /// Buffered: flushed by [`EventLog::flush`] at every checkpoint and when the run ends, so
    /// a stage costs one write, not one per event.
    file: Option<std::io::BufWriter<std::fs::File>>,
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.flush();
    }
}

impl EventLog {
    /// Opens (appending) `events.jsonl` in `run_dir`; `next_seq` continues an existing log.
    /// The sequence number of the last event in `run_dir/events.jsonl` (0 for none), so that a
    /// log opened again continues it; a torn last line is skipped.
    pub fn last_seq_in(run_dir: &Path) -> u64 {
        crate::regular_file::read_to_string(
            run_dir.join("events.jsonl"),
            crate::regular_file::FileKind::EventLog,
        )
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()?.get("seq")?.as_u64())
        })
        .unwrap_or(0)
    }

    pub fn open(run_dir: &Path, run_id: &str, next_seq: u64) -> std::io::Result<EventLog> {
        let file =
            std::fs::OpenOptions::new().create(true).append(true).open(run_dir.join("events.jsonl"))?;
        Ok(EventLog {
            run_id: run_id.to_string(),
            state: Mutex::new(EventState { seq: next_seq, file: Some(std::io::BufWriter::new(file)) }),
            observers: Vec::new(),
        })
    }

    /// An event log that only tells observers (for tests and dry runs without a directory).
    pub fn in_memory(run_id: &str) -> EventLog {
        EventLog {
            run_id: run_id.to_string(),
            state: Mutex::new(EventState { seq: 0, file: None }),
            observers: Vec::new(),
        }
    }

    pub fn observe(&mut self, observer: impl Fn(&Event) + Send + Sync + 'static) {
        self.observers.push(Box::new(observer));
    }

    /// Records a run-level event.
    pub fn run_event(&self, event: &str, fields: Value) {
        self.emit(event, None, None, fields);
    }

    /// Records an event about one visit of one stage.
    pub fn stage_event(&self, event: &str, node_id: &str, visit: u32, fields: Value) {
        self.emit(event, Some(node_id), Some(visit), fields);
    }

    fn emit(&self, event: &str, node_id: Option<&str>, visit: Option<u32>, fields: Value) {
        let fields = match fields {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => Map::from_iter([("value".to_string(), other)]),
        };
        let Ok(mut state) = self.state.lock() else { return };
        state.seq += 1;
        let record = Event {
            seq: state.seq,
            ts: now_rfc3339(),
            event: event.to_string(),
            node_id: node_id.map(str::to_string),
            visit,
            fields,
        };
        if let Some(file) = state.file.as_mut() {
            let mut line =
                json!({"seq": record.seq, "ts": record.ts, "run_id": self.run_id, "event": record.event});
            if let Some(object) = line.as_object_mut() {
                if let Some(node_id) = &record.node_id {
                    object.insert("node_id".into(), node_id.clone().into());
                }
                if let Some(visit) = record.visit {
                    object.insert("visit".into(), visit.into());
                }
                for (key, value) in &record.fields {
                    object.insert(key.clone(), value.clone());
                }
            }
            if let Err(error) = writeln!(file, "{line}") {
                tracing::warn!(%error, "could not append to events.jsonl");
            }
        }
        drop(state);
        for observer in &self.observers {
            observer(&record);
        }
    }

    /// Switches to the event log of a new run directory (after a `loop_restart`), keeping the
    /// observers; sequence numbers start again.
    pub fn reopen(&mut self, run_dir: &Path, run_id: &str) -> std::io::Result<()> {
        self.flush();
        let file =
            std::fs::OpenOptions::new().create(true).append(true).open(run_dir.join("events.jsonl"))?;
        let state = self.state.get_mut().map_err(|_| std::io::Error::other("event log lock poisoned"))?;
        *state = EventState { seq: 0, file: Some(std::io::BufWriter::new(file)) };
        self.run_id = run_id.to_string();
        Ok(())
    }

    /// Writes buffered events to the file.
    pub fn flush(&self) {
        let Ok(mut state) = self.state.lock() else { return };
        if let Some(Err(error)) = state.file.as_mut().map(Write::flush) {
            tracing::warn!(%error, "could not write events.jsonl");
        }
    }

    /// The sequence number of the last event written.
    pub fn last_seq(&self) -> u64 {
        self.state.lock().map(|state| state.seq).unwrap_or(0)
    }
}

/// The current time as RFC 3339 with milliseconds, UTC.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
