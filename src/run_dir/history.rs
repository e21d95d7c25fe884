//! Going back in a run's history (`fabro fork`, `fabro rewind`): the journal holds every change
//! of state, so the state right after any completed stage visit can be rebuilt and picked up
//! again, either in a new run directory (fork) or in place (rewind). Runs made before the
//! journal kept every checkpoint in `checkpoints/<seq>-<node>.json`; they are read too.
//!
//! The state "after `NODE@VISIT`" is the first journal entry (or checkpoint), in order, whose
//! node is NODE, after which NODE has VISIT visits, and whose status is `running`, `succeeded`
//! or `failed` (paused and interrupted entries name a stage that did not complete). Without a
//! visit, the last visit is meant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::journal::{Entry, Journal, State, SyncMode};
use super::layout;
use super::records::{Checkpoint, Manifest, RunResult, StageRecord};
use super::{write_json_file, Durability, RunDir, RunDirError};
use crate::event::Event;
use crate::event_log::{now_rfc3339, EventLog};
use crate::run_dir::stage_summary::StageSummary;
use crate::run_status::RunStatus;

/// Why a run's history cannot be used as asked.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("`{}` is not a fabro run directory (no {missing})", path.display())]
    NotARun { path: PathBuf, missing: &'static str },
    #[error("`{}` is corrupt: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("the run in `{}` has no checkpoint history (no checkpoints/ directory; it was made by an older fabro), so it cannot be forked or rewound", path.display())]
    NoHistory { path: PathBuf },
    #[error("the run in `{}` has no completed visit of stage `{node}`; stages with checkpoints: {}", path.display(), list(known))]
    UnknownNode { path: PathBuf, node: String, known: Vec<String> },
    #[error("stage `{node}` has no completed visit {visit}; completed visits: {}", list(existing))]
    NoSuchVisit { node: String, visit: u32, existing: Vec<u32> },
    #[error("the run ended right after `{node}@{visit}`; there is nothing to continue from there")]
    NothingToContinue { node: String, visit: u32 },
    #[error("invalid stage `{text}`: expected NODE or NODE@VISIT (VISIT a number from 1)")]
    BadTarget { text: String },
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error(transparent)]
    Worktree(#[from] crate::worktree::WorktreeError),
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Parses `NODE` or `NODE@VISIT`.
pub fn parse_target(text: &str) -> Result<(String, Option<u32>), HistoryError> {
    let bad = || HistoryError::BadTarget { text: text.to_string() };
    match text.rsplit_once('@') {
        Some((node, visit)) => {
            let visit = visit.parse::<u32>().ok().filter(|v| *v > 0).ok_or_else(bad)?;
            if node.is_empty() {
                return Err(bad());
            }
            Ok((node.to_string(), Some(visit)))
        }
        None if text.is_empty() => Err(bad()),
        None => Ok((text.to_string(), None)),
    }
}

/// One point of the history, chosen.
struct Selected {
    visit: u32,
    /// The state at that point, as recorded (status not changed).
    checkpoint: Checkpoint,
    /// The stage visits completed up to that point.
    summaries: Vec<StageSummary>,
    place: Place,
}

/// Where the chosen point is recorded.
enum Place {
    /// Entry `index` (0-based) of `journal.jsonl`, whose first `bytes` bytes hold the entries up
    /// to it.
    Journal { bytes: u64 },
    /// `checkpoints/<seq>-<node>.json` of a run made before the journal.
    Checkpoints { seq: u64 },
}

fn select(root: &Path, node: &str, visit: Option<u32>) -> Result<Selected, HistoryError> {
    let (manifest, _) = read_manifest(root)?;
    let journal = match Journal::exists(root) {
        true => Some(Journal::read(root).map_err(journal_error)?),
        false => None,
    };
    // An emptied journal beside a snapshot that went past it: the story resume and inspect tell.
    if journal.as_ref().is_some_and(|journal| journal.entries.is_empty()) {
        let snapshot = super::journal::read_snapshot(root).map_err(journal_error)?;
        if let Some(covered) = snapshot.and_then(|snapshot| snapshot.journal_seq) {
            let path = root.join(layout::JOURNAL);
            return Err(journal_error(super::journal::JournalError::Emptied { path, covered }));
        }
    }
    // A run made before the journal has its history in checkpoints/; one continued since has
    // it there up to its journal's first entry (which holds the whole state it went on from).
    let continued = journal.as_ref().is_none_or(|journal| journal.entries.first().is_some_and(|e| e.reset));
    let legacy = match continued && (journal.is_none() || root.join("checkpoints").is_dir()) {
        true => history_files(root)?,
        false => Vec::new(),
    };
    if journal.is_none() && legacy.is_empty() {
        return Err(HistoryError::NoHistory { path: root.to_path_buf() });
    }
    // Stages in the order they ran; a visit with a point in both (the state the journal went on
    // from) is taken from the journal.
    let mut known: Vec<String> = Vec::new();
    let older = legacy_points(legacy, node, &mut known)?;
    let mut points =
        journal.as_ref().map(|journal| journal_points(journal, node, &mut known)).unwrap_or_default();
    for (count, point) in older {
        points.entry(count).or_insert(point);
    }
    match (choose(root, node, visit, points, known)?, journal) {
        (Point::Journal(_), None) => Err(HistoryError::NoHistory { path: root.to_path_buf() }),
        (Point::Journal(index), Some(journal)) => {
            let mut state = super::journal::State::default();
            for entry in &journal.entries[..=index] {
                state.apply(entry, true);
            }
            let bytes = journal.ends[index];
            let checkpoint = state.checkpoint(&manifest.run_id);
            let visit = checkpoint.node_visits.get(node).copied().unwrap_or(0);
            Ok(Selected { visit, checkpoint, summaries: state.stages, place: Place::Journal { bytes } })
        }
        (Point::Checkpoint(seq, checkpoint), _) => {
            let summaries = super::saved::legacy_summaries(root, &checkpoint);
            let visit = checkpoint.node_visits.get(node).copied().unwrap_or(0);
            Ok(Selected { visit, checkpoint: *checkpoint, summaries, place: Place::Checkpoints { seq } })
        }
    }
}

/// Where the state after a visit is recorded, before it is chosen.
enum Point {
    /// The index of its journal entry.
    Journal(usize),
    /// `checkpoints/<seq>-<node>.json` and what it holds.
    Checkpoint(u64, Box<Checkpoint>),
}

/// The first completed journal entry of each visit of `node`; `known` gains every stage the
/// journal completed.
fn journal_points(journal: &Journal, node: &str, known: &mut Vec<String>) -> BTreeMap<u32, Point> {
    let mut points = BTreeMap::new();
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for (index, entry) in journal.entries.iter().enumerate() {
        if entry.reset {
            counts.clear();
        }
        for (name, count) in &entry.visits {
            counts.insert(name.clone(), *count);
        }
        for stage in &entry.stages {
            if !known.contains(&stage.node_id) {
                known.push(stage.node_id.clone());
            }
        }
        let completed = matches!(entry.status, RunStatus::Running | RunStatus::Succeeded | RunStatus::Failed);
        if entry.node != node || !completed {
            continue;
        }
        if let Some(&count) = counts.get(node).filter(|&&count| count > 0) {
            points.entry(count).or_insert(Point::Journal(index));
        }
    }
    points
}

/// The first completed checkpoint of each visit of `node` among `history` (checkpoints/);
/// `known` gains every stage with a checkpoint.
fn legacy_points(
    history: Vec<(u64, String, PathBuf)>,
    node: &str,
    known: &mut Vec<String>,
) -> Result<BTreeMap<u32, Point>, HistoryError> {
    let mut points = BTreeMap::new();
    for (seq, file_node, path) in history {
        if !known.contains(&file_node) {
            known.push(file_node.clone());
        }
        if file_node != node {
            continue;
        }
        let checkpoint: Checkpoint = read_json_path(&path)?;
        if checkpoint.current_node != node
            || !matches!(checkpoint.status, RunStatus::Running | RunStatus::Succeeded | RunStatus::Failed)
        {
            continue;
        }
        let Some(&count) = checkpoint.node_visits.get(node) else { continue };
        points.entry(count).or_insert(Point::Checkpoint(seq, Box::new(checkpoint)));
    }
    Ok(points)
}

/// The point after visit `visit` (default: the last) among the first points of each visit.
fn choose<T>(
    root: &Path,
    node: &str,
    visit: Option<u32>,
    mut visits: BTreeMap<u32, T>,
    known: Vec<String>,
) -> Result<T, HistoryError> {
    if visits.is_empty() {
        return Err(HistoryError::UnknownNode { path: root.to_path_buf(), node: node.to_string(), known });
    }
    let existing: Vec<u32> = visits.keys().copied().collect();
    let wanted = match visit {
        Some(visit) => visit,
        None => existing.last().copied().unwrap_or(1),
    };
    visits.remove(&wanted).ok_or(HistoryError::NoSuchVisit {
        node: node.to_string(),
        visit: wanted,
        existing,
    })
}

fn journal_error(error: super::journal::JournalError) -> HistoryError {
    match error.corrupt_file() {
        Ok((path, message)) => HistoryError::Corrupt { path, message },
        Err((path, source)) => HistoryError::RunDir(RunDirError::Io { path, source }),
    }
}

/// `checkpoints/<seq>-<node>.json` files, by sequence number.
fn history_files(root: &Path) -> Result<Vec<(u64, String, PathBuf)>, HistoryError> {
    let dir = root.join("checkpoints");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(HistoryError::NoHistory { path: root.to_path_buf() })
        }
        Err(source) => return Err(RunDirError::Io { path: dir, source }.into()),
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".json") else { continue };
        let Some((seq, node)) = stem.split_once('-') else { continue };
        let Ok(seq) = seq.parse::<u64>() else { continue };
        files.push((seq, node.to_string(), entry.path()));
    }
    files.sort();
    Ok(files)
}

