//! `journal.jsonl`: the durable record of a run's main line, one JSON line per change of state
//! (a completed stage, a pause, a step-mode note, the end), appended and made durable once: the
//! run's one fsync per stage. Each line holds what changed: the stages that completed (with the
//! summary later preambles show), the context keys set and removed (large values are already
//! artifact pointers), visit and retry counters, where the run goes next, the worktree commit.
//!
//! `checkpoint.json` is a snapshot of the folded state, written every [`SNAPSHOT_EVERY`] entries
//! (compact: no per-stage history) and whole when the run pauses, is interrupted or ends. The
//! state of a run is the snapshot's context plus the journal's entries after it; the history
//! (completed stages, counters) is the journal's. A torn last line, left by a crash in the
//! middle of an append, is not part of the state: [`Journal::read`] reports it and the writer that
//! continues the run cuts it off first.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::layout;
use super::records::Checkpoint;
use crate::context::Context;
use crate::outcome::StageStatus;
use crate::run_dir::stage_summary::StageSummary;
use crate::run_status::RunStatus;

/// A compact snapshot (`checkpoint.json`) is written after this many entries
/// (`FABRO_SNAPSHOT_EVERY` overrides it, for tests that must kill fabro inside snapshot writes).
pub const SNAPSHOT_EVERY: u64 = 100;

/// [`SNAPSHOT_EVERY`], or `FABRO_SNAPSHOT_EVERY` when it is a positive number.
pub fn snapshot_every() -> u64 {
    static EVERY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        std::env::var("FABRO_SNAPSHOT_EVERY")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(SNAPSHOT_EVERY)
    })
}
/// `--checkpoint-sync batch`: the longest an appended entry waits for its fsync.
pub const BATCH_WINDOW: Duration = Duration::from_millis(50);

/// When appended entries are made durable (`--checkpoint-sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Never fsynced: survives a crash of fabro, not of the machine.
    Never,
    /// fsynced after every entry: a completed stage survives a crash of the machine.
    #[default]
    Stage,
    /// fsynced by a background thread at most [`BATCH_WINDOW`] after the append: a crash of the
    /// machine loses at most the stages of the last 50 ms.
    Batch,
}

impl SyncMode {
    /// The durability of the files written beside the journal (snapshots).
    pub fn durability(self) -> super::Durability {
        match self {
            SyncMode::Never => super::Durability::Unsynced,
            SyncMode::Stage | SyncMode::Batch => super::Durability::Synced,
        }
    }
}

/// One line of the journal.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// 1 for the first entry; consecutive.
    pub seq: u64,
    pub ts: String,
    /// The run's status after this entry.
    pub status: RunStatus,
    /// The stage this entry is about (completed, or waiting when paused).
    pub node: String,
    /// Where the run goes next; `None` when it has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The entry holds the whole state, not a change (a run's first entry, a fork's, the first
    /// entry of a run continued from an older run directory).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// Stage visits completed since the previous entry, in order (a parallel stage brings its
    /// branches' stages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageSummary>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub set: serde_json::Map<String, Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Visit counters that changed (0: the node has no visit any more).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub visits: BTreeMap<String, u32>,
    /// Retry counters that changed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retries: BTreeMap<String, u32>,
    /// The worktree commit after the stage (worktree mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The state of a run's main line, folded from its journal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// The last entry folded in.
    pub seq: u64,
    pub status: RunStatus,
    pub current_node: String,
    pub next_node: Option<String>,
    pub timestamp: String,
    pub context: Context,
    pub visits: BTreeMap<String, u32>,
    pub retries: BTreeMap<String, u32>,
    pub commit: Option<String>,
    /// Every completed stage visit, in order.
    pub stages: Vec<StageSummary>,
}

impl State {
    /// Folds one entry in. `with_context` is false for entries a snapshot's context already
    /// holds.
    pub fn apply(&mut self, entry: &Entry, with_context: bool) {
        if entry.reset {
            *self = State::default();
        }
        self.seq = entry.seq;
        self.status = entry.status;
        self.current_node.clone_from(&entry.node);
        self.next_node.clone_from(&entry.next);
        self.timestamp.clone_from(&entry.ts);
        if with_context {
            self.context.apply(&entry.set);
            for key in &entry.removed {
                self.context.remove(key);
            }
        }
        for (node, count) in &entry.visits {
            match count {
                0 => self.visits.remove(node),
                n => self.visits.insert(node.clone(), *n),
            };
        }
        for (node, count) in &entry.retries {
            self.retries.insert(node.clone(), *count);
        }
        if entry.commit.is_some() {
            self.commit.clone_from(&entry.commit);
        }
        self.stages.extend(entry.stages.iter().cloned());
    }

