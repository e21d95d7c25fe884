//! Command stages (`shape=parallelogram`): run the node's `script` with `sh -c` in the work
//! directory.
//!
//! The script never sees context text pasted into it; it reads the run through environment
//! variables instead: `FABRO_RUN_ID`, `FABRO_RUN_DIR`, `FABRO_STAGE_DIR`, `FABRO_NODE_ID`,
//! `FABRO_VISIT` and `FABRO_CONTEXT` (the path of `context.json`, a JSON snapshot of the context).
//!
//! Output goes straight to `stdout.log` and `stderr.log` in the stage directory as it is written;
//! afterwards each becomes `command.output` and `command.stderr` (the last 16 MiB of a longer
//! log), next to `command.exit_code`; the engine moves large values to the artifact store, so the
//! context and checkpoints stay small. The command runs in its own process group (see
//! [`crate::process_group`]): a timeout or a cancelled run stops everything it started (SIGTERM,
//! then SIGKILL after a grace period), what it leaves running in the background is stopped the
//! same way when the stage ends, and the group dies with fabro. A script may decide the outcome itself by writing
//! `$FABRO_STAGE_DIR/status.json` (the [`Outcome`] contract).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::graph::attribute::format_duration;
use crate::graph::settings::CommandSettings;
use crate::outcome::{Outcome, Pause, PauseKind, StageStatus};
use crate::process_group::ProcessGroup;
use crate::run_dir::layout;
use crate::stage::{Handler, HandlerError, StageRun};

use super::prepare_container;

/// Runs command stages.
pub struct CommandHandler;

/// How much of the end of each log becomes a context value.
const OUTPUT_TAIL_BYTES: u64 = 16 * 1024 * 1024;

/// How the wait for the command ended.
enum Ending {
    Exited(ExitStatus),
    TimedOut(Duration),
    Cancelled,
    /// The logs passed `max_output`, while the command ran or by the time it ended.
    TooMuchOutput {
        running: bool,
    },
}

#[async_trait::async_trait]
impl Handler for CommandHandler {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        prepare_container(stage).await?;
        let outcome = self.run_command(stage).await?;
        Ok(super::with_container(stage, outcome).await)
    }
}