fn read_json_path<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, HistoryError> {
    let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Record)
        .map_err(|source| HistoryError::RunDir(RunDirError::Io { path: path.to_path_buf(), source }))?;
    serde_json::from_str(&text)
        .map_err(|error| HistoryError::Corrupt { path: path.to_path_buf(), message: error.to_string() })
}

/// The manifest, both typed and as JSON (so fields this version does not know survive).
fn read_manifest(root: &Path) -> Result<(Manifest, Value), HistoryError> {
    let path = root.join(layout::MANIFEST);
    let text = crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Record)
        .map_err(|_| HistoryError::NotARun { path: root.to_path_buf(), missing: layout::MANIFEST })?;
    let corrupt =
        |error: serde_json::Error| HistoryError::Corrupt { path: path.clone(), message: error.to_string() };
    let value: Value = serde_json::from_str(&text).map_err(corrupt)?;
    let manifest: Manifest = serde_json::from_value(value.clone()).map_err(corrupt)?;
    Ok((manifest, value))
}

/// The selected state made resumable: `fabro resume` continues at its `next_node`.
fn resumable(selected: &Selected) -> Result<Checkpoint, HistoryError> {
    if selected.checkpoint.next_node.is_none() {
        return Err(HistoryError::NothingToContinue {
            node: selected.checkpoint.current_node.clone(),
            visit: selected.visit,
        });
    }
    let mut checkpoint = selected.checkpoint.clone();
    checkpoint.status = RunStatus::Interrupted;
    Ok(checkpoint)
}