    /// [`State::apply`] for an entry read only to be folded in: its stages are moved, not copied.
    fn apply_owned(&mut self, mut entry: Entry, with_context: bool) {
        let stages = std::mem::take(&mut entry.stages);
        self.apply(&entry, with_context);
        self.stages.extend(stages);
    }

    /// The completed nodes, in order.
    pub fn completed_nodes(&self) -> Vec<String> {
        self.stages.iter().map(|stage| stage.node_id.clone()).collect()
    }

    /// The outcome of each node's last completed visit.
    pub fn outcomes(&self) -> BTreeMap<String, StageStatus> {
        self.stages.iter().map(|stage| (stage.node_id.clone(), stage.status)).collect()
    }

    /// The whole state as a `checkpoint.json` record.
    pub fn checkpoint(&self, run_id: &str) -> Checkpoint {
        Checkpoint {
            run_id: run_id.to_string(),
            status: self.status,
            current_node: self.current_node.clone(),
            next_node: self.next_node.clone(),
            completed_nodes: self.completed_nodes(),
            node_outcomes: self.outcomes(),
            node_visits: self.visits.clone(),
            node_retries: self.retries.clone(),
            context: self.context.clone(),
            timestamp: self.timestamp.clone(),
            commit: self.commit.clone(),
            journal_seq: Some(self.seq),
            partial: false,
        }
    }

    /// The state a `checkpoint.json` of a run made before the journal records, with its stage
    /// visits.
    pub fn from_checkpoint(checkpoint: &Checkpoint, stages: Vec<StageSummary>) -> State {
        State {
            seq: checkpoint.journal_seq.unwrap_or(0),
            status: checkpoint.status,
            current_node: checkpoint.current_node.clone(),
            next_node: checkpoint.next_node.clone(),
            timestamp: checkpoint.timestamp.clone(),
            context: checkpoint.context.clone(),
            visits: checkpoint.node_visits.clone(),
            retries: checkpoint.node_retries.clone(),
            commit: checkpoint.commit.clone(),
            stages,
        }
    }

    /// An entry that makes a new journal start at this state.
    pub fn reset_entry(&self) -> Entry {
        Entry {
            seq: 0,
            ts: self.timestamp.clone(),
            status: self.status,
            node: self.current_node.clone(),
            next: self.next_node.clone(),
            reset: true,
            stages: self.stages.clone(),
            set: self.context.to_map(),
            removed: Vec::new(),
            visits: self.visits.clone(),
            retries: self.retries.clone(),
            commit: self.commit.clone(),
        }
    }
}

/// A last line cut short by a crash: not part of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// Where the torn line starts: the journal's valid length.
    pub offset: u64,
    pub bytes: u64,
}

/// Why a journal cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot read `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{}` is corrupt at line {line}: {message}", path.display())]
    Corrupt { path: PathBuf, line: usize, message: String },
    /// `checkpoint.json` does not parse.
    #[error("`{}` is corrupt: {message}", path.display())]
    Snapshot { path: PathBuf, message: String },
    /// The journal holds no entry, but the snapshot says the run got past entry `covered`.
    #[error("`{}` is corrupt: {}", path.display(), emptied_message(*covered))]
    Emptied { path: PathBuf, covered: u64 },
}

fn emptied_message(covered: u64) -> String {
    format!(
        "it holds no entry, but checkpoint.json records the state after entry {covered}: the journal was \
         emptied, so what the run did cannot be read back; run the workflow again into another directory \
         (`fabro run WORKFLOW --run-dir NEW_DIR`)"
    )
}

impl JournalError {
    /// The file and what is wrong with it, for errors that name no line.
    pub fn corrupt_file(self) -> Result<(PathBuf, String), (PathBuf, std::io::Error)> {
        match self {
            JournalError::Io { path, source } => Err((path, source)),
            JournalError::Corrupt { path, line, message } => Ok((path, format!("line {line}: {message}"))),
            JournalError::Snapshot { path, message } => Ok((path, message)),
            JournalError::Emptied { path, covered } => Ok((path, emptied_message(covered))),
        }
    }
}