impl CommandHandler {
    /// Runs the stage's script to its end.
    async fn run_command(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let node_id = &stage.node.id;
        let settings = stage
            .node
            .settings
            .command()
            .ok_or_else(|| HandlerError::Terminal(format!("stage `{node_id}` is not a command stage")))?;
        let script = settings
            .script
            .as_deref()
            .ok_or_else(|| HandlerError::Terminal(format!("command stage `{node_id}` has no script")))?;
        let language = settings
            .language
            .clone()
            .map_err(|invalid| HandlerError::Terminal(format!("command stage `{node_id}`: {invalid}")))?;

        if stage.run.dry_run {
            return Ok(Outcome::success()
                .with_notes(format!("dry run: would run `{script}`"))
                .with_update("command.output", "")
                .with_update("command.stderr", ""));
        }
        if stage.run.cancel.is_cancelled() {
            return Err(HandlerError::Cancelled);
        }

        let stage_dir = absolute(stage.stage_dir);
        let context_path = stage_dir.join(layout::CONTEXT_SNAPSHOT);
        let status_path = stage_dir.join(layout::STATUS);
        let stdout_path = stage_dir.join(layout::STDOUT_LOG);
        let stderr_path = stage_dir.join(layout::STDERR_LOG);

        write_context_snapshot(stage, &context_path).await?;
        // A status file left by an earlier attempt of this visit must not decide this one.
        match tokio::fs::remove_file(&status_path).await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(HandlerError::Terminal(format!(
                    "could not remove stale {}: {error}",
                    status_path.display()
                )))
            }
        }
        let stdout_log = OutputLog::create(&stdout_path)?;
        let stderr_log = OutputLog::create(&stderr_path)?;

        let run_dir = absolute(stage.run.run_dir);
        let (program, flag) = language.program();
        let mut command = stage.confinement.command(
            program.as_ref(),
            &[flag.as_ref(), script.as_ref()],
            stage.work_dir,
            &[&stage_dir],
            &[&run_dir],
        );
        command
            .stdin(Stdio::null())
            .stdout(stdout_log.for_child()?)
            .stderr(stderr_log.for_child()?)
            .env("FABRO_RUN_ID", stage.run.run_id)
            .env("FABRO_RUN_DIR", &run_dir)
            .env("FABRO_STAGE_DIR", &stage_dir)
            .env("FABRO_NODE_ID", node_id)
            .env("FABRO_VISIT", stage.visit.to_string())
            .env("FABRO_CONTEXT", &context_path)
            .envs(stage.run.workflow.inputs().iter().map(|(key, value)| {
                (format!("FABRO_INPUT_{}", key.to_ascii_uppercase()), crate::graph::inputs::text_of(value))
            }))
            .kill_on_drop(true);
        if settings.keep_background {
            // In a container, what the script leaves running is stopped unless this is set.
            command.env("FABRO_KEEP_BACKGROUND", "1");
        }

        let started = Instant::now();
        let (mut child, mut group) = ProcessGroup::spawn(&mut command).map_err(|error| {
            HandlerError::Terminal(format!(
                "command stage `{node_id}` could not start `{program}` in {}: {error}",
                stage.work_dir.display()
            ))
        })?;
        // The group dies with fabro; if the watcher that kills it then died too, the next resume
        // finds the group in its process record and kills it.
        if let Some(pgid) = group.id() {
            crate::run_dir::stage_process::record(&stage_dir, pgid);
        }
        let _recorded = ProcessRecord(&stage_dir);

        let timeout = stage.node.settings.stage.timeout;
        let max_output = max_output(stage, settings);
        let ending = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => Ending::Exited(status),
                Err(error) => {
                    group.terminate(&mut child).await;
                    return Err(HandlerError::Terminal(format!(
                        "command stage `{node_id}`: waiting for the command failed: {error}"
                    )));
                }
            },
            () = sleep_or_forever(timeout) => Ending::TimedOut(timeout.unwrap_or_default()),
            () = stage.run.cancel.cancelled() => Ending::Cancelled,
            () = output_passes(&stdout_log, &stderr_log, max_output) => Ending::TooMuchOutput { running: true },
        };
        // A command that wrote too much between two looks and ended is over the limit all the same.
        let ending = match ending {
            Ending::Exited(_) if stdout_log.len() + stderr_log.len() > max_output => {
                Ending::TooMuchOutput { running: false }
            }
            ending => ending,
        };
        let status = match ending {
            Ending::Exited(status) => {
                // What the script left running in the background ends with its stage, unless
                // the stage says to keep it.
                if settings.keep_background {
                    group.release();
                } else {
                    group.stop_rest().await;
                }
                status
            }
            Ending::Cancelled => {
                group.terminate(&mut child).await;
                return Err(HandlerError::Cancelled);
            }
            Ending::TooMuchOutput { running } => {
                let status = group.terminate(&mut child).await;
                let written = stdout_log.len() + stderr_log.len();
                for log in [&stdout_log, &stderr_log] {
                    if let Err(error) = log.keep_head_and_tail(max_output / 2) {
                        tracing::warn!(%error, path = %log.path.display(), "log not cut");
                    }
                }
                let mut outcome = Outcome::fail(format!(
                    "the command wrote {} of output, more than max_output={}{}",
                    format_size(written),
                    format_size(max_output),
                    if running { "; it was stopped" } else { "" }
                ))
                .with_class(crate::outcome::FailureClass::BudgetExhausted)
                .with_notes(format!("stopped after {}", seconds(started.elapsed())));
                record_output(&mut outcome, status, &stdout_log, &stderr_log);
                return Ok(outcome);
            }
            Ending::TimedOut(limit) => {
                let status = group.terminate(&mut child).await;
                let elapsed = started.elapsed();
                let mut outcome =
                    Outcome::fail(format!("command timed out after {}", format_duration(limit)))
                        .with_class(crate::outcome::FailureClass::TransientInfra)
                        .with_notes(format!("timed out after {}", seconds(elapsed)));
                record_output(&mut outcome, status, &stdout_log, &stderr_log);
                return Ok(outcome);
            }
        };

        let elapsed = started.elapsed();
        let summary = match (status.code(), signal_of(status)) {
            (Some(code), _) => format!("exit {code} in {}", seconds(elapsed)),
            (None, Some(signal)) => format!("killed by signal {signal} after {}", seconds(elapsed)),
            (None, None) => format!("ended in {}", seconds(elapsed)),
        };
        let mut outcome =
            if status.success() { Outcome::success() } else { Outcome::fail(describe_failure(status)) }
                .with_notes(summary);
        record_output(&mut outcome, Some(status), &stdout_log, &stderr_log);

        Ok(apply_status_file(outcome, status, &status_path, settings.auto_status).await)
    }
}

