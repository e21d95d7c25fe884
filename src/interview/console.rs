//! Asks human gates on an interactive terminal: the question and its choices go to stderr, the
//! answer is one line read from stdin.
//!
//! ```text
//! [?] Ship it?
//!   [A] Approve -> deploy
//!   [R] Request changes -> revise
//! (answer within 5m)
//! >
//! ```

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Mutex as SyncMutex;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::{mpsc, Mutex};

use super::{answer_for, closest_choice, list_choices, Answer, Interviewer, Question};
use crate::graph::attribute::format_duration;

type Writer = Box<dyn Write + Send>;

/// An interviewer that reads answers typed on a terminal (or any reader, for tests).
pub struct Console {
    input: Mutex<Input>,
    output: SyncMutex<Writer>,
}

/// Where answers are read from.
enum Input {
    Reader(Box<dyn AsyncBufRead + Send + Unpin>),
    /// Lines of the process's stdin, read on a dedicated thread (started at the first question)
    /// so a pending read never holds up the runtime's shutdown; `None` until then.
    Stdin(Option<mpsc::Receiver<std::io::Result<Vec<u8>>>>),
}

impl Input {
    /// The next line, with its newline; empty at the end of input.
    async fn read_line(&mut self) -> std::io::Result<Vec<u8>> {
        match self {
            Input::Reader(reader) => {
                let mut line = Vec::new();
                reader.read_until(b'\n', &mut line).await?;
                Ok(line)
            }
            Input::Stdin(lines) => {
                let lines = match lines {
                    Some(lines) => lines,
                    None => lines.insert(spawn_stdin_reader()?),
                };
                // After the end of input the reader thread has gone and the channel is closed.
                lines.recv().await.unwrap_or_else(|| Ok(Vec::new()))
            }
        }
    }

    /// Drops the lines typed while no question was showing (say, after a timeout): they
    /// answered an earlier question. Called before a question is shown, never after, so a
    /// line typed as soon as the question appears is kept. The end of input stays queued.
    fn drop_typed_ahead(&mut self) {
        if let Input::Stdin(Some(lines)) = self {
            while let Ok(Ok(stale)) = lines.try_recv() {
                if stale.is_empty() {
                    break;
                }
            }
        }
    }
}

/// Reads stdin line by line on its own thread; the channel closes at the end of input.
fn spawn_stdin_reader() -> std::io::Result<mpsc::Receiver<std::io::Result<Vec<u8>>>> {
    let (sender, receiver) = mpsc::channel(1);
    std::thread::Builder::new().name("fabro-stdin".into()).spawn(move || {
        let stdin = std::io::stdin();
        loop {
            let mut line = Vec::new();
            let read = stdin.lock().read_until(b'\n', &mut line);
            let last = !matches!(read, Ok(n) if n > 0);
            if sender.blocking_send(read.map(|_| line)).is_err() || last {
                break;
            }
        }
    })?;
    Ok(receiver)
}

impl Console {
    /// Reads stdin and writes to stderr.
    pub fn new() -> Console {
        Console { input: Mutex::new(Input::Stdin(None)), output: SyncMutex::new(Box::new(std::io::stderr())) }
    }

    /// Reads answers from `reader` and writes questions to `writer`.
    pub fn with_io(
        reader: impl AsyncBufRead + Send + Unpin + 'static,
        writer: impl Write + Send + 'static,
    ) -> Console {
        Console {
            input: Mutex::new(Input::Reader(Box::new(reader))),
            output: SyncMutex::new(Box::new(writer)),
        }
    }

    /// True when stdin and stderr are both terminals, so someone can see and answer questions.
    pub fn is_available() -> bool {
        std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }

    /// Writes to the output; a failed write is logged, never fatal (the answer may still come).
    fn say(&self, text: &str) {
        let mut output = self.output.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(error) = output.write_all(text.as_bytes()).and_then(|()| output.flush()) {
            tracing::warn!(%error, "could not write the question to the terminal");
        }
    }
}