/// Where a run's journal ends, for the writer that continues it.
#[derive(Debug, Clone, Default)]
pub struct JournalEnd {
    /// The last whole entry's seq (0 for none).
    pub last_seq: u64,
    /// A last line cut short by a crash, cut off before the next append.
    pub torn: Option<Torn>,
}

/// A journal as read: its entries and the torn last line, if any.
#[derive(Debug, Default)]
pub struct Journal {
    pub entries: Vec<Entry>,
    /// Where each entry's line ends (the offset after its newline).
    pub ends: Vec<u64>,
    pub torn: Option<Torn>,
}

impl Journal {
    /// Whether the run directory has a journal (runs made before it have `checkpoints/`).
    pub fn exists(root: &Path) -> bool {
        std::fs::symlink_metadata(root.join(layout::JOURNAL)).is_ok_and(|meta| meta.is_file())
    }

    /// Reads `journal.jsonl`. The last line may be torn (no newline, or not JSON): it is
    /// reported, not read. Any other bad line is corruption.
    pub fn read(root: &Path) -> Result<Journal, JournalError> {
        let mut journal = Journal::default();
        let end = Journal::scan(root, |entry, end| {
            journal.entries.push(entry);
            journal.ends.push(end);
        })?;
        journal.torn = end.torn;
        Ok(journal)
    }

    /// Reads `journal.jsonl` line by line, handing each entry and the offset after its line to
    /// `each` (nothing is kept), and says where the journal ends. Errors as [`Journal::read`].
    pub fn scan(root: &Path, mut each: impl FnMut(Entry, u64)) -> Result<JournalEnd, JournalError> {
        let path = root.join(layout::JOURNAL);
        let bytes = crate::regular_file::read(&path, crate::regular_file::FileKind::EventLog)
            .map_err(|source| JournalError::Io { path: path.clone(), source })?;
        let mut journal_end = JournalEnd::default();
        let mut offset = 0usize;
        let mut line_number = 0;
        while offset < bytes.len() {
            line_number += 1;
            let end = bytes[offset..].iter().position(|&b| b == b'\n').map(|at| offset + at);
            let line = &bytes[offset..end.unwrap_or(bytes.len())];
            let parsed =
                serde_json::from_slice::<Entry>(line).map_err(|error| error.to_string()).and_then(|entry| {
                    check_counters(&entry.visits)?;
                    check_counters(&entry.retries)?;
                    Ok(entry)
                });
            match (parsed, end) {
                (Ok(entry), Some(end)) => {
                    let expected = match journal_end.last_seq {
                        0 => entry.seq.max(1),
                        last => last + 1,
                    };
                    if entry.seq != expected && !entry.reset {
                        return Err(JournalError::Corrupt {
                            path,
                            line: line_number,
                            message: format!("entry {} follows entry {}", entry.seq, expected - 1),
                        });
                    }
                    journal_end.last_seq = entry.seq;
                    offset = end + 1;
                    each(entry, offset as u64);
                }
                // The last line, unfinished: a crash during the append.
                (_, None) => {
                    journal_end.torn =
                        Some(Torn { offset: offset as u64, bytes: (bytes.len() - offset) as u64 });
                    break;
                }
                (Err(message), Some(_)) => {
                    return Err(JournalError::Corrupt { path, line: line_number, message })
                }
            }
        }
        Ok(journal_end)
    }

    /// The state after the last entry; `snapshot`, when given, supplies the context up to its
    /// `journal_seq` (entries after it are folded in whole).
    pub fn state(&self, snapshot: Option<&Checkpoint>) -> State {
        let snapshot = snapshot.filter(|s| s.journal_seq.is_some_and(|seq| seq <= self.last_seq()));
        let mut fold = Fold::over(snapshot);
        for entry in &self.entries {
            fold.add(entry.clone());
        }
        fold.state
    }

    /// The sequence number of the last entry (0 for none).
    pub fn last_seq(&self) -> u64 {
        self.entries.last().map_or(0, |entry| entry.seq)
    }
}

