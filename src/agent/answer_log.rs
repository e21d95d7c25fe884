//! `stages/<node>/<visit>/answer.log`: an LLM stage's answers as the model writes them, for
//! `fabro logs -f --output` and `fabro serve`'s stage page. Streamed calls only: each call's text
//! as it arrives, a `[calls <tool>]` line for each tool call it begins, and a blank line between
//! calls. Secrets are redacted: the last characters, where a secret may have begun, wait for the
//! next piece of the stream, so that a secret split across two pieces is still caught whole.

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use crate::llm::stream::AnswerEvent;
use crate::redaction::Secrets;
use crate::run_dir::layout;

/// Appends a stage's streamed answers to its `answer.log`.
pub struct AnswerLog {
    file: Mutex<Written>,
    secrets: Secrets,
}

#[derive(Default)]
struct Written {
    file: Option<std::fs::File>,
    /// Text not yet written: where a secret may have begun.
    pending: String,
    /// Whether anything was written (a later call starts after a blank line).
    any: bool,
    /// Whether the last byte written ends a line.
    at_line_start: bool,
}

impl AnswerLog {
    /// The log of the stage whose directory is `stage_dir` (none: nothing is written).
    pub fn new(stage_dir: Option<&Path>, secrets: Secrets) -> AnswerLog {
        let file = stage_dir.and_then(|dir| {
            let path = dir.join(layout::ANSWER_LOG);
            crate::regular_file::open_append(&path)
                .map_err(|error| tracing::warn!(%error, path = %path.display(), "answer log not written"))
                .ok()
        });
        AnswerLog { file: Mutex::new(Written { file, at_line_start: true, ..Written::default() }), secrets }
    }

    /// Writes what `event` adds to the answer. `Unstreamed` is not written: it is an event.
    pub fn take(&self, event: AnswerEvent<'_>) {
        let Ok(mut written) = self.file.lock() else { return };
        if written.file.is_none() {
            return;
        }
        match event {
            AnswerEvent::Started => {
                let rest = std::mem::take(&mut written.pending);
                self.write(&mut written, &rest);
                if written.any {
                    let gap = if written.at_line_start { "\n" } else { "\n\n" };
                    self.write(&mut written, gap);
                }
            }
            AnswerEvent::Text(text) => {
                written.pending.push_str(text);
                let ready = self.secrets.ready_len(&written.pending);
                let text: String = written.pending.drain(..ready).collect();
                self.write(&mut written, &text);
            }
            AnswerEvent::ToolCall(name) => {
                let rest = std::mem::take(&mut written.pending);
                let start = if rest.is_empty() && written.at_line_start { "" } else { "\n" };
                self.write(&mut written, &format!("{rest}{start}[calls {name}]\n"));
            }
            AnswerEvent::Unstreamed { .. } => {}
        }
    }

    fn write(&self, written: &mut Written, text: &str) {
        if text.is_empty() {
            return;
        }
        let text = self.secrets.redact(text);
        let Some(file) = written.file.as_mut() else { return };
        if let Err(error) = file.write_all(text.as_bytes()) {
            tracing::warn!(%error, "answer log not written");
            written.file = None;
            return;
        }
        written.any = true;
        written.at_line_start = text.ends_with('\n');
    }
}

impl Drop for AnswerLog {
    /// The end of the last answer, when it was held back for redaction.
    fn drop(&mut self) {
        if let Ok(mut written) = self.file.lock() {
            let rest = std::mem::take(&mut written.pending);
            self.write(&mut written, &rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(secrets: Secrets, events: &[AnswerEvent<'_>]) -> String {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = AnswerLog::new(Some(dir.path()), secrets);
            for event in events {
                log.take(*event);
            }
        }
        std::fs::read_to_string(dir.path().join(layout::ANSWER_LOG)).unwrap()
    }

    #[test]
    fn calls_follow_each_other_with_their_tool_calls_on_lines_of_their_own() {
        use AnswerEvent::*;
        let text = logged(
            Secrets::new([]),
            &[
                Started,
                Text("Let me "),
                Text("look."),
                ToolCall("shell"),
                Started,
                Text("Done.\n"),
                Started,
                Text("x"),
            ],
        );
        assert_eq!(text, "Let me look.\n[calls shell]\n\nDone.\n\nx");
    }

    #[test]
    fn a_secret_split_across_pieces_is_redacted() {
        use AnswerEvent::*;
        let secrets = Secrets::new(["sk-live-123456".to_string()]);
        let text = logged(
            secrets,
            &[Started, Text("key sk-li"), Text("ve-123456 ok\nthen sk-live-"), Text("123456")],
        );
        assert!(!text.contains("sk-live-123456"), "{text}");
        assert!(text.starts_with("key ") && text.contains(" ok\nthen "), "{text}");
    }
}