/// What a command stage may write to its logs by default: 1 GiB.
pub const DEFAULT_MAX_OUTPUT: u64 = 1 << 30;
/// How often the log sizes are looked at.
const OUTPUT_POLL: Duration = Duration::from_millis(100);

/// The stage's output limit: node `max_output`, else `--max-output`, else the graph's
/// `default_max_output`, else [`DEFAULT_MAX_OUTPUT`].
fn max_output(stage: &StageRun<'_>, settings: &CommandSettings) -> u64 {
    settings.max_output.or(stage.run.max_output).or(settings.default_max_output).unwrap_or(DEFAULT_MAX_OUTPUT)
}

/// Resolves once the two logs together hold more than `limit` bytes.
async fn output_passes(stdout: &OutputLog, stderr: &OutputLog, limit: u64) {
    loop {
        if stdout.len() + stderr.len() > limit {
            return;
        }
        tokio::time::sleep(OUTPUT_POLL).await;
    }
}

/// One of the logs a command writes to directly. fabro creates the file and keeps a handle on
/// it: everything it later reads or cuts goes through that handle, never through the path, so a
/// stage that replaces its log with a link to a private key, with a FIFO or with `/dev/zero` only
/// loses its own output.
struct OutputLog {
    path: PathBuf,
    file: std::fs::File,
}

impl OutputLog {
    /// Creates the log afresh: whatever stands at `path` (a log of an earlier try, or a link or
    /// FIFO a stage planted) is removed first, and the new file is made with `O_EXCL`, which
    /// never follows a link.
    fn create(path: &Path) -> Result<OutputLog, HandlerError> {
        use std::os::unix::fs::OpenOptionsExt;
        crate::regular_file::remove_if_present(path)
            .map_err(|error| stage_file_error("replace", path, &error))?;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o644)
            .open(path)
            .map(|file| OutputLog { path: path.to_path_buf(), file })
            .map_err(|error| stage_file_error("create", path, &error))
    }

    /// Another handle on the log for the command's stdout or stderr.
    fn for_child(&self) -> Result<std::fs::File, HandlerError> {
        self.file.try_clone().map_err(|error| stage_file_error("share", &self.path, &error))
    }

    /// How many bytes the command has written.
    fn len(&self) -> u64 {
        self.file.metadata().map(|meta| meta.len()).unwrap_or(0)
    }

    /// At most `limit` bytes from the end, starting on a UTF-8 character boundary, and how many
    /// bytes before them were skipped. Reads at offsets, so what still writes to the log (a
    /// background process the stage keeps) is not disturbed.
    fn tail(&self, limit: u64) -> std::io::Result<(u64, Vec<u8>)> {
        let len = self.len();
        let start = len.saturating_sub(limit);
        let mut bytes = self.read_range(start, len - start)?;
        // Do not start in the middle of a multi-byte character.
        let continuation = if start > 0 { crate::regular_file::continuation_len(&bytes) } else { 0 };
        bytes.drain(..continuation);
        Ok((start + continuation as u64, bytes))
    }

    fn read_range(&self, start: u64, count: u64) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0; usize::try_from(count).unwrap_or(usize::MAX)];
        let mut filled = 0;
        while filled < bytes.len() {
            match self.file.read_at(&mut bytes[filled..], start + filled as u64)? {
                0 => break,
                read => filled += read,
            }
        }
        bytes.truncate(filled);
        Ok(bytes)
    }

    /// Cuts a log longer than `keep` bytes down to its first and last `keep / 2` bytes, with a
    /// line between them saying how much was left out.
    fn keep_head_and_tail(&self, keep: u64) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        let len = self.len();
        if len <= keep {
            return Ok(());
        }
        let half = keep / 2;
        let tail = self.read_range(len - half, half)?;
        let mut file = &self.file;
        file.seek(SeekFrom::Start(half))?;
        writeln!(file, "\n[... {} bytes left out: the output passed max_output ...]", len - 2 * half)?;
        file.write_all(&tail)?;
        let end = file.stream_position()?;
        self.file.set_len(end)?;
        self.file.sync_all()
    }
}

