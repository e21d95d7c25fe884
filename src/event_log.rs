//! The run's event log: one JSON object per line in `events.jsonl`, each an [`Event`] with
//! `seq`, `ts`, `run_id`, and `node_id`/`visit` where they apply. Observers (the CLI's progress
//! view, a manager waiting for its child's checkpoints) see every event as it is written.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

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

impl LoggedEvent {
    /// One line of an `events.jsonl` read back; `None` for a line that is not an event this
    /// fabro knows (torn, foreign, or from a newer version).
    pub fn from_line(line: &str) -> Option<LoggedEvent> {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        let object = value.as_object()?;
        Some(LoggedEvent {
            seq: object.get("seq")?.as_u64()?,
            ts: object.get("ts")?.as_str()?.to_string(),
            node_id: object.get("node_id").and_then(|id| id.as_str()).map(str::to_string),
            visit: object
                .get("visit")
                .and_then(|visit| visit.as_u64())
                .and_then(|visit| u32::try_from(visit).ok()),
            event: serde_json::from_value(value).ok()?,
        })
    }
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
    file: std::io::BufWriter<std::fs::File>,
    /// Reused for every line, so writing an event allocates nothing once the log is warm.
    scratch: line::Scratch,
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.flush();
    }
}

impl EventLog {
    /// The sequence number of the last event in the log at `path` (0 for none), so that a log
    /// opened again continues it; a torn last line is skipped.
    pub fn last_seq_in(path: &Path) -> u64 {
        /// Enough of the log's end for its last events; a longer last event reads it all.
        const TAIL: u64 = 64 * 1024;
        let last_seq = |text: &str| {
            text.lines()
                .rev()
                .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()?.get("seq")?.as_u64())
        };
        let len = std::fs::symlink_metadata(path).ok().filter(|meta| meta.is_file()).map(|meta| meta.len());
        let tail = len.and_then(|len| {
            let (_, tail) = crate::regular_file::read_tail(path, TAIL).ok()?;
            let tail = String::from_utf8_lossy(&tail).into_owned();
            // A window that starts inside the log starts mid-line.
            Some(if len > TAIL { tail.split_once('\n').map(|(_, rest)| rest.to_string())? } else { tail })
        });
        tail.as_deref()
            .and_then(last_seq)
            .or_else(|| {
                let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::EventLog)
                    .ok()?;
                last_seq(&text)
            })
            .unwrap_or(0)
    }

    /// Opens (appending) the log at `path` (a run's `events.jsonl`); `next_seq` continues an
    /// existing log.
    pub fn open(path: &Path, run_id: &str, next_seq: u64) -> std::io::Result<EventLog> {
        let file = crate::regular_file::open_append(path)?;
        Ok(EventLog {
            run_id: run_id.to_string(),
            state: Mutex::new(EventState {
                seq: next_seq,
                file: std::io::BufWriter::new(file),
                scratch: line::Scratch::default(),
            }),
            observers: Vec::new(),
        })
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
        // Observers print what the log holds: both get the event with the run's secrets redacted.
        let event = crate::secrets::redact_serialized(event);
        let Ok(mut state) = self.state.lock() else { return };
        state.seq += 1;
        let record = LoggedEvent {
            seq: state.seq,
            ts: now_rfc3339(),
            node_id: node_id.map(str::to_string),
            visit,
            event,
        };
        let EventState { file, scratch, .. } = &mut *state;
        if let Err(error) = line::write(file, scratch, &self.run_id, &record) {
            tracing::warn!(%error, "could not append to events.jsonl");
        }
        drop(state);
        for observer in &self.observers {
            observer(&record);
        }
    }

    /// Switches to the event log of a new run directory (after a `loop_restart`), keeping the
    /// observers; sequence numbers start again.
    pub fn reopen(&mut self, path: &Path, run_id: &str) -> std::io::Result<()> {
        self.flush();
        let file = crate::regular_file::open_append(path)?;
        let state = self.state.get_mut().map_err(|_| std::io::Error::other("event log lock poisoned"))?;
        state.seq = 0;
        state.file = std::io::BufWriter::new(file);
        self.run_id = run_id.to_string();
        Ok(())
    }

    /// Writes buffered events to the file.
    pub fn flush(&self) {
        let Ok(mut state) = self.state.lock() else { return };
        if let Err(error) = state.file.flush() {
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

/// How an event becomes its line: the event's fields (with its name under `event`) merged in
/// key order with `seq`, `ts`, `run_id`, `node_id` and `visit`; a field of the same name wins (as
/// `node_id` does in `checkpoint.saved`). Each field's value is written as JSON straight into a
/// reused buffer, and only the (key, range) pairs are sorted: no `serde_json::Value` is built.
mod line {
    use std::borrow::Cow;
    use std::io::Write;
    use std::ops::Range;

    use serde::ser::{Error as _, Impossible, Serialize, SerializeMap, SerializeStruct, Serializer};

    use super::LoggedEvent;

    type Error = serde_json::Error;

    /// The fields of the event being written, and their values' JSON.
    #[derive(Default)]
    pub struct Scratch {
        fields: Vec<(Cow<'static, str>, Range<usize>)>,
        values: Vec<u8>,
    }

    pub fn write(
        out: &mut impl Write,
        scratch: &mut Scratch,
        run_id: &str,
        record: &LoggedEvent,
    ) -> std::io::Result<()> {
        scratch.fields.clear();
        scratch.values.clear();
        record.event.serialize(Fields { scratch: &mut *scratch, key: None })?;
        let Scratch { fields, values } = scratch;
        fields.sort_by(|(a, _), (b, _)| a.cmp(b));
        enum Fixed<'a> {
            Text(&'a str),
            Number(u64),
        }
        // In key order.
        let fixed = [
            ("node_id", record.node_id.as_deref().map(Fixed::Text)),
            ("run_id", Some(Fixed::Text(run_id))),
            ("seq", Some(Fixed::Number(record.seq))),
            ("ts", Some(Fixed::Text(&record.ts))),
            ("visit", record.visit.map(|visit| Fixed::Number(u64::from(visit)))),
        ];
        let mut fixed = fixed.into_iter().filter_map(|(key, value)| Some((key, value?))).peekable();
        let mut fields = fields.iter().peekable();
        let mut first = true;
        let mut entry = |out: &mut dyn Write, key: &str| -> std::io::Result<()> {
            out.write_all(if first { b"{" } else { b"," })?;
            first = false;
            serde_json::to_writer(&mut *out, key)?;
            out.write_all(b":")
        };
        loop {
            let take_field = match (fixed.peek(), fields.peek()) {
                (Some((a, _)), Some((b, _))) if *a == b.as_ref() => {
                    fixed.next();
                    true
                }
                (Some((a, _)), Some((b, _))) => *a > b.as_ref(),
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (None, None) => break,
            };
            if take_field {
                if let Some((key, range)) = fields.next() {
                    entry(out, key)?;
                    out.write_all(&values[range.clone()])?;
                }
            } else if let Some((key, value)) = fixed.next() {
                entry(out, key)?;
                match value {
                    Fixed::Text(text) => serde_json::to_writer(&mut *out, text)?,
                    Fixed::Number(number) => write!(out, "{number}")?,
                }
            }
        }
        out.write_all(if first { b"{}\n" } else { b"}\n" })
    }

    /// Serializes an event's top level: a struct (or, with flattened fields, a map) whose
    /// fields are recorded one by one; anything else is an error.
    struct Fields<'a> {
        scratch: &'a mut Scratch,
        /// A map's key waiting for its value.
        key: Option<String>,
    }

    impl Fields<'_> {
        fn field<T: ?Sized + Serialize>(&mut self, key: Cow<'static, str>, value: &T) -> Result<(), Error> {
            let start = self.scratch.values.len();
            serde_json::to_writer(&mut self.scratch.values, value)?;
            self.scratch.fields.push((key, start..self.scratch.values.len()));
            Ok(())
        }
    }

    fn not_an_object() -> Error {
        Error::custom("an event is not a JSON object")
    }

    impl SerializeStruct for Fields<'_> {
        type Ok = ();
        type Error = Error;

        fn serialize_field<T: ?Sized + Serialize>(
            &mut self,
            key: &'static str,
            value: &T,
        ) -> Result<(), Error> {
            self.field(Cow::Borrowed(key), value)
        }

        fn end(self) -> Result<(), Error> {
            Ok(())
        }
    }

    impl SerializeMap for Fields<'_> {
        type Ok = ();
        type Error = Error;

        fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
            match key.serialize(serde_json::value::Serializer)? {
                serde_json::Value::String(key) => {
                    self.key = Some(key);
                    Ok(())
                }
                _ => Err(Error::custom("an event's key is not a string")),
            }
        }

        fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
            let key = self.key.take().ok_or_else(|| Error::custom("a value without a key"))?;
            self.field(Cow::Owned(key), value)
        }

        fn end(self) -> Result<(), Error> {
            Ok(())
        }
    }

    macro_rules! not_an_object {
        ($($method:ident($($arg:ty),*)),* $(,)?) => {
            $(fn $method(self, $(_: $arg),*) -> Result<(), Error> {
                Err(not_an_object())
            })*
        };
    }

    impl<'a> Serializer for Fields<'a> {
        type Ok = ();
        type Error = Error;
        type SerializeSeq = Impossible<(), Error>;
        type SerializeTuple = Impossible<(), Error>;
        type SerializeTupleStruct = Impossible<(), Error>;
        type SerializeTupleVariant = Impossible<(), Error>;
        type SerializeMap = Fields<'a>;
        type SerializeStruct = Fields<'a>;
        type SerializeStructVariant = Impossible<(), Error>;

        not_an_object!(
            serialize_bool(bool),
            serialize_i8(i8),
            serialize_i16(i16),
            serialize_i32(i32),
            serialize_i64(i64),
            serialize_u8(u8),
            serialize_u16(u16),
            serialize_u32(u32),
            serialize_u64(u64),
            serialize_f32(f32),
            serialize_f64(f64),
            serialize_char(char),
            serialize_str(&str),
            serialize_bytes(&[u8]),
            serialize_none(),
            serialize_unit(),
            serialize_unit_struct(&'static str),
            serialize_unit_variant(&'static str, u32, &'static str),
        );

        fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<(), Error> {
            Err(not_an_object())
        }

        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            value: &T,
        ) -> Result<(), Error> {
            value.serialize(self)
        }

        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<(), Error> {
            Err(not_an_object())
        }

        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
            Err(not_an_object())
        }

        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
            Err(not_an_object())
        }

        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct, Error> {
            Err(not_an_object())
        }

        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, Error> {
            Err(not_an_object())
        }

        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
            Ok(self)
        }

        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
            Ok(self)
        }

        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, Error> {
            Err(not_an_object())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_in(dir: &Path, events: usize, pad: usize) -> EventLog {
        let log = EventLog::open(&dir.join("events.jsonl"), "r1", 0).unwrap();
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
        let status = crate::run_status::RunStatus::Running;
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

    #[test]
    fn a_line_read_back_is_the_event_that_was_logged() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::open(&dir.path().join("events.jsonl"), "r1", 0).unwrap();
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        log.observe(move |event| keep.lock().unwrap().push(event.clone()));
        let started = Event::StageStarted {
            handler: "command".into(),
            stage_dir: Some("stages/go/1".into()),
            branch_id: Some("b".into()),
            sandbox: None,
        };
        log.stage_event("go", 1, started);
        log.run_event(Event::CheckpointFailed { error: "disk full".into() });
        log.flush();
        let text = std::fs::read_to_string(dir.path().join("events.jsonl")).unwrap();
        let read: Vec<LoggedEvent> = text.lines().map(|line| LoggedEvent::from_line(line).unwrap()).collect();
        assert_eq!(read, *seen.lock().unwrap());
        assert_eq!(LoggedEvent::from_line(r#"{"seq":1,"ts":"t","event":"no.such"}"#), None);
        assert_eq!(LoggedEvent::from_line("{\"seq\":1,\"ts"), None, "a torn line");
    }

    fn log_ts(line: &str) -> String {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["ts"].as_str().unwrap().to_string()
    }

    #[test]
    fn the_last_seq_is_read_from_the_end_of_a_long_log() {
        let dir = tempfile::tempdir().unwrap();
        let _log = log_in(dir.path(), 2_000, 100);
        assert!(std::fs::metadata(dir.path().join("events.jsonl")).unwrap().len() > 64 * 1024);
        assert_eq!(EventLog::last_seq_in(&dir.path().join("events.jsonl")), 2_000);
        // A torn last line is skipped.
        let mut file =
            std::fs::OpenOptions::new().append(true).open(dir.path().join("events.jsonl")).unwrap();
        file.write_all(br#"{"seq":2001,"ts":"#).unwrap();
        assert_eq!(EventLog::last_seq_in(&dir.path().join("events.jsonl")), 2_000);
        // A last event longer than the window read from the end: the whole log is read.
        let dir = tempfile::tempdir().unwrap();
        let _log = log_in(dir.path(), 3, 100_000);
        assert_eq!(EventLog::last_seq_in(&dir.path().join("events.jsonl")), 3);
        assert_eq!(EventLog::last_seq_in(&dir.path().join("none/events.jsonl")), 0);
    }
}