/// Reads the state of the run in `root`: from its journal and snapshot, or, for a run made
/// before the journal, from `checkpoint.json` alone. `None` when neither exists yet.
pub fn load_checkpoint(root: &Path) -> Result<Option<Checkpoint>, JournalError> {
    if !Journal::exists(root) {
        return read_snapshot(root);
    }
    Ok(read_state(root)?.map(|(state, _)| {
        let run_id = state.context.get_text("internal.run_id").unwrap_or_default();
        state.checkpoint(&run_id)
    }))
}

/// The state the journal of the run in `root` folds to over the snapshot, and where the journal
/// ends; `None` while it has no entry (the run has not finished its first stage). The journal is
/// folded as it is read: no entry is kept.
pub fn read_state(root: &Path) -> Result<Option<(State, JournalEnd)>, JournalError> {
    // The snapshot first: it is written after the entries it covers, so the journal read next
    // holds them all.
    let snapshot = read_snapshot(root)?;
    let fold = |snapshot: Option<&Checkpoint>| {
        let mut fold = Fold::over(snapshot);
        let end = Journal::scan(root, |entry, _| fold.add(entry))?;
        Ok::<_, JournalError>((fold.state, end))
    };
    let (mut state, mut end) = fold(snapshot.as_ref())?;
    if let Some(covered) =
        snapshot.as_ref().and_then(|s| s.journal_seq).filter(|covered| *covered > end.last_seq)
    {
        // A snapshot ahead of its journal (never written so, but a copied directory may be):
        // the journal alone, unless nothing is left of it.
        (state, end) = fold(None)?;
        if end.last_seq == 0 {
            return Err(JournalError::Emptied { path: root.join(layout::JOURNAL), covered });
        }
    }
    Ok((end.last_seq > 0).then_some((state, end)))
}

/// Entries folded into a state, in order; a snapshot supplies the context up to its
/// `journal_seq` (the entries it covers are folded without theirs).
struct Fold<'a> {
    state: State,
    snapshot: Option<&'a Checkpoint>,
}

impl<'a> Fold<'a> {
    fn over(snapshot: Option<&'a Checkpoint>) -> Fold<'a> {
        Fold { state: State::default(), snapshot }
    }

    fn add(&mut self, entry: Entry) {
        let seq = entry.seq;
        let covered = self.snapshot.and_then(|snapshot| snapshot.journal_seq);
        self.state.apply_owned(entry, covered.is_none_or(|covered| seq > covered));
        if let (Some(snapshot), true) = (self.snapshot, covered == Some(seq)) {
            self.state.context = snapshot.context.clone();
        }
    }
}

/// `checkpoint.json`, when present.
pub fn read_snapshot(root: &Path) -> Result<Option<Checkpoint>, JournalError> {
    let path = root.join(layout::CHECKPOINT);
    let snapshot: Option<Checkpoint> = super::read_record(&path).map_err(|error| match error {
        super::RecordError::Io(source) => JournalError::Io { path: path.clone(), source },
        super::RecordError::Corrupt(message) => JournalError::Snapshot { path: path.clone(), message },
    })?;
    if let Some(snapshot) = &snapshot {
        check_counters(&snapshot.node_visits)
            .and_then(|()| check_counters(&snapshot.node_retries))
            .map_err(|message| JournalError::Snapshot { path, message })?;
    }
    Ok(snapshot)
}

/// The most visits or retries of one node a run record may count. A node run a million times is
/// no workflow; a counter beyond that was tampered with, and near `u32::MAX` the next visit
/// would wrap to 0 and slip past `max_node_visits`.
pub const MAX_COUNTER: u32 = 1_000_000;

/// Refuses counters beyond [`MAX_COUNTER`].
fn check_counters(counters: &BTreeMap<String, u32>) -> Result<(), String> {
    match counters.iter().find(|(_, count)| **count > MAX_COUNTER) {
        Some((node, count)) => Err(format!(
            "the counter of `{node}` is {count}, more than any run reaches ({MAX_COUNTER}); the record was \
             tampered with or is corrupt"
        )),
        None => Ok(()),
    }
}

/// Appends entries to a run's journal.
pub struct Writer {
    file: Arc<File>,
    path: PathBuf,
    last_seq: u64,
    mode: SyncMode,
    batch: Option<BatchSyncer>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.path).field("last_seq", &self.last_seq).finish()
    }
}