/// `1.5 GiB`, `200.0 MiB`, `512 B`.
fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    match UNITS.iter().find(|(_, size)| bytes >= *size) {
        Some((unit, size)) => format!("{:.1} {unit}", bytes as f64 / *size as f64),
        None => format!("{bytes} B"),
    }
}

/// A size as `--max-output` takes it: bytes, or a number with `k`, `KB`, `KiB`, `M`, `MB`, `MiB`,
/// `G`, `GB`, `GiB` (decimal units for KB/MB/GB, binary for the rest).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("`{text}` is not a size (e.g. 500MB, 1GiB)"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "kb" => 1000,
        "m" | "mib" => 1 << 20,
        "mb" => 1_000_000,
        "g" | "gib" => 1 << 30,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!("unknown size unit `{other}` in `{text}` (use KB, MB, GB, KiB, MiB or GiB)"))
        }
    };
    Ok((number * factor as f64) as u64)
}

/// Writes the context snapshot `FABRO_CONTEXT` points at.
async fn write_context_snapshot(stage: &StageRun<'_>, path: &Path) -> Result<(), HandlerError> {
    let json = serde_json::to_vec_pretty(&stage.context.to_json())
        .map_err(|error| HandlerError::Terminal(format!("could not serialize the context: {error}")))?;
    // Atomic but not fsynced: a crash may lose it, never tear it (the stage reruns anyway).
    crate::atomic_file::write_atomic_with(path, &json, crate::atomic_file::Durability::Unsynced)
        .map_err(|error| stage_file_error("write", path, &error))
}

/// A stage file that cannot be written: a full disk pauses the run (the stage runs again once
/// space is freed), anything else fails the stage.
fn stage_file_error(verb: &str, path: &Path, error: &std::io::Error) -> HandlerError {
    let message = format!("could not {verb} {}: {error}", path.display());
    match error.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => HandlerError::Paused(Pause::new(
            PauseKind::Storage,
            format!("{message}; the run pauses: free some space and `fabro resume` runs the stage again"),
        )),
        _ => HandlerError::Terminal(message),
    }
}

/// Sets `command.output`, `command.stderr` and `command.exit_code` (null when the command ended
/// by a signal).
fn record_output(outcome: &mut Outcome, status: Option<ExitStatus>, stdout: &OutputLog, stderr: &OutputLog) {
    let exit_code = status.and_then(|status| status.code());
    // The logs are the stage's own; the context (and so status.json, the checkpoint, the journal
    // and later prompts) gets them with the run's secrets redacted.
    let redacted = |text: String| crate::secrets::redact(&text).into_owned();
    outcome.context_updates.insert("command.output".into(), redacted(read_tail(stdout)).into());
    outcome.context_updates.insert("command.stderr".into(), redacted(read_tail(stderr)).into());
    outcome.context_updates.insert("command.exit_code".into(), exit_code.into());
}

