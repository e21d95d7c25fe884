//! The `cli` backend: a stage with `backend="cli"` runs an installed coding agent as a
//! subprocess in the work directory and takes what it prints as the response.
//!
//! `cli_agent="claude"` runs `claude -p PROMPT`, `"codex"` runs `codex exec PROMPT`, `"gemini"`
//! runs `gemini -p PROMPT`; anything else is a shell command (`sh -c`) that gets the prompt on
//! stdin and in the file `$FABRO_PROMPT_FILE`. The node's `timeout` bounds it; cancelling the run
//! kills its whole process group.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::llm::BackendError;
use crate::process_group::ProcessGroup;
use crate::redaction::Secrets;

/// The argv of a named agent, or `None` for a custom command.
pub fn known_agent(name: &str, prompt: &str) -> Option<Vec<String>> {
    let args: &[&str] = match name.trim() {
        "claude" => &["claude", "-p"],
        "codex" => &["codex", "exec"],
        "gemini" => &["gemini", "-p"],
        _ => return None,
    };
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    argv.push(prompt.to_string());
    Some(argv)
}

/// The variables holding the key a known agent needs for its own provider (none for a custom
/// command).
pub fn own_keys(agent: &str) -> &'static [&'static str] {
    match agent.trim() {
        "claude" => &["ANTHROPIC_API_KEY"],
        "codex" => &["OPENAI_API_KEY"],
        "gemini" => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        _ => &[],
    }
}

/// What the agent printed and how long it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliRun {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `agent` with `prompt` in `work_dir`.
pub async fn run(
    agent: &str,
    prompt: &str,
    work_dir: &Path,
    prompt_file: Option<&Path>,
    timeout: Option<Duration>,
    secrets: &Secrets,
    confinement: &crate::sandbox::Confinement,
) -> Result<CliRun, BackendError> {
    let (argv, shown) = match known_agent(agent, prompt) {
        Some(argv) => {
            let shown = argv[0].clone();
            (argv, shown)
        }
        None => (vec!["sh".to_string(), "-c".to_string(), agent.to_string()], agent.to_string()),
    };
    let args: Vec<&std::ffi::OsStr> = argv[1..].iter().map(|arg| arg.as_ref()).collect();
    // The prompt file lives in the stage directory: readable inside a sandbox.
    let readable: Vec<&Path> = prompt_file.and_then(Path::parent).into_iter().collect();
    let mut command = confinement.command(argv[0].as_ref(), &args, work_dir, &[], &readable);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("FABRO_WORK_DIR", work_dir)
        .kill_on_drop(true);
    // The sandbox's command left the run's secrets out. A known agent talks to its provider
    // itself: unconfined, it keeps that provider's key (and no other); in the sandbox only what
    // sandbox_env names gets in, as for every program.
    if confinement.kind == crate::graph::settings::SandboxKind::None {
        for name in own_keys(agent) {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
    }
    if let Some(file) = prompt_file {
        command.env("FABRO_PROMPT_FILE", file);
    }
    let (mut child, mut group) = ProcessGroup::spawn(&mut command).map_err(|error| {
        BackendError::Terminal(format!(
            "cannot start the CLI agent `{shown}` in {}: {error}; install it or set cli_agent to a command",
            work_dir.display()
        ))
    })?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let prompt_bytes = prompt.as_bytes().to_vec();
    let work = async {
        let feed = async {
            if let Some(mut pipe) = stdin.take() {
                // An agent that does not read stdin closes it early: not an error.
                let _ = pipe.write_all(&prompt_bytes).await;
            }
        };
        let mut out = Vec::new();
        let mut err = Vec::new();
        let read_out = async {
            if let Some(pipe) = stdout.as_mut() {
                let _ = pipe.read_to_end(&mut out).await;
            }
        };
        let read_err = async {
            if let Some(pipe) = stderr.as_mut() {
                let _ = pipe.read_to_end(&mut err).await;
            }
        };
        tokio::join!(feed, read_out, read_err);
        (child.wait().await, out, err)
    };
    let finished = match timeout {
        Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| {
            BackendError::Retryable(format!(
                "the CLI agent `{shown}` timed out after {}s and was killed",
                limit.as_secs_f64()
            ))
        }),
        None => Ok(work.await),
    };
    let (status, out, err) = match finished {
        Ok(done) => done,
        Err(error) => {
            drop(group);
            return Err(error);
        }
    };
    // The agent is done; what it left running in the background ends with it.
    group.stop_rest().await;
    let stdout = secrets.redact(&String::from_utf8_lossy(&out));
    let stderr = secrets.redact(&String::from_utf8_lossy(&err));
    let status =
        status.map_err(|error| BackendError::Terminal(format!("waiting for `{shown}` failed: {error}")))?;
    if !status.success() {
        let code = status
            .code()
            .map_or_else(|| "was killed by a signal".to_string(), |c| format!("exited with code {c}"));
        let tail: String = stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ");
        return Err(BackendError::Terminal(format!(
            "the CLI agent `{shown}` {code}: {}",
            crate::llm::http::excerpt(&tail, 500)
        )));
    }
    Ok(CliRun { stdout, stderr })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn custom_commands_get_the_prompt_and_their_output_is_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let run = run(
            "tr a-z A-Z; echo done >&2",
            "fix it",
            dir.path(),
            None,
            None,
            &Secrets::default(),
            &Default::default(),
        )
        .await
        .unwrap();
        assert_eq!(run.stdout, "FIX IT");
        assert_eq!(run.stderr, "done\n");
        let failed = super::run(
            "echo bad >&2; exit 4",
            "x",
            dir.path(),
            None,
            None,
            &Secrets::default(),
            &Default::default(),
        )
        .await;
        assert_eq!(
            failed,
            Err(BackendError::Terminal(
                "the CLI agent `echo bad >&2; exit 4` exited with code 4: bad".into()
            ))
        );
        let slow = super::run(
            "sleep 30",
            "x",
            dir.path(),
            None,
            Some(Duration::from_millis(200)),
            &Secrets::default(),
            &Default::default(),
        )
        .await;
        assert!(matches!(slow, Err(BackendError::Retryable(m)) if m.contains("timed out")));
    }

    #[test]
    fn known_agents_take_the_prompt_as_an_argument() {
        assert_eq!(known_agent("codex", "p"), Some(vec!["codex".into(), "exec".into(), "p".into()]));
        assert_eq!(known_agent("./my-agent --fast", "p"), None);
    }
}