/// Whether the stage directory `name` (`<visit>` or `<visit>.<n>`) of `node` belongs to the
/// state `visits`; `None` when the name is not a stage directory's.
fn visit_kept(visits: &BTreeMap<String, u32>, node: &str, name: &str) -> Option<bool> {
    let (visit, _) = super::layout::parse_visit_dir_name(name)?;
    Some(visit <= visits.get(node).copied().unwrap_or(0))
}

fn resumable_result(
    run_id: &str,
    root: &Path,
    checkpoint: &Checkpoint,
    stages: Vec<StageRecord>,
) -> RunResult {
    RunResult {
        run_id: run_id.to_string(),
        status: checkpoint.status,
        failure_reason: None,
        completed_nodes: checkpoint.completed_nodes.clone(),
        duration_ms: stages.iter().map(|stage| stage.duration_ms).sum(),
        usage: crate::usage::UsageTotals::of(&stages),
        dry_run: None,
        stages,
        run_dir: root.display().to_string(),
    }
}

/// Starts the journal of a new run directory with one entry holding `state`, and its snapshot.
fn start_journal(dir: &RunDir, run_id: &str, state: &State) -> Result<(), HistoryError> {
    let mut journal = dir.journal(0, None, SyncMode::Stage)?;
    let seq = journal.append(&mut state.reset_entry()).map_err(|source| io(journal.path(), source))?;
    let mut snapshot = state.checkpoint(run_id);
    snapshot.journal_seq = Some(seq);
    dir.write_snapshot(&snapshot, Durability::Synced)?;
    Ok(())
}