/// The last [`OUTPUT_TAIL_BYTES`] of a log as text; a longer log gets a first line saying how
/// much was left out.
fn read_tail(log: &OutputLog) -> String {
    let name =
        log.path.file_name().map_or_else(|| log.path.display().to_string(), |n| n.to_string_lossy().into());
    match log.tail(OUTPUT_TAIL_BYTES) {
        Ok((0, bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok((skipped, bytes)) => {
            format!("[... {skipped} bytes earlier in {name}]\n{}", String::from_utf8_lossy(&bytes))
        }
        Err(error) => {
            tracing::warn!(%error, path = %log.path.display(), "could not read command output back");
            format!("[could not read {name}: {error}]")
        }
    }
}

/// Lets `status.json`, when the script wrote one, decide the outcome over the one the exit status
/// gave. The handler's `command.*` values stay; the file's `context_updates` go on top. A file
/// that cannot be read fails the stage. With `auto_status`, a stage that wrote no status file
/// succeeds whatever its exit status.
async fn apply_status_file(outcome: Outcome, status: ExitStatus, path: &Path, auto_status: bool) -> Outcome {
    let text = match crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Record) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && auto_status => {
            let notes = format!(
                "{}; auto_status: no {} was written, so the stage succeeds",
                outcome.notes.clone().unwrap_or_default(),
                layout::STATUS
            );
            return Outcome {
                status: StageStatus::Success,
                failure_reason: None,
                notes: Some(notes),
                ..outcome
            };
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return outcome,
        Err(error) => return replace_reason(outcome, format!("could not read {}: {error}", path.display())),
    };
    let reported: Outcome = match serde_json::from_str(&text) {
        Ok(reported) => reported,
        Err(error) => return replace_reason(outcome, format!("invalid {}: {error}", path.display())),
    };
    let mut context_updates = outcome.context_updates;
    context_updates.extend(reported.context_updates);
    let failure_reason = match reported.status {
        StageStatus::Fail | StageStatus::Retry => reported.failure_reason.or_else(|| {
            Some(format!("{} reported {} ({})", layout::STATUS, reported.status, describe_exit(status)))
        }),
        _ => reported.failure_reason,
    };
    Outcome {
        status: reported.status,
        preferred_label: reported.preferred_label,
        suggested_next_ids: reported.suggested_next_ids,
        context_updates,
        notes: reported.notes.or(outcome.notes),
        failure_reason,
        ..Outcome::new(reported.status)
    }
}

/// The outcome turned into a failure with `reason`, keeping its context updates and notes.
fn replace_reason(outcome: Outcome, reason: String) -> Outcome {
    Outcome { status: StageStatus::Fail, failure_reason: Some(reason), ..outcome }
}

fn describe_failure(status: ExitStatus) -> String {
    format!("command {}", describe_exit(status))
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), signal_of(status)) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended without an exit code".to_string(),
    }
}

fn signal_of(status: ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

fn seconds(elapsed: Duration) -> String {
    format!("{:.1}s", elapsed.as_secs_f64())
}

/// The path made absolute, so scripts running elsewhere can still use it.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

async fn sleep_or_forever(limit: Option<Duration>) {
    match limit {
        Some(limit) => tokio::time::sleep(limit).await,
        None => std::future::pending().await,
    }
}

/// Forgets the stage's process group however the stage ends.
struct ProcessRecord<'a>(&'a Path);

