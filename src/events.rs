//! The run's event log: one JSON object per line in `events.jsonl`, each an [`Event`] with
//! `seq`, `ts`, `run_id`, and `node_id`/`visit` where they apply. Observers (the CLI's progress
//! view, a manager waiting for its child's checkpoints) see every event as it is written.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Map, Value};

use crate::event::Event;

/// One event as the log numbered it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    pub seq: u64,
    pub ts: String,
    /// The stage visit a stage event is about; none for a run event.
    pub node_id: Option<String>,
    pub visit: Option<u32>,
    pub event: Event,
}

type Observer = Box<dyn Fn(&LoggedEvent) + Send + Sync>;

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
        /// Enough of the log's end for its last events; a longer last event reads it all.
        const TAIL: u64 = 64 * 1024;
        let path = run_dir.join("events.jsonl");
        let last_seq = |text: &str| {
            text.lines()
                .rev()
                .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()?.get("seq")?.as_u64())
        };
        let len = std::fs::symlink_metadata(&path).ok().filter(|meta| meta.is_file()).map(|meta| meta.len());
        let tail = len.and_then(|len| {
            let tail = crate::run_dir::stage_output::read_tail(&path, TAIL)?;
            // A window that starts inside the log starts mid-line.
            Some(if len > TAIL { tail.split_once('\n').map(|(_, rest)| rest.to_string())? } else { tail })
        });
        tail.as_deref()
            .and_then(last_seq)
            .or_else(|| {
                let text =
                    crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::EventLog)
                        .ok()?;
                last_seq(&text)
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

    pub fn observe(&mut self, observer: impl Fn(&LoggedEvent) + Send + Sync + 'static) {
        self.observers.push(Box::new(observer));
    }

    /// Records a run-level event.
    pub fn run_event(&self, event: Event) {
        self.emit(None, None, event);
    }

    /// Records an event about one visit of one stage.
    pub fn stage_event(&self, node_id: &str, visit: u32, event: Event) {
        self.emit(Some(node_id), Some(visit), event);
    }

    fn emit(&self, node_id: Option<&str>, visit: Option<u32>, event: Event) {
        let Ok(mut state) = self.state.lock() else { return };
        state.seq += 1;
        let record = LoggedEvent {
            seq: state.seq,
            ts: now_rfc3339(),
            node_id: node_id.map(str::to_string),
            visit,
            event,
        };
        if let Some(file) = state.file.as_mut() {
            if let Err(error) = write_line(file, &self.run_id, &record) {
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

/// One line of `events.jsonl`: the event's fields (with its name under `event`) merged in key
/// order with `seq`, `ts`, `run_id`, `node_id` and `visit` (a field of the same name wins, as
/// `node_id` does in `checkpoint.saved`).
fn write_line(out: &mut impl Write, run_id: &str, record: &LoggedEvent) -> std::io::Result<()> {
    let Value::Object(fields) = serde_json::to_value(&record.event)? else {
        return Err(std::io::Error::other("an event that is not a JSON object"));
    };
    serde_json::to_writer(&mut *out, &Line { run_id, record, fields: &fields })?;
    out.write_all(b"\n")
}

/// An event as its line: the fixed keys merged in order with the (sorted) fields.
struct Line<'a> {
    run_id: &'a str,
    record: &'a LoggedEvent,
    fields: &'a Map<String, Value>,
}

impl serde::Serialize for Line<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        enum Field<'a> {
            Text(&'a str),
            Number(u64),
            Value(&'a Value),
        }
        let record = self.record;
        // In key order.
        let fixed = [
            ("node_id", record.node_id.as_deref().map(Field::Text)),
            ("run_id", Some(Field::Text(self.run_id))),
            ("seq", Some(Field::Number(record.seq))),
            ("ts", Some(Field::Text(&record.ts))),
            ("visit", record.visit.map(|visit| Field::Number(u64::from(visit)))),
        ];
        let mut fixed = fixed.into_iter().filter_map(|(key, value)| Some((key, value?))).peekable();
        let mut fields =
            self.fields.iter().map(|(key, value)| (key.as_str(), Field::Value(value))).peekable();
        let mut map = serializer.serialize_map(None)?;
        loop {
            let next = match (fixed.peek(), fields.peek()) {
                (Some((a, _)), Some((b, _))) if a < b => fixed.next(),
                (Some((a, _)), Some((b, _))) if a == b => {
                    fixed.next();
                    fields.next()
                }
                (_, Some(_)) => fields.next(),
                (Some(_), None) => fixed.next(),
                (None, None) => break,
            };
            if let Some((key, value)) = next {
                map.serialize_entry(key, &value)?;
            }
        }
        map.end()
    }
}

/// The current time as RFC 3339 with milliseconds, UTC.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_in(dir: &Path, events: usize, pad: usize) -> EventLog {
        let log = EventLog::open(dir, "r1", 0).unwrap();
        for _ in 0..events {
            log.run_event(Event::CheckpointFailed { error: "x".repeat(pad) });
        }
        log.flush();
        log
    }

    #[test]
    fn lines_hold_the_fields_in_key_order_and_a_field_wins_over_a_fixed_key() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(dir.path(), 0, 0);
        let started = Event::StageStarted {
            handler: "prompt".into(),
            stage_dir: Some("stages/plan/2".into()),
            branch_id: None,
            sandbox: None,
        };
        log.stage_event("plan", 2, started);
        let status = crate::run_dir::RunStatus::Running;
        log.stage_event("plan", 2, Event::CheckpointSaved { node_id: "mine".into(), status });
        log.flush();
        let text = std::fs::read_to_string(dir.path().join("events.jsonl")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"event":"stage.started","handler":"prompt","node_id":"plan","run_id":"r1","seq":1,"stage_dir":"stages/plan/2","ts":"TS","visit":2}"#
                .replace("TS", &log_ts(lines[0]))
        );
        assert!(
            lines[1].starts_with(r#"{"event":"checkpoint.saved","node_id":"mine","run_id":"r1","seq":2,"#)
        );
    }

    fn log_ts(line: &str) -> String {
        serde_json::from_str::<Value>(line).unwrap()["ts"].as_str().unwrap().to_string()
    }

    #[test]
    fn the_last_seq_is_read_from_the_end_of_a_long_log() {
        let dir = tempfile::tempdir().unwrap();
        let _log = log_in(dir.path(), 2_000, 100);
        assert!(std::fs::metadata(dir.path().join("events.jsonl")).unwrap().len() > 64 * 1024);
        assert_eq!(EventLog::last_seq_in(dir.path()), 2_000);
        // A torn last line is skipped.
        let mut file =
            std::fs::OpenOptions::new().append(true).open(dir.path().join("events.jsonl")).unwrap();
        file.write_all(br#"{"seq":2001,"ts":"#).unwrap();
        assert_eq!(EventLog::last_seq_in(dir.path()), 2_000);
        // A last event longer than the window read from the end: the whole log is read.
        let dir = tempfile::tempdir().unwrap();
        let _log = log_in(dir.path(), 3, 100_000);
        assert_eq!(EventLog::last_seq_in(dir.path()), 3);
        assert_eq!(EventLog::last_seq_in(&dir.path().join("none")), 0);
    }
}