fn io(path: &Path, source: std::io::Error) -> HistoryError {
    HistoryError::RunDir(RunDirError::Io { path: path.to_path_buf(), source })
}

/// Copies the directories and regular files under `from`; a link or a FIFO a stage left in its
/// directory is not followed and not copied. Files are hard links where the file system allows
/// (fabro never rewrites a finished stage's file in place), so a fork of a run with gigabytes
/// of logs costs nothing.
fn copy_dir_all(from: &Path, to: &Path) -> Result<(), HistoryError> {
    std::fs::create_dir_all(to).map_err(|source| io(to, source))?;
    for entry in std::fs::read_dir(from).map_err(|source| io(from, source))? {
        let entry = entry.map_err(|source| io(from, source))?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|source| io(&entry.path(), source))?;
        if kind.is_dir() {
            copy_dir_all(&entry.path(), &target)?;
        } else if kind.is_file() {
            // linkat without AT_SYMLINK_FOLLOW: never what a link names.
            if std::fs::hard_link(entry.path(), &target).is_ok() {
                continue;
            }
            let mut source = match crate::regular_file::open(&entry.path(), false) {
                Ok(source) => source,
                // Replaced by something else since it was listed: not copied either.
                Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => continue,
                Err(error) => return Err(io(&entry.path(), error)),
            };
            let mut copy = std::fs::File::create_new(&target).map_err(|source| io(&target, source))?;
            std::io::copy(&mut source, &mut copy).map_err(|source| io(&target, source))?;
        }
    }
    Ok(())
}

/// Copies the offloaded context values of a forked state into the fork's own artifact store and
/// points the context at the copies: a run only ever reads its own store.
fn repoint_artifacts(from_root: &Path, to_root: &Path, context: &mut crate::context::Context) {
    use crate::context::artifacts::{is_pointer, ArtifactStore, DEFAULT_THRESHOLD};
    let source = ArtifactStore::new(from_root, DEFAULT_THRESHOLD);
    let target = ArtifactStore::new(to_root, DEFAULT_THRESHOLD);
    let pointers: Vec<(String, serde_json::Value)> =
        context.iter().filter(|(_, v)| is_pointer(v)).map(|(k, v)| (k.to_string(), v.clone())).collect();
    for (key, pointer) in pointers {
        let copied = source.resolve(&pointer).and_then(|value| match value {
            Some(value) => target.store(&key, &value).map(Some),
            None => Ok(None),
        });
        match copied {
            Ok(Some(new_pointer)) => context.set(key, serde_json::Value::from(new_pointer)),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "the fork keeps the original's pointer for `{key}`"),
        }
    }
}

/// Where a fork came from (`forked_from` in its manifest and the `run.forked` event).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForkOrigin {
    pub run_dir: String,
    pub run_id: String,
    pub node: String,
    pub visit: u32,
}

/// What `fork` made.
#[derive(Debug, Clone)]
pub struct Forked {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub origin: ForkOrigin,
    /// Where `fabro resume` continues.
    pub next_node: String,
    /// The stage directories copied, relative to the run directory.
    pub copied: Vec<String>,
}