impl Drop for ProcessRecord<'_> {
    fn drop(&mut self) {
        crate::run_dir::stage_process::clear(self.0);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::graph::{Attr, Value};
    use crate::handlers::test_support::Fixture;

    fn workflow(attributes: &str) -> String {
        format!(
            "digraph T {{ start [shape=Mdiamond]; exit [shape=Msquare]\n  run [shape=parallelogram, {attributes}]\n  start -> run -> exit }}"
        )
    }

    fn fixture(attributes: &str) -> Fixture {
        Fixture::new(&workflow(attributes))
    }

    fn update<'a>(outcome: &'a Outcome, key: &str) -> &'a serde_json::Value {
        outcome.context_updates.get(key).unwrap_or_else(|| panic!("no `{key}` in {outcome:?}"))
    }

    /// Whether `pid` is still running a second after the handler returned. Signals are delivered
    /// asynchronously and an orphan is reaped by init in its own time, so a zombie counts as gone.
    async fn still_running(pid: i32) -> bool {
        for _ in 0..50 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            // SAFETY: signal 0 only checks that the process exists.
            let exists = unsafe { libc::kill(pid, 0) == 0 };
            if !exists || zombie {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    fn child_pid(stage: &StageRun<'_>) -> i32 {
        let text = std::fs::read_to_string(stage.stage_dir.join("child.pid")).expect("child.pid written");
        text.trim().parse().expect("a pid")
    }

    #[tokio::test]
    async fn success_streams_logs_and_records_output() {
        let fixture = fixture(r#"script="echo hello; echo oops >&2", timeout=5s"#);
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        assert_eq!(update(&outcome, "command.output"), "hello\n");
        assert_eq!(update(&outcome, "command.stderr"), "oops\n");
        assert_eq!(update(&outcome, "command.exit_code"), 0);
        assert!(outcome.notes.as_deref().is_some_and(|notes| notes.starts_with("exit 0 in ")), "{outcome:?}");
        assert_eq!(std::fs::read_to_string(stage.stage_dir.join("stdout.log")).unwrap(), "hello\n");
        assert_eq!(std::fs::read_to_string(stage.stage_dir.join("stderr.log")).unwrap(), "oops\n");
    }

    #[tokio::test]
    async fn runs_in_the_work_dir() {
        let fixture = fixture(r#"script="pwd""#);
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        let pwd = update(&outcome, "command.output").as_str().unwrap().trim().to_string();
        assert_eq!(std::fs::canonicalize(pwd).unwrap(), std::fs::canonicalize(stage.work_dir).unwrap());
    }

    #[tokio::test]
    async fn non_zero_exit_fails_with_the_code() {
        let fixture = fixture(r#"script="echo partial; exit 3""#);
        let outcome = CommandHandler.run(&fixture.stage("run")).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(outcome.failure_reason.as_deref(), Some("command exited with code 3"));
        assert_eq!(update(&outcome, "command.exit_code"), 3);
        assert_eq!(update(&outcome, "command.output"), "partial\n");
    }

    #[tokio::test]
    async fn environment_describes_the_stage_and_context() {
        let mut fixture = fixture(
            r#"script="echo $FABRO_NODE_ID $FABRO_VISIT $FABRO_RUN_ID; echo $FABRO_STAGE_DIR; echo $FABRO_RUN_DIR; cat \"$FABRO_CONTEXT\"""#,
        );
        fixture.context.set("answer", 42);
        fixture.context.set("name", "fabro");
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        let output = update(&outcome, "command.output").as_str().unwrap().to_string();
        let mut lines = output.splitn(4, '\n');
        assert_eq!(lines.next(), Some("run 1 test-run"));
        assert_eq!(lines.next().map(PathBuf::from), Some(std::path::absolute(stage.stage_dir).unwrap()));
        assert_eq!(lines.next().map(PathBuf::from), Some(std::path::absolute(stage.run.run_dir).unwrap()));
        let snapshot: serde_json::Value =
            serde_json::from_str(lines.next().unwrap()).expect("context is JSON");
        assert_eq!(snapshot, json!({"answer": 42, "name": "fabro"}));
        assert!(stage.stage_dir.join("context.json").is_file());
    }

    #[tokio::test]
    async fn context_text_is_never_interpolated_into_the_shell() {
        let mut fixture = fixture(r#"script="cat \"$FABRO_CONTEXT\" > /dev/null; echo done""#);
        fixture.context.set("evil", "$(touch pwned) `touch pwned2`; touch pwned3");
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success);
        for name in ["pwned", "pwned2", "pwned3"] {
            assert!(!stage.work_dir.join(name).exists(), "{name} was created");
            assert!(!stage.stage_dir.join(name).exists(), "{name} was created");
        }
        let snapshot = std::fs::read_to_string(stage.stage_dir.join("context.json")).unwrap();
        assert!(snapshot.contains("$(touch pwned)"));
    }

    #[tokio::test]
    async fn status_file_decides_the_route() {
        let fixture = fixture(
            r#"script="echo out; printf '%s' '{\"outcome\":\"partial_success\",\"preferred_label\":\"Fix\",\"suggested_next_ids\":[\"exit\"],\"context_updates\":{\"review.verdict\":\"needs work\",\"command.output\":\"overridden\"},\"notes\":\"from file\"}' > \"$FABRO_STAGE_DIR/status.json\"""#,
        );
        let outcome = CommandHandler.run(&fixture.stage("run")).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::PartialSuccess, "{outcome:?}");
        assert_eq!(outcome.preferred_label.as_deref(), Some("Fix"));
        assert_eq!(outcome.suggested_next_ids, vec!["exit".to_string()]);
        assert_eq!(outcome.notes.as_deref(), Some("from file"));
        assert_eq!(update(&outcome, "review.verdict"), "needs work");
        assert_eq!(update(&outcome, "command.exit_code"), 0);
        // The file's updates go on top of the handler's.
        assert_eq!(update(&outcome, "command.output"), "overridden");
    }

    #[tokio::test]
    async fn status_file_can_fail_a_zero_exit() {
        let fixture = fixture(r#"script="echo '{\"outcome\":\"fail\"}' > \"$FABRO_STAGE_DIR/status.json\"""#);
        let outcome = CommandHandler.run(&fixture.stage("run")).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(outcome.failure_reason.as_deref(), Some("status.json reported fail (exited with code 0)"));
        assert!(outcome.notes.as_deref().is_some_and(|notes| notes.starts_with("exit 0")));
    }

    #[tokio::test]
    async fn malformed_status_file_fails_the_stage() {
        let fixture = fixture(r#"script="echo '{\"outcome\":' > \"$FABRO_STAGE_DIR/status.json\"""#);
        let outcome = CommandHandler.run(&fixture.stage("run")).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Fail);
        let reason = outcome.failure_reason.as_deref().unwrap();
        assert!(reason.contains("status.json") && reason.contains("EOF"), "{reason}");
        assert_eq!(update(&outcome, "command.exit_code"), 0);
    }

    #[tokio::test]
    async fn stale_status_file_from_an_earlier_attempt_is_ignored() {
        let fixture = fixture(r#"script="true""#);
        let stage = fixture.stage("run");
        std::fs::write(stage.stage_dir.join("status.json"), r#"{"outcome":"fail"}"#).unwrap();
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let fixture = fixture(
            r#"script="echo started; sleep 30 & echo $! > \"$FABRO_STAGE_DIR/child.pid\"; wait; echo never", timeout=300ms"#,
        );
        let stage = fixture.stage("run");
        let started = Instant::now();
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
        assert!(elapsed >= Duration::from_millis(300), "took {elapsed:?}");
        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(outcome.failure_reason.as_deref(), Some("command timed out after 300ms"));
        assert_eq!(update(&outcome, "command.output"), "started\n");
        assert_eq!(update(&outcome, "command.exit_code"), &serde_json::Value::Null);
        let pid = child_pid(&stage);
        assert!(!still_running(pid).await, "background child {pid} survived");
    }

    #[tokio::test]
    async fn background_processes_end_with_their_stage() {
        let fixture = fixture(
            r#"script="sleep 30 >/dev/null 2>&1 & echo $! > \"$FABRO_STAGE_DIR/child.pid\"; echo done""#,
        );
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        let pid = child_pid(&stage);
        assert!(!still_running(pid).await, "background child {pid} survived its stage");
    }

    #[tokio::test]
    async fn keep_background_leaves_background_processes_running() {
        let fixture = fixture(
            r#"keep_background=true, script="sleep 30 >/dev/null 2>&1 & echo $! > \"$FABRO_STAGE_DIR/child.pid\"""#,
        );
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        let pid = child_pid(&stage);
        assert!(still_running(pid).await, "the background child was kept");
        // SAFETY: ending the process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    #[tokio::test]
    async fn timeout_escalates_to_sigkill_when_sigterm_is_ignored() {
        let fixture = fixture(
            r#"script="trap '' TERM; sh -c 'trap \"\" TERM; echo $$ > \"$FABRO_STAGE_DIR/child.pid\"; while :; do sleep 1; done' & wait", timeout=200ms"#,
        );
        let stage = fixture.stage("run");
        let started = Instant::now();
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        let elapsed = started.elapsed();
        // The leader ignores SIGTERM, so only the SIGKILL after the grace period stops it.
        assert!(
            elapsed >= crate::process_group::KILL_GRACE && elapsed < Duration::from_secs(5),
            "took {elapsed:?}"
        );
        assert_eq!(outcome.status, StageStatus::Fail);
        let pid = child_pid(&stage);
        assert!(!still_running(pid).await, "background child {pid} survived");
    }

    #[tokio::test]
    async fn cancellation_stops_the_command_promptly() {
        let fixture =
            fixture(r#"script="sleep 30 & echo $! > \"$FABRO_STAGE_DIR/child.pid\"; wait", timeout=60s"#);
        let stage = fixture.stage("run");
        let cancel = fixture.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let result = CommandHandler.run(&stage).await;
        assert_eq!(result, Err(HandlerError::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
        let pid = child_pid(&stage);
        assert!(!still_running(pid).await, "background child {pid} survived");
    }

    #[tokio::test]
    async fn large_output_reaches_the_context_whole_up_to_the_limit() {
        let fixture = fixture(r#"script="head -c 1000000 /dev/zero | tr '\\0' x""#);
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        assert_eq!(std::fs::metadata(stage.stage_dir.join("stdout.log")).unwrap().len(), 1_000_000);
        let output = update(&outcome, "command.output").as_str().unwrap();
        assert_eq!(output.len(), 1_000_000);
        assert!(output.bytes().all(|byte| byte == b'x'));
    }

    #[tokio::test]
    async fn output_over_the_limit_keeps_the_tail() {
        let total = OUTPUT_TAIL_BYTES + 1_000_000;
        let fixture = fixture(&format!(r#"script="head -c {total} /dev/zero | tr '\\0' x""#));
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        let output = update(&outcome, "command.output").as_str().unwrap();
        let header = "[... 1000000 bytes earlier in stdout.log]\n";
        assert!(output.starts_with(header), "{}", &output[..80]);
        assert_eq!(output.len() as u64, header.len() as u64 + OUTPUT_TAIL_BYTES);
    }

    #[test]
    fn tail_starts_on_a_character_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let log = OutputLog::create(&dir.path().join("stdout.log")).unwrap();
        std::io::Write::write_all(&mut &log.file, "aé€x".as_bytes()).unwrap(); // 1 + 2 + 3 + 1 bytes
        let (skipped, bytes) = log.tail(5).unwrap();
        assert_eq!((skipped, String::from_utf8(bytes).unwrap()), (3, "€x".to_string()));
        assert_eq!(log.tail(4).unwrap(), (3, "€x".as_bytes().to_vec()));
        assert_eq!(log.tail(100).unwrap(), (0, "aé€x".as_bytes().to_vec()));
    }

    #[tokio::test]
    async fn a_log_the_stage_replaces_is_read_through_the_handle_fabro_made() {
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), "PRIVATE KEY").unwrap();
        let script = format!(
            "echo mine; ln -sf {} \"$FABRO_STAGE_DIR/stdout.log\"; rm -f \"$FABRO_STAGE_DIR/stderr.log\"; \
             mkfifo \"$FABRO_STAGE_DIR/stderr.log\"",
            secret.path().display()
        );
        let fixture = fixture(&format!("script=\"{}\"", script.replace('"', "\\\"")));
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(update(&outcome, "command.output"), "mine\n");
        assert_eq!(update(&outcome, "command.stderr"), "");
        // A planted log from before is replaced, not followed, when the stage runs again.
        let outcome = CommandHandler.run(&stage).await.expect("runs again");
        assert_eq!(update(&outcome, "command.output"), "mine\n");
        assert_eq!(std::fs::read_to_string(secret.path()).unwrap(), "PRIVATE KEY");
    }

    #[tokio::test]
    async fn dry_run_runs_nothing() {
        let mut fixture = fixture(r#"script="touch ran""#);
        fixture.dry_run = true;
        let stage = fixture.stage("run");
        let outcome = CommandHandler.run(&stage).await.expect("runs");
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.notes.as_deref(), Some("dry run: would run `touch ran`"));
        assert_eq!(update(&outcome, "command.output"), "");
        assert!(!stage.work_dir.join("ran").exists());
        assert!(!stage.stage_dir.join("stdout.log").exists());
    }

    #[tokio::test]
    async fn blank_script_is_a_terminal_error() {
        let mut fixture = fixture(r#"script="true""#);
        for node in fixture.workflow.nodes_mut().filter(|node| node.id == "run") {
            let attr = node.attributes.get("script").cloned().unwrap();
            node.attributes.set("script", Attr { value: Value::Text("  ".into()), ..attr });
        }
        crate::graph::settings::read_settings(&mut fixture.workflow);
        let result = CommandHandler.run(&fixture.stage("run")).await;
        assert_eq!(result, Err(HandlerError::Terminal("command stage `run` has no script".into())));
    }

    #[tokio::test]
    async fn missing_work_dir_is_a_terminal_error() {
        let fixture = fixture(r#"script="true""#);
        let stage = fixture.stage("run");
        std::fs::remove_dir(stage.work_dir).unwrap();
        match CommandHandler.run(&stage).await {
            Err(HandlerError::Terminal(message)) => assert!(message.contains("could not start"), "{message}"),
            other => panic!("expected a terminal error, got {other:?}"),
        }
    }
}