impl Console {
    /// Shows `prompt` and reads one line (without its newline); `None` at the end of input.
    /// Shares the input with gate questions, so lines typed for one never reach the other.
    pub async fn ask_line(&self, prompt: &str) -> Option<String> {
        let mut input = self.input.lock().await;
        input.drop_typed_ahead();
        self.say(prompt);
        match input.read_line().await {
            Ok(line) if line.is_empty() => None,
            Ok(line) => Some(String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']).to_string()),
            Err(error) => {
                tracing::warn!(%error, "could not read from the terminal");
                None
            }
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Console::new()
    }
}

/// The question as shown: `[?] text`, one line per choice, the time limit, and a `> ` prompt.
pub fn render_question(question: &Question<'_>) -> String {
    let mut text = format!("[?] {}\n", question.text.trim());
    for choice in question.choices {
        text.push_str(&format!("  [{}] {} -> {}\n", choice.key, choice.label, choice.target));
    }
    if let Some(timeout) = question.timeout {
        text.push_str(&format!("(answer within {})\n", format_duration(timeout)));
    }
    text.push_str("> ");
    text
}

#[async_trait::async_trait]
impl Interviewer for Console {
    /// Asks until the answer names a choice (or, at a freeform gate, is any text): an empty line
    /// or text that names no choice asks again, listing the choices. The gate's timeout covers
    /// all the asking; the end of input means nobody can answer.
    async fn ask(&self, question: &Question<'_>) -> Answer {
        // One question at a time: parallel branches wait their turn for the terminal.
        let mut input = self.input.lock().await;
        let deadline = question.timeout.map(|timeout| tokio::time::Instant::now() + timeout);
        input.drop_typed_ahead();
        self.say(&render_question(question));
        loop {
            let read = input.read_line();
            let read = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
                    Ok(read) => read,
                    Err(_elapsed) => {
                        let waited = question.timeout.map(format_duration).unwrap_or_default();
                        self.say(&format!("\n[!] no answer within {waited}\n"));
                        return Answer::Timeout;
                    }
                },
                None => read.await,
            };
            let line = match read {
                Ok(line) if line.is_empty() => {
                    self.say("\n");
                    return Answer::Unavailable;
                }
                Ok(line) => line,
                Err(error) => {
                    tracing::warn!(%error, "could not read an answer from the terminal");
                    return Answer::Unavailable;
                }
            };
            let text = String::from_utf8_lossy(&line);
            let retry = if text.trim().is_empty() {
                format!("[!] type one of: {}\n> ", list_choices(question.choices))
            } else {
                match answer_for(&text, question) {
                    Answer::Unrecognized(text) => {
                        let hint = closest_choice(&text, question.choices)
                            .map(|choice| format!(" (did you mean `{}`?)", choice.label))
                            .unwrap_or_default();
                        format!(
                            "[!] `{text}` is not one of the choices{hint}; type one of: {}\n> ",
                            list_choices(question.choices)
                        )
                    }
                    answer => return answer,
                }
            };
            self.say(&retry);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::BufReader;

    use super::*;
    use crate::graph::Choice;

    /// A writer tests can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<SyncMutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn choices() -> Vec<Choice<'static>> {
        vec![
            Choice::from_edge(Some("[A] Approve"), "deploy"),
            Choice::from_edge(Some("R) Request changes"), "revise"),
            Choice::from_edge(Some("[S] Skip"), "exit"),
        ]
    }

    fn console(input: &'static str) -> (Console, Shared) {
        let output = Shared::default();
        (Console::with_io(input.as_bytes(), output.clone()), output)
    }

    async fn ask_gate(console: &Console, timeout: Option<Duration>, freeform: bool) -> Answer {
        let choices = choices();
        console
            .ask(&Question { gate_id: "gate", text: "Ship it?", choices: &choices, timeout, freeform })
            .await
    }

    async fn ask(console: &Console, timeout: Option<Duration>) -> Answer {
        ask_gate(console, timeout, false).await
    }

    const QUESTION: &str =
        "[?] Ship it?\n  [A] Approve -> deploy\n  [R] Request changes -> revise\n  [S] Skip -> exit\n> ";

    #[tokio::test]
    async fn answers_by_key_label_or_target_then_eof() {
        let (console, output) = console("a\n  Request changes \nexit\n");
        assert_eq!(ask(&console, None).await, Answer::Choice(0));
        assert_eq!(ask(&console, None).await, Answer::Choice(1));
        assert_eq!(ask(&console, None).await, Answer::Choice(2));
        assert_eq!(ask(&console, None).await, Answer::Unavailable, "end of input");
        assert!(output.text().starts_with(&format!("{QUESTION}{QUESTION}")), "{}", output.text());
    }

    #[tokio::test]
    async fn text_naming_no_choice_and_empty_lines_ask_again() {
        let (console, output) = console("Request change\n\nnope\nr\n");
        assert_eq!(ask(&console, None).await, Answer::Choice(1));
        assert_eq!(
            output.text(),
            format!(
                "{QUESTION}[!] `Request change` is not one of the choices (did you mean `Request changes`?); \
                 type one of: [A] Approve, [R] Request changes, [S] Skip\n> \
                 [!] type one of: [A] Approve, [R] Request changes, [S] Skip\n> \
                 [!] `nope` is not one of the choices; type one of: [A] Approve, [R] Request changes, [S] Skip\n> "
            )
        );
        // Asking again never routes: the end of input leaves the gate unanswered.
        let (ended, _) = super::tests::console("nope\n");
        assert_eq!(ask(&ended, None).await, Answer::Unavailable);
    }

    #[tokio::test]
    async fn a_freeform_gate_takes_any_text() {
        let (console, _) = console("not yet, add tests\n");
        assert_eq!(ask_gate(&console, None, true).await, Answer::Freeform("not yet, add tests".into()));
    }

    #[tokio::test]
    async fn last_line_without_newline_still_counts() {
        let (console, _) = console("S");
        assert_eq!(ask(&console, Some(Duration::from_secs(5))).await, Answer::Choice(2));
    }

    #[tokio::test]
    async fn no_answer_within_the_timeout() {
        let (reader, _writer) = tokio::io::duplex(64);
        let output = Shared::default();
        let console = Console::with_io(BufReader::new(reader), output.clone());
        assert_eq!(ask(&console, Some(Duration::from_millis(20))).await, Answer::Timeout);
        let text = output.text();
        assert!(text.contains("(answer within 20ms)\n> "), "{text}");
        assert!(text.ends_with("\n[!] no answer within 20ms\n"), "{text}");
    }

    #[tokio::test]
    async fn an_answer_typed_before_the_timeout_is_taken() {
        let (reader, mut writer) = tokio::io::duplex(64);
        let console = Console::with_io(BufReader::new(reader), Shared::default());
        let typing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tokio::io::AsyncWriteExt::write_all(&mut writer, b"r\n").await.unwrap();
            writer
        });
        assert_eq!(ask(&console, Some(Duration::from_secs(5))).await, Answer::Choice(1));
        drop(typing.await.unwrap());
        assert_eq!(ask(&console, Some(Duration::from_secs(5))).await, Answer::Unavailable, "closed input");
    }

    #[tokio::test]
    async fn a_line_typed_as_soon_as_the_question_is_asked_again_is_kept() {
        let (sender, receiver) = mpsc::channel(4);
        let console = Console {
            input: Mutex::new(Input::Stdin(Some(receiver))),
            output: SyncMutex::new(Box::new(Shared::default())),
        };
        let typing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            // Both lines arrive before the console reads again after the empty one.
            sender.send(Ok(b"\n".to_vec())).await.unwrap();
            sender.send(Ok(b"r\n".to_vec())).await.unwrap();
            sender
        });
        assert_eq!(ask(&console, Some(Duration::from_secs(5))).await, Answer::Choice(1));
        drop(typing.await.unwrap());
    }

    #[tokio::test]
    async fn stdin_lines_typed_before_the_question_are_dropped() {
        let (sender, receiver) = mpsc::channel(4);
        let output = Shared::default();
        let console = Console {
            input: Mutex::new(Input::Stdin(Some(receiver))),
            output: SyncMutex::new(Box::new(output.clone())),
        };
        sender.send(Ok(b"a\n".to_vec())).await.unwrap();
        let typing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            sender.send(Ok(b"s\n".to_vec())).await.unwrap();
        });
        assert_eq!(ask(&console, Some(Duration::from_secs(5))).await, Answer::Choice(2));
        typing.await.unwrap();
        assert_eq!(ask(&console, None).await, Answer::Unavailable, "stdin closed");
    }
}