/// Creates a new run (new id, new directory: `new_root`, else a sibling of `root` named by the
/// id) holding the state right after `node@visit` of the run in `root`, ready for `fabro resume`.
/// The source run is only read.
pub fn fork(
    root: &Path,
    node: &str,
    visit: Option<u32>,
    new_root: Option<&Path>,
) -> Result<Forked, HistoryError> {
    let (manifest, _) = read_manifest(root)?;
    let selected = select(root, node, visit)?;
    let mut checkpoint = resumable(&selected)?;
    let workflow_path = root.join(layout::SAVED_WORKFLOW);
    let workflow = crate::regular_file::read(&workflow_path, crate::regular_file::FileKind::SavedWorkflow)
        .map_err(|_| HistoryError::NotARun { path: root.to_path_buf(), missing: layout::SAVED_WORKFLOW })?;

    let run_id = uuid::Uuid::now_v7().to_string();
    let new_root = match new_root {
        Some(path) => path.to_path_buf(),
        None => root.parent().map(Path::to_path_buf).unwrap_or_default().join(&run_id),
    };
    let dir = RunDir::create(&new_root)?;
    let _lock = dir.lock()?;
    let origin = ForkOrigin {
        run_dir: root.display().to_string(),
        run_id: manifest.run_id.clone(),
        node: node.to_string(),
        visit: selected.visit,
    };

    // The stage directories of the visits that make up the state.
    let mut copied = Vec::new();
    for stage_node in checkpoint.node_visits.keys() {
        let from = super::layout::node_dir(root, stage_node);
        let Ok(entries) = std::fs::read_dir(&from) else { continue };
        let mut names: Vec<String> =
            entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
        names.sort();
        for name in names {
            if visit_kept(&checkpoint.node_visits, stage_node, &name) != Some(true) {
                continue;
            }
            let source = from.join(&name);
            if !crate::regular_file::is_real_dir(&source) {
                continue;
            }
            copy_dir_all(&source, &super::layout::node_dir(dir.root(), stage_node).join(&name))?;
            copied.push(format!("stages/{stage_node}/{name}"));
        }
    }

    std::fs::write(dir.root().join(layout::SAVED_WORKFLOW), &workflow)
        .map_err(|source| io(&dir.root().join(layout::SAVED_WORKFLOW), source))?;
    checkpoint.run_id = run_id.clone();
    checkpoint.context.set("internal.run_id", run_id.clone());
    repoint_artifacts(root, dir.root(), &mut checkpoint.context);
    let stages = selected.summaries.iter().map(StageSummary::record).collect();
    dir.write_json(layout::RESULT, &resumable_result(&run_id, dir.root(), &checkpoint, stages))?;
    // The fork's journal starts with one entry holding the whole state.
    let state = State::from_checkpoint(&checkpoint, selected.summaries);
    start_journal(&dir, &run_id, &state)?;

    // A run in worktree mode: the fork gets its own branch and worktree at the checkpoint's
    // commit, never the original's.
    let worktree = match (&manifest.worktree, &checkpoint.commit) {
        (Some(record), Some(commit)) => {
            let forked = crate::worktree::RunWorktree::fork(
                Path::new(&record.path),
                commit,
                &run_id,
                &super::layout::run_worktree_dir(dir.root()),
            )?;
            Some(super::WorktreeRecord {
                path: forked.path().display().to_string(),
                branch: forked.branch().to_string(),
            })
        }
        _ => None,
    };
    let work_dir = worktree.as_ref().map_or_else(|| manifest.work_dir.clone(), |w| w.path.clone());
    let new_manifest = Manifest {
        run_id: run_id.clone(),
        started_at: now_rfc3339(),
        finished_at: None,
        status: checkpoint.status,
        restarted_from: None,
        restarted_as: None,
        forked_from: Some(origin.clone()),
        worktree,
        work_dir,
        pause: None,
        containers: Vec::new(),
        ..manifest
    };
    write_json_file(&dir.root().join(layout::MANIFEST), &new_manifest)?;

    let next_node = checkpoint.next_node.clone().unwrap_or_default();
    let events_path = dir.root().join(layout::EVENTS);
    let events = EventLog::open(&events_path, &run_id, 0).map_err(|source| io(&events_path, source))?;
    events.run_event(Event::RunForked {
        from_run_dir: origin.run_dir.clone(),
        from_run_id: origin.run_id.clone(),
        node: node.to_string(),
        visit: selected.visit,
        next_node: next_node.clone(),
    });
    events.flush();
    Ok(Forked { run_id, run_dir: new_root, origin, next_node, copied })
}