impl Writer {
    /// Opens the journal of the run in `root` for appending after entry `last_seq`; a torn last
    /// line is cut off first (at `torn.offset`), so new entries never follow half of one.
    pub fn open(root: &Path, last_seq: u64, torn: Option<&Torn>, mode: SyncMode) -> std::io::Result<Writer> {
        let path = root.join(layout::JOURNAL);
        let file = crate::regular_file::open_append(&path)?;
        if let Some(torn) = torn {
            file.set_len(torn.offset)?;
            file.sync_data()?;
        }
        let file = Arc::new(file);
        let batch = (mode == SyncMode::Batch).then(|| BatchSyncer::start(Arc::clone(&file)));
        Ok(Writer { file, path, last_seq, mode, batch })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence number of the last entry appended.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Numbers `entry`, appends it as one line in one write, and makes it durable as the sync
    /// mode says. Returns its sequence number.
    pub fn append(&mut self, entry: &mut Entry) -> std::io::Result<u64> {
        entry.seq = self.last_seq + 1;
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        (&*self.file).write_all(&crate::secrets::redact_bytes(&line))?;
        match (&self.batch, self.mode) {
            (_, SyncMode::Stage) => self.file.sync_data()?,
            (Some(batch), SyncMode::Batch) => batch.mark(),
            _ => {}
        }
        self.last_seq = entry.seq;
        Ok(entry.seq)
    }

    /// Makes everything appended durable now (before a snapshot): only `batch` mode has entries
    /// waiting (`stage` synced each one, `never` syncs none).
    pub fn sync(&self) -> std::io::Result<()> {
        match self.mode {
            SyncMode::Batch => self.file.sync_data(),
            SyncMode::Stage | SyncMode::Never => Ok(()),
        }
    }
}

/// The background fsync of `--checkpoint-sync batch`: wakes at most every [`BATCH_WINDOW`]
/// while entries wait, and syncs once for all of them. Stops (with a last sync) on drop.
struct BatchSyncer {
    signal: Arc<(Mutex<BatchFlags>, Condvar)>,
    dirty: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct BatchFlags {
    pending: bool,
    stop: bool,
}

impl BatchSyncer {
    fn start(file: Arc<File>) -> BatchSyncer {
        let signal = Arc::new((Mutex::new(BatchFlags::default()), Condvar::new()));
        let dirty = Arc::new(AtomicBool::new(false));
        let (thread_signal, thread_dirty) = (Arc::clone(&signal), Arc::clone(&dirty));
        let thread = std::thread::Builder::new()
            .name("fabro-journal-sync".into())
            .spawn(move || {
                let (lock, wake) = &*thread_signal;
                loop {
                    let mut flags = lock.lock().unwrap_or_else(|p| p.into_inner());
                    while !flags.pending && !flags.stop {
                        flags = wake.wait(flags).unwrap_or_else(|p| p.into_inner());
                    }
                    let stop = flags.stop;
                    flags.pending = false;
                    drop(flags);
                    if !stop {
                        std::thread::sleep(BATCH_WINDOW);
                    }
                    if thread_dirty.swap(false, Ordering::AcqRel) {
                        if let Err(error) = file.sync_data() {
                            tracing::warn!(%error, "the journal could not be synced");
                        }
                    }
                    if stop {
                        return;
                    }
                }
            })
            .ok();
        BatchSyncer { signal, dirty, thread }
    }

    fn mark(&self) {
        self.dirty.store(true, Ordering::Release);
        let (lock, wake) = &*self.signal;
        lock.lock().unwrap_or_else(|p| p.into_inner()).pending = true;
        wake.notify_one();
    }
}

impl Drop for BatchSyncer {
    fn drop(&mut self) {
        let (lock, wake) = &*self.signal;
        lock.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stage(node: &str, visit: u32) -> StageSummary {
        let record = crate::run_dir::StageRecord {
            node_id: node.into(),
            visit,
            status: StageStatus::Success,
            duration_ms: 1,
            handler: Some(crate::graph::HandlerType::Conditional),
            failure_reason: None,
            usage: None,
            branch: None,
            cost_usd: None,
            dir: None,
        };
        StageSummary::from_record(&record)
    }

    fn entry(node: &str, next: Option<&str>, set: &[(&str, Value)]) -> Entry {
        Entry {
            status: RunStatus::Running,
            node: node.into(),
            next: next.map(str::to_string),
            stages: vec![stage(node, 1)],
            set: set.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            visits: BTreeMap::from([(node.to_string(), 1)]),
            ..Entry::default()
        }
    }

    #[test]
    fn entries_fold_into_the_state_and_a_torn_last_line_is_cut_off_before_appending() {
        let temp = tempfile::tempdir().unwrap();
        let mut writer = Writer::open(temp.path(), 0, None, SyncMode::Stage).unwrap();
        writer.append(&mut entry("a", Some("b"), &[("x", json!(1))])).unwrap();
        let mut second = entry("b", Some("c"), &[("y", json!("two"))]);
        second.removed = vec!["x".into()];
        writer.append(&mut second).unwrap();
        drop(writer);
        // A crash in the middle of the third append.
        let path = temp.path().join(layout::JOURNAL);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"seq":3,"ts":"","status":"run"#);
        std::fs::write(&path, &text).unwrap();

        let journal = Journal::read(temp.path()).unwrap();
        assert_eq!(journal.entries.len(), 2);
        let torn = journal.torn.clone().unwrap();
        let state = journal.state(None);
        assert_eq!(state.seq, 2);
        assert_eq!(state.completed_nodes(), ["a", "b"]);
        assert_eq!(state.next_node.as_deref(), Some("c"));
        assert_eq!(state.context.get("x"), None);
        assert_eq!(state.context.get("y"), Some(&json!("two")));

        let mut writer = Writer::open(temp.path(), journal.last_seq(), Some(&torn), SyncMode::Never).unwrap();
        writer.append(&mut entry("c", None, &[])).unwrap();
        let journal = Journal::read(temp.path()).unwrap();
        assert!(journal.torn.is_none());
        assert_eq!(journal.state(None).completed_nodes(), ["a", "b", "c"]);
    }

    #[test]
    fn a_snapshot_supplies_the_context_up_to_its_entry() {
        let temp = tempfile::tempdir().unwrap();
        let mut writer = Writer::open(temp.path(), 0, None, SyncMode::Batch).unwrap();
        writer.append(&mut entry("a", Some("b"), &[("x", json!(1))])).unwrap();
        writer.append(&mut entry("b", Some("c"), &[("y", json!(2))])).unwrap();
        drop(writer);
        let journal = Journal::read(temp.path()).unwrap();
        let mut snapshot = journal.state(None).checkpoint("r");
        assert_eq!(snapshot.journal_seq, Some(2));
        // Whatever the snapshot holds wins for the entries it covers.
        snapshot.context.set("x", 10);
        snapshot.journal_seq = Some(1);
        let state = journal.state(Some(&snapshot));
        assert_eq!(state.context.get("x"), Some(&json!(10)));
        assert_eq!(state.context.get("y"), Some(&json!(2)));
        assert_eq!(state.visits, BTreeMap::from([("a".into(), 1), ("b".into(), 1)]));
    }

    #[test]
    fn a_bad_line_before_the_last_is_corruption_with_its_line_number() {
        let temp = tempfile::tempdir().unwrap();
        let line = serde_json::to_string(&Entry { seq: 1, ..entry("a", None, &[]) }).unwrap();
        std::fs::write(temp.path().join(layout::JOURNAL), format!("{line}\nnot json\n{line}\n")).unwrap();
        let error = Journal::read(temp.path()).unwrap_err().to_string();
        assert!(error.contains("corrupt at line 2"), "{error}");
        std::fs::write(temp.path().join(layout::JOURNAL), format!("{line}\n{line}\n")).unwrap();
        let error = Journal::read(temp.path()).unwrap_err().to_string();
        assert!(error.contains("entry 1 follows entry 1"), "{error}");
    }

    #[test]
    fn a_reset_entry_starts_the_state_again() {
        let mut state = State::default();
        state.apply(&Entry { seq: 1, ..entry("a", Some("b"), &[("x", json!(1))]) }, true);
        let copy = state.reset_entry();
        let mut other = State::default();
        other.apply(&entry("z", None, &[]), true);
        other.apply(&copy, true);
        assert_eq!(other.completed_nodes(), ["a"]);
        assert_eq!(other.context.get("x"), Some(&json!(1)));
    }
}