/// What `rewind` did.
#[derive(Debug, Clone)]
pub struct Rewound {
    pub node: String,
    pub visit: u32,
    pub next_node: String,
    /// `rewound/<timestamp>`, relative to the run directory.
    pub archive: String,
    /// The files and directories moved there, relative to the run directory.
    pub moved: Vec<String>,
}

/// Moves the run in `root` back to the state right after `node@visit`, in place. The run must not
/// be running (its lock is taken). Later checkpoints, the stage directories of later visits and
/// `result.json` move into `rewound/<timestamp>/`; nothing is deleted.
pub fn rewind(root: &Path, node: &str, visit: Option<u32>) -> Result<Rewound, HistoryError> {
    let (manifest, mut manifest_value) = read_manifest(root)?;
    let dir = RunDir { root: root.to_path_buf() };
    let _lock = dir.lock()?;
    let selected = select(root, node, visit)?;
    let checkpoint = resumable(&selected)?;
    let selected_visit = selected.visit;

    let stamp = now_rfc3339().replace(':', "");
    let mut archive = format!("rewound/{stamp}");
    let mut extra = 1;
    while root.join(&archive).exists() {
        extra += 1;
        archive = format!("rewound/{stamp}.{extra}");
    }
    let mut moved = Vec::new();
    let move_into_archive = |relative: &str, moved: &mut Vec<String>| -> Result<(), HistoryError> {
        let target = root.join(&archive).join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| io(parent, source))?;
        }
        std::fs::rename(root.join(relative), &target).map_err(|source| io(&target, source))?;
        moved.push(relative.to_string());
        Ok(())
    };

    match selected.place {
        // The journal moves aside whole; the new one is its beginning, up to the point, and an
        // entry saying the run stopped there.
        Place::Journal { bytes } => {
            move_into_archive(layout::JOURNAL, &mut moved)?;
            let archived = root.join(&archive).join(layout::JOURNAL);
            let kept = crate::regular_file::read(&archived, crate::regular_file::FileKind::EventLog)
                .map_err(|source| io(&archived, source))?;
            let kept = kept.get(..bytes as usize).unwrap_or(&kept);
            let path = root.join(layout::JOURNAL);
            crate::atomic_file::write_atomic(&path, kept).map_err(|source| io(&path, source))?;
            let last_seq = selected.checkpoint.journal_seq.unwrap_or(0);
            let mut journal = dir.journal(last_seq, None, SyncMode::Stage)?;
            let mut stopped = Entry {
                ts: now_rfc3339(),
                status: checkpoint.status,
                node: checkpoint.current_node.clone(),
                next: checkpoint.next_node.clone(),
                ..Entry::default()
            };
            let seq = journal.append(&mut stopped).map_err(|source| io(journal.path(), source))?;
            let mut snapshot = checkpoint.clone();
            snapshot.journal_seq = Some(seq);
            dir.write_snapshot(&snapshot, Durability::Synced)?;
        }
        Place::Checkpoints { seq: chosen } => {
            // A run continued from an older run directory becomes one again: all of its journal
            // comes after the point.
            if Journal::exists(root) {
                move_into_archive(layout::JOURNAL, &mut moved)?;
            }
            for (seq, _, path) in history_files(root)? {
                if seq <= chosen {
                    continue;
                }
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
                move_into_archive(&format!("checkpoints/{name}"), &mut moved)?;
            }
            dir.write_compact_json(layout::CHECKPOINT, &checkpoint)?;
        }
    }
    // Stage directories and parallel-branch journals of visits after the target.
    for per_visit in [layout::STAGES_DIR, layout::PARALLEL_DIR] {
        let mut nodes: Vec<String> = std::fs::read_dir(root.join(per_visit))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        nodes.sort();
        for node in nodes {
            let Ok(entries) = std::fs::read_dir(root.join(per_visit).join(&node)) else { continue };
            let mut names: Vec<String> =
                entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
            names.sort();
            for name in names {
                if visit_kept(&checkpoint.node_visits, &node, &name) == Some(false) {
                    move_into_archive(&format!("{per_visit}/{node}/{name}"), &mut moved)?;
                }
            }
        }
    }
    let stages = selected.summaries.iter().map(StageSummary::record).collect();
    if root.join(layout::RESULT).exists() {
        move_into_archive(layout::RESULT, &mut moved)?;
    }
    dir.write_json(layout::RESULT, &resumable_result(&manifest.run_id, root, &checkpoint, stages))?;
    if let Value::Object(map) = &mut manifest_value {
        map.insert("status".to_string(), json!(checkpoint.status));
        map.insert("finished_at".to_string(), Value::Null);
        map.remove("pause");
    }
    write_json_file(&root.join(layout::MANIFEST), &manifest_value)?;

    let next_node = checkpoint.next_node.clone().unwrap_or_default();
    let events_path = root.join(layout::EVENTS);
    let events = EventLog::open(&events_path, &manifest.run_id, EventLog::last_seq_in(&events_path))
        .map_err(|source| io(&events_path, source))?;
    events.run_event(Event::RunRewound {
        to: node.to_string(),
        visit: selected_visit,
        next_node: next_node.clone(),
        archive: archive.clone(),
        moved: moved.clone(),
    });
    events.flush();
    Ok(Rewound { node: node.to_string(), visit: selected_visit, next_node, archive, moved })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_and_without_a_visit() {
        assert_eq!(parse_target("work").unwrap(), ("work".to_string(), None));
        assert_eq!(parse_target("work@2").unwrap(), ("work".to_string(), Some(2)));
        for bad in ["", "work@", "work@0", "work@x", "@2"] {
            assert!(matches!(parse_target(bad), Err(HistoryError::BadTarget { .. })), "{bad}");
        }
    }

    #[test]
    fn stage_directories_belong_to_a_state_by_visit() {
        let visits = BTreeMap::from([("work".to_string(), 2)]);
        assert_eq!(visit_kept(&visits, "work", "1"), Some(true));
        assert_eq!(visit_kept(&visits, "work", "2.2"), Some(true));
        assert_eq!(visit_kept(&visits, "work", "3"), Some(false));
        assert_eq!(visit_kept(&visits, "exit", "1"), Some(false));
        assert_eq!(visit_kept(&visits, "work", "notes"), None);
    }

    fn checkpoint(status: RunStatus, node: &str, visit: u32, next: Option<&str>) -> Value {
        json!({"run_id": "r", "status": status, "current_node": node, "next_node": next,
               "completed_nodes": [node], "node_outcomes": {}, "node_visits": {node: visit},
               "node_retries": {}, "context": {}, "timestamp": "t"})
    }

    fn sample_manifest(run: &RunDir) {
        let manifest = json!({"run_id": "r", "workflow": "w", "source_path": "w.dot", "source_sha256": "",
            "goal": "", "work_dir": ".", "started_at": "t", "finished_at": null, "status": "failed",
            "tool_version": "0"});
        run.write_json("manifest.json", &manifest).unwrap();
    }

    #[test]
    fn selection_takes_the_first_completed_checkpoint_of_the_visit_from_an_old_run() {
        let temp = tempfile::tempdir().unwrap();
        let run = RunDir::create(&temp.path().join("run")).unwrap();
        sample_manifest(&run);
        let saves = [
            checkpoint(RunStatus::Paused, "work", 0, Some("work")),
            checkpoint(RunStatus::Running, "work", 1, Some("work")),
            checkpoint(RunStatus::Running, "work", 2, None),
            checkpoint(RunStatus::Failed, "work", 2, None),
        ];
        std::fs::create_dir(run.root().join("checkpoints")).unwrap();
        for (i, value) in saves.iter().enumerate() {
            run.write_json(format!("checkpoints/{:06}-work.json", i + 1), value).unwrap();
        }
        let chosen = select(run.root(), "work", None).unwrap();
        assert!(matches!(chosen.place, Place::Checkpoints { seq: 3 }));
        assert_eq!(chosen.checkpoint.status, RunStatus::Running);
        let chosen = select(run.root(), "work", Some(1)).unwrap();
        assert!(matches!(chosen.place, Place::Checkpoints { seq: 2 }));
        let error = select(run.root(), "work", Some(5)).err().unwrap();
        assert!(error.to_string().contains("completed visits: 1, 2"), "{error}");
        let error = select(run.root(), "nope", None).err().unwrap();
        assert!(matches!(error, HistoryError::UnknownNode { .. }), "{error}");
        let error = rewind(run.root(), "work", Some(2)).unwrap_err();
        assert!(matches!(error, HistoryError::NothingToContinue { .. }), "{error}");
    }

    #[test]
    fn selection_folds_the_journal_up_to_the_first_completed_entry_of_the_visit() {
        let temp = tempfile::tempdir().unwrap();
        let run = RunDir::create(&temp.path().join("run")).unwrap();
        sample_manifest(&run);
        let mut journal = run.journal(0, None, SyncMode::Never).unwrap();
        let stage = |visit| {
            let record = StageRecord {
                node_id: "work".into(),
                visit,
                status: crate::outcome::StageStatus::Success,
                duration_ms: 1,
                handler: Some(crate::graph::HandlerType::Command),
                failure_reason: None,
                usage: None,
                branch: None,
                cost_usd: None,
                dir: None,
            };
            StageSummary::from_record(&record)
        };
        let entries = [
            (RunStatus::Paused, 0, Some("work"), None),
            (RunStatus::Running, 1, Some("work"), Some(1)),
            (RunStatus::Running, 2, None, Some(2)),
            (RunStatus::Failed, 2, None, None),
        ];
        for (status, visits, next, completed) in entries {
            let mut entry = Entry {
                status,
                node: "work".into(),
                next: next.map(str::to_string),
                visits: BTreeMap::from([("work".to_string(), visits)]),
                stages: completed.map(stage).into_iter().collect(),
                ..Entry::default()
            };
            entry.set.insert("n".into(), json!(visits));
            journal.append(&mut entry).unwrap();
        }
        let chosen = select(run.root(), "work", None).unwrap();
        assert_eq!(chosen.visit, 2);
        assert_eq!(chosen.checkpoint.journal_seq, Some(3));
        assert_eq!(chosen.summaries.len(), 2);
        let chosen = select(run.root(), "work", Some(1)).unwrap();
        assert_eq!(chosen.checkpoint.context.get("n"), Some(&json!(1)));
        assert_eq!(chosen.checkpoint.next_node.as_deref(), Some("work"));
        let Place::Journal { bytes } = chosen.place else { panic!("not from the journal") };
        let text = std::fs::read_to_string(run.root().join("journal.jsonl")).unwrap();
        assert_eq!(text[..bytes as usize].lines().count(), 2);
        let error = select(run.root(), "work", Some(5)).err().unwrap();
        assert!(error.to_string().contains("completed visits: 1, 2"), "{error}");
        let error = rewind(run.root(), "work", Some(2)).unwrap_err();
        assert!(matches!(error, HistoryError::NothingToContinue { .. }), "{error}");
        // Rewinding to the first visit keeps the journal's first two lines and says it stopped.
        let rewound = rewind(run.root(), "work", Some(1)).unwrap();
        assert_eq!(rewound.next_node, "work");
        let kept = std::fs::read_to_string(run.root().join("journal.jsonl")).unwrap();
        assert_eq!(kept.lines().count(), 3);
        assert!(kept.starts_with(&text[..bytes as usize]));
        let state = Journal::read(run.root()).unwrap().state(None);
        assert_eq!(state.status, RunStatus::Interrupted);
        assert_eq!(state.stages.len(), 1);
        assert!(run.root().join(&rewound.archive).join("journal.jsonl").is_file());
    }
}
