//! Compaction: when an agent stage's conversation grows too long, its older turns are replaced
//! by one block and the stage goes on from the turns it keeps. Unlike the per-call layers, this
//! changes the conversation itself (the transcript keeps everything).
//!
//! When ([`Compactor::due`]), after every turn, whichever comes first:
//! - the estimate (characters / 4, system prompt included) passes a share of the context window
//!   set by the model's tier (`compaction_threshold`; `window` mode: `compaction_token_budget`);
//! - the turns since the last compaction reach `compaction_trigger_turns` (or the preset's);
//! - the input tokens sent since the last compaction reach `context_budget_cutover`.
//!
//! And before a call ([`Trigger::Overflow`]) when it would not fit the window, by the estimate or
//! because the provider rejected it: then only the latest turn stays, and a summary gets only
//! the room the window leaves.
//!
//! An anti-thrash guard holds compaction back while each of the latest compactions saved too
//! little of the turns it took in, until the conversation has grown by a quarter.
//! `compaction=none` compacts only a call the provider rejected for its size.
//!
//! How ([`Compactor::compact`]) is the stage's `compaction_mode`: a model's summary ([`llm_summary`]),
//! the stage's tool-call log ([`intent`]), the run's records ([`lossless`]), both records and
//! summary (`hybrid`), or dropping the oldest turns ([`window`]). The stage's prompt and earlier
//! blocks are never compacted away. A summary that fails leaves a `[COMPACTION FAILED]` block that
//! sends the model to the files on disk (`hybrid` falls back to its records block).

pub mod checkpoint;
pub mod intent;
pub mod llm_summary;
pub mod lossless;
pub mod operation_log;
pub mod thread_digest;
pub mod window;

use std::collections::VecDeque;
use std::time::Duration;

use crate::agent::file_tracker::FileList;
use crate::chat::ChatMessage;
use crate::event::{Compaction, Event};
use crate::graph::settings::{CompactionCount, CompactionMode, ContextSettings};
use crate::llm::chat::ChatProvider;
use crate::usage::Usage;

use super::calibration::Calibration;
use super::side_call::{self, SideCall};
use super::tokens;

/// The first line of the block a failed summary leaves.
pub const FAILED_HEADER: &str = "[COMPACTION FAILED]";

/// Whether a user message is a compaction block (pinned, and never cut).
pub fn is_block(content: &str) -> bool {
    [
        llm_summary::HEADER,
        intent::HEADER,
        lossless::HEADER,
        FAILED_HEADER,
        checkpoint::HEADER,
        thread_digest::HEADER,
    ]
    .iter()
    .any(|header| content.starts_with(header))
}

/// Why a compaction started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The estimate passed the window threshold (or `window` mode's token budget).
    Window,
    /// The turns since the last compaction reached the trigger count.
    Turns,
    /// The input tokens since the last compaction reached `context_budget_cutover`.
    Budget,
    /// The next call would not fit the window (by the estimate, or the provider rejected it for its
    /// size): compaction keeps only the latest turn.
    Overflow,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Window => "window",
            Trigger::Turns => "turns",
            Trigger::Budget => "budget",
            Trigger::Overflow => "overflow",
        }
    }
}

/// What a compaction may read besides the conversation.
pub struct Inputs<'a> {
    pub provider: &'a dyn ChatProvider,
    /// The model that writes summaries (`compaction_model`, else the stage's).
    pub model: &'a str,
    pub timeout: Duration,
    /// Estimated tokens (at the default ratio) of what every request sends besides the messages:
    /// the system prompt and the tool definitions.
    pub fixed_tokens: u64,
    /// The file tracker's list in a budget of characters, and how many files it has.
    pub files: &'a (dyn Fn(usize) -> FileList + Sync),
    pub file_count: usize,
    /// Where the stage's full log is, as the blocks say it ([`full_log`]; empty outside a run).
    pub full_log: &'a str,
    /// The run's records when the stage started (none outside a run).
    pub record: Option<&'a lossless::RunRecord>,
    /// The window of the model that writes summaries and records.
    pub side_call: SideCall,
}

/// What a compaction did: the events to emit, what its summary call used, the block it left.
#[derive(Debug, Clone, Default)]
pub struct Done {
    pub events: Vec<Event>,
    pub usage: Usage,
    pub block: Option<String>,
    pub saved_tokens: u64,
}

/// Above this estimate a `Window` trigger fires: the model's share of the window, or `window`
/// mode's token budget.
fn limit(settings: &ContextSettings, model: &str, window: u64) -> u64 {
    match settings.compaction_mode() {
        CompactionMode::Window => settings.compaction_token_budget.unwrap_or(window * 8 / 10),
        _ => (window as f64 * settings.threshold(model)) as u64,
    }
}

/// One stage's compaction state.
#[derive(Debug, Clone)]
pub struct Compactor {
    settings: ContextSettings,
    model: String,
    window: u64,
    /// Above this estimate a `Window` trigger fires.
    limit: u64,
    /// The stage's tool calls, for `intent` and `lossless` blocks.
    pub log: operation_log::OperationLog,
    /// Where the stage's prompt is in the conversation.
    prompt_at: usize,
    /// The last loop turn a compaction covered.
    compacted_through: u32,
    /// The share each of the latest compactions saved (anti-thrash guard).
    savings: VecDeque<f64>,
    /// The estimate at which the guard held compaction back.
    held_at: Option<u64>,
    /// Input tokens sent since the last compaction, and whether the budget warning went out.
    since_compaction: u64,
    warned: bool,
    /// The stage's characters-per-token ratio: estimates are made at the default ratio and
    /// compared with the window in the server's tokens.
    pub calibration: Calibration,
}

impl Compactor {
    /// The compaction state of a stage on `model` with a `window`-token context, whose prompt is
    /// message `prompt_at` of its conversation.
    pub fn new(settings: &ContextSettings, model: &str, window: u64, prompt_at: usize) -> Compactor {
        let window = window.max(1);
        Compactor {
            settings: settings.clone(),
            model: model.to_string(),
            window,
            limit: limit(settings, model, window),
            log: operation_log::OperationLog::default(),
            prompt_at,
            compacted_through: 0,
            savings: VecDeque::new(),
            held_at: None,
            since_compaction: 0,
            warned: false,
            calibration: Calibration::default(),
        }
    }

    /// The context window the stage goes by.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Goes by a `window` learned during the stage (a server that states its limit).
    pub fn set_window(&mut self, window: u64) {
        self.window = window.max(1);
        self.limit = limit(&self.settings, &self.model, self.window);
    }

    /// The estimate of `fixed_tokens` plus `messages`, in the server's tokens.
    pub fn estimate(&self, messages: &[ChatMessage], fixed_tokens: u64) -> u64 {
        self.calibration.rescale(fixed_tokens + tokens(messages))
    }

    /// Where the stage's prompt is in the conversation now.
    pub fn prompt_at(&self) -> usize {
        self.prompt_at
    }

    /// Counts a model call's input tokens toward the context budget; the warning goes out once
    /// per compaction cycle.
    pub fn count_input(&mut self, tokens: u64) -> Option<Event> {
        self.since_compaction = self.since_compaction.saturating_add(tokens);
        let warn_at = self.settings.context_budget_warn?;
        if self.since_compaction >= warn_at && !self.warned {
            self.warned = true;
            return Some(Event::AgentContextBudgetWarning { input_tokens: self.since_compaction, warn_at });
        }
        None
    }

    /// Assistant turns after the prompt (and after the last compaction block, which follows it).
    fn uncompacted_turns(&self, messages: &[ChatMessage]) -> usize {
        messages
            .iter()
            .skip(self.prompt_at + 1)
            .filter(|m| matches!(m, ChatMessage::Assistant { .. }))
            .count()
    }

    /// Messages after the prompt, but compaction blocks.
    fn uncompacted_messages(&self, messages: &[ChatMessage]) -> usize {
        messages
            .iter()
            .skip(self.prompt_at + 1)
            .filter(|m| !matches!(m, ChatMessage::User { content } if is_block(content)))
            .count()
    }

    /// Whether a turn-count trigger is due: `compaction_trigger_turns` turns are uncompacted, or
    /// more messages than the preset's trigger (as the presets count).
    fn turn_count_due(&self, messages: &[ChatMessage]) -> bool {
        match self.settings.compaction_counts() {
            Some((CompactionCount::Turns(at), _)) => self.uncompacted_turns(messages) >= at,
            Some((CompactionCount::Messages(at), _)) => self.uncompacted_messages(messages) > at,
            None => false,
        }
    }

    /// How many of the latest turns a compaction keeps: `compaction_keep_turns`, or the most
    /// that fit in the preset's kept messages; at least one. `starts` are where the uncompacted
    /// turns start.
    fn kept_turns(&self, messages: &[ChatMessage], starts: &[usize]) -> usize {
        match self.settings.keep() {
            CompactionCount::Turns(turns) => turns.max(1),
            CompactionCount::Messages(kept) => {
                starts.iter().rev().take_while(|&&start| messages.len() - start <= kept).count().max(1)
            }
        }
    }

    /// Whether the conversation should be compacted now, and the events of the check (a window
    /// warning, the anti-thrash guard holding back).
    pub fn due(&mut self, messages: &[ChatMessage], fixed_tokens: u64) -> (Option<Trigger>, Vec<Event>) {
        let mut events = Vec::new();
        let estimated = self.estimate(messages, fixed_tokens);
        if estimated > self.limit {
            events.push(Event::AgentContextWindowWarning {
                estimated_tokens: estimated,
                context_window_size: self.window,
                usage_percent: estimated * 100 / self.window,
            });
        }
        if !self.settings.compacts() {
            return (None, events);
        }
        let trigger = if self.settings.context_budget_cutover.is_some_and(|at| self.since_compaction >= at) {
            Trigger::Budget
        } else if self.turn_count_due(messages) {
            Trigger::Turns
        } else if estimated > self.limit {
            Trigger::Window
        } else {
            return (None, events);
        };
        if let Some((window, min_savings)) = self.settings.anti_thrash() {
            let thrashing =
                self.savings.len() >= window && self.savings.iter().all(|saved| *saved < min_savings);
            if thrashing {
                match self.held_at {
                    // Grown by a quarter since the guard held back: try again.
                    Some(at) if estimated >= at + at / 4 => self.held_at = None,
                    Some(_) => return (None, events),
                    None => {
                        self.held_at = Some(estimated);
                        events.push(Event::AgentContextCompactionHeld {
                            estimated_tokens: estimated,
                            recent_compactions: window,
                            min_savings,
                        });
                        return (None, events);
                    }
                }
            }
        }
        (Some(trigger), events)
    }

    /// Compacts `messages` as the stage's mode says; `None` when there is nothing to compact
    /// (no more turns than are kept).
    pub async fn compact(
        &mut self,
        trigger: Trigger,
        messages: &mut Vec<ChatMessage>,
        inputs: &Inputs<'_>,
    ) -> Option<Done> {
        let mode = self.settings.compaction_mode();
        let before = self.estimate(messages, inputs.fixed_tokens);
        // The thread's earlier stages become their digest, even when no turn of the stage's own
        // is compacted yet (a long thread fills the window at the stage's first call).
        let pinned = self.pin_thread_digest(messages);
        let starts: Vec<usize> = (self.prompt_at + 1..messages.len())
            .filter(|&i| matches!(messages[i], ChatMessage::Assistant { .. }))
            .collect();
        let keep = if trigger == Trigger::Overflow { 1 } else { self.kept_turns(messages, &starts) };
        let turn_count = self.uncompacted_turns(messages);
        let mut done = Done::default();
        // The turns a compaction takes in, earlier blocks left out.
        let mut taken_in = 0;
        done.events.push(Event::AgentCompactionStarted {
            estimated_tokens: before,
            turn_count,
            mode: mode.as_str().to_string(),
            trigger: trigger.as_str().to_string(),
        });
        if mode == CompactionMode::Window {
            let prompt_at = self.prompt_at;
            // Over the budget, only the last turn must stay; a turn or budget trigger keeps the
            // turns the settings keep.
            let (max_turns, keep) = match trigger {
                Trigger::Window | Trigger::Overflow => (None, 1),
                _ => (Some(keep), keep),
            };
            let (dropped_turns, dropped) = window::drop_oldest(
                messages,
                inputs.fixed_tokens,
                self.calibration.default_estimate_of(self.limit),
                max_turns,
                keep,
                |i, message| {
                    i == prompt_at || matches!(message, ChatMessage::User { content } if is_block(content))
                },
            );
            if dropped_turns == 0 && !dropped.contains(&true) && !pinned {
                return None;
            }
            self.prompt_at -= dropped[..prompt_at].iter().filter(|d| **d).count();
            self.compacted_through += dropped_turns as u32;
        } else if starts.len() > keep {
            let cut = starts[starts.len() - keep];
            let turns = messages[self.prompt_at + 1..cut]
                .iter()
                .filter(|m| !matches!(m, ChatMessage::User { content } if is_block(content)));
            taken_in = self
                .calibration
                .rescale(crate::usage::estimated_tokens(turns.map(ChatMessage::char_count).sum()));
            let through = self.compacted_through + (starts.len() - keep) as u32;
            self.log.count_through(through);
            // The thread's digest and the stage's prompt stay, then the block, then the kept
            // turns; the block gets what the window leaves of them.
            let mut head: Vec<ChatMessage> =
                messages[..self.prompt_at].iter().filter(|m| thread_digest::is_digest(m)).cloned().collect();
            head.push(messages[self.prompt_at].clone());
            let kept = self.estimate(&[&head[..], &messages[cut..]].concat(), inputs.fixed_tokens);
            let room = side_call::room(self.window, kept);
            let block = self.block(mode, through, &messages[..cut], inputs, room, &mut done).await;
            self.prompt_at = head.len() - 1;
            head.push(ChatMessage::user(block.clone()));
            messages.splice(..cut, head);
            self.compacted_through = through;
            done.block = Some(block);
        } else if !pinned {
            return None;
        }
        let after = self.estimate(messages, inputs.fixed_tokens);
        done.saved_tokens = before.saturating_sub(after);
        if let Some((window, _)) = self.settings.anti_thrash() {
            // What the turns it took in were worth, not the whole conversation: a compaction that
            // folds a few short turns into a block that does not grow saves all of them.
            let taken_in = if mode == CompactionMode::Window { done.saved_tokens } else { taken_in };
            self.savings.push_back(done.saved_tokens as f64 / taken_in.max(1) as f64);
            while self.savings.len() > window {
                self.savings.pop_front();
            }
        }
        self.since_compaction = 0;
        self.warned = false;
        done.events.push(Event::AgentCompactionCompleted(Compaction {
            original_turn_count: turn_count,
            preserved_turn_count: self.uncompacted_turns(messages),
            summary_token_estimate: done
                .block
                .as_deref()
                .map_or(0, |b| crate::usage::estimated_tokens(b.len())),
            tracked_file_count: inputs.file_count,
            mode: mode.as_str().to_string(),
            before_tokens: before,
            after_tokens: after,
        }));
        Some(done)
    }

    /// Replaces the thread's earlier stages (the messages before the stage's prompt) by their
    /// digest, once ([`thread_digest`]); every mode keeps it from then on. True when it did.
    fn pin_thread_digest(&mut self, messages: &mut Vec<ChatMessage>) -> bool {
        let history = &messages[..self.prompt_at];
        if history.is_empty() || (history.len() == 1 && thread_digest::is_digest(&history[0])) {
            return false;
        }
        let digest = thread_digest::digest(history);
        messages.splice(..self.prompt_at, [ChatMessage::user(digest)]);
        self.prompt_at = 1;
        true
    }

    /// Replaces the finished task, the turns after the stage's prompt and its earlier blocks up to
    /// loop turn `through`, by its completion record ([`checkpoint`]), or by the task's operations
    /// when the record cannot be written. `None` when no turn follows the prompt.
    pub async fn checkpoint(
        &mut self,
        through: u32,
        detail: &str,
        messages: &mut Vec<ChatMessage>,
        inputs: &Inputs<'_>,
    ) -> Option<Done> {
        let start = (self.prompt_at + 1..messages.len())
            .find(|&i| matches!(messages[i], ChatMessage::Assistant { .. }))?;
        let before = self.estimate(messages, inputs.fixed_tokens);
        let mut done = Done::default();
        self.log.count_through(through);
        let files = (inputs.files)(self.settings.block_chars() / 2).text;
        let written = checkpoint::write_record(
            inputs.provider,
            inputs.model,
            inputs.timeout,
            &messages[start..],
            detail,
            self.settings.prune_chars(),
            &inputs.side_call,
        )
        .await;
        let (block, fallback) = match written {
            Ok((record, usage)) => {
                done.usage.add(&usage);
                (checkpoint::block(detail, &record, &files), None)
            }
            Err((error, usage)) => {
                done.usage.add(&usage);
                let block = checkpoint::fallback_block(
                    detail,
                    &error,
                    &self.log,
                    self.compacted_through + 1,
                    through,
                    &files,
                );
                (block, Some(error))
            }
        };
        let turn_count =
            messages[start..].iter().filter(|m| matches!(m, ChatMessage::Assistant { .. })).count();
        messages.truncate(start);
        messages.push(ChatMessage::user(block.clone()));
        self.compacted_through = through;
        self.since_compaction = 0;
        self.warned = false;
        let after = self.estimate(messages, inputs.fixed_tokens);
        done.saved_tokens = before.saturating_sub(after);
        done.events.push(Event::AgentTaskCheckpoint {
            turn: through,
            detail: detail.to_string(),
            replaced_turns: turn_count,
            before_tokens: before,
            after_tokens: after,
            fallback: fallback.map(|error| format!("operations ({error})")),
        });
        done.block = Some(block);
        Some(done)
    }

    /// The block that replaces `compacted` (turns 1..=`through`) under `mode`. A summary takes
    /// at most `room` tokens with its framing (what the stage's window leaves beside the rest of
    /// the request): it is asked for no more, and cut to it if it is longer.
    async fn block(
        &self,
        mode: CompactionMode,
        through: u32,
        compacted: &[ChatMessage],
        inputs: &Inputs<'_>,
        room: u64,
        done: &mut Done,
    ) -> String {
        let budget = self.settings.block_chars();
        let records = || {
            let none = lossless::RunRecord::default();
            let record = inputs.record.unwrap_or(&none);
            lossless::block(record, &self.log, inputs.files, inputs.full_log, through, budget)
        };
        let files = || (inputs.files)(budget / 2).text;
        match mode {
            CompactionMode::Intent => {
                intent::block(&self.log, through, inputs.files, inputs.full_log, budget)
            }
            CompactionMode::Lossless => records(),
            CompactionMode::Llm | CompactionMode::Hybrid | CompactionMode::Window => {
                let records = (mode == CompactionMode::Hybrid).then(records);
                let files = files();
                let block = |summary: &str| {
                    let summary =
                        format!("{}\n\n{summary}\n\n## File Operations\n{files}\n", llm_summary::HEADER);
                    match &records {
                        Some(records) => format!("{records}\n\n{summary}"),
                        None => summary,
                    }
                };
                const CUT: &str = " […]";
                // One token more: the estimate rounds up.
                let framing = self.calibration.tokens(block("").len() + CUT.len()) + 1;
                let summary_room = room.saturating_sub(framing);
                let summarized = llm_summary::summarize(
                    inputs.provider,
                    inputs.model,
                    inputs.timeout,
                    compacted,
                    self.settings.prune_chars(),
                    &inputs.side_call,
                    u32::try_from(summary_room).unwrap_or(u32::MAX),
                )
                .await;
                match summarized {
                    Ok((text, usage)) => {
                        done.usage.add(&usage);
                        let max_chars = (summary_room as f64 * self.calibration.chars_per_token()) as usize;
                        block(&super::shortened(&text, max_chars, CUT))
                    }
                    Err((error, usage)) => {
                        done.usage.add(&usage);
                        done.events.push(Event::AgentCompactionFailed {
                            error: error.clone(),
                            fallback: if records.is_some() { "lossless" } else { "compaction_failed_marker" }
                                .to_string(),
                        });
                        match records {
                            Some(records) => records,
                            None => failed_block(through, &error, &files),
                        }
                    }
                }
            }
        }
    }
}

/// Where the stage's full log is, for blocks to say: its transcript at `transcript` (none
/// outside a run, and then an empty text).
pub fn full_log(transcript: Option<&std::path::Path>) -> String {
    let Some(path) = transcript else { return String::new() };
    let parts: Vec<String> = path.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let in_run = parts[parts.len().saturating_sub(4)..].join("/");
    format!(
        "The full log of this stage, every tool call with its arguments and result, is {} (the run's `{in_run}`); \
         read_file and grep can read it.",
        path.display()
    )
}

/// The block a failed summary leaves: the turns are gone, and the model is sent to the files.
fn failed_block(through: u32, error: &str, files: &str) -> String {
    format!(
        "{FAILED_HEADER} Turns 1-{through} of this stage could not be summarized ({error}), so they are no longer \
         in this conversation. Do not rely on memory of them: read the files on disk and re-run commands to learn \
         the current state before you go on.\n\n## File Operations (from fabro's file tracker)\n{files}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::llm_summary::tests::Summarizer;
    use super::*;
    use crate::agent::context::tests::conversation;
    use crate::graph::settings::CompactionPreset;
    use crate::llm::BackendError;

    fn turns(n: usize) -> Vec<ChatMessage> {
        let turns: Vec<_> = (0..n)
            .map(|i| ("read_file", serde_json::json!({"path": format!("f{i}")}), "x".repeat(400)))
            .collect();
        conversation(&turns)
    }

    fn inputs(provider: &dyn ChatProvider) -> Inputs<'_> {
        Inputs {
            provider,
            model: "m",
            timeout: Duration::from_secs(1),
            fixed_tokens: 10,
            files: &|_| FileList { text: "- a.rs (edited)".to_string(), every_file: true },
            file_count: 1,
            full_log: "",
            record: None,
            side_call: SideCall { window: 200_000, calibration: Calibration::default() },
        }
    }

    fn settings(mode: CompactionMode) -> ContextSettings {
        ContextSettings { compaction_mode: Some(mode), ..ContextSettings::default() }
    }

    #[tokio::test]
    async fn a_summary_replaces_old_turns_and_the_prompt_and_recent_turns_stay() {
        let provider = Summarizer(Ok("## Goal\nFix it"), Default::default());
        let mut messages = turns(8);
        let recent = messages[messages.len() - 12..].to_vec();
        let mut compactor = Compactor::new(&settings(CompactionMode::Llm), "m", 1000, 0);
        let done = compactor.compact(Trigger::Window, &mut messages, &inputs(&provider)).await.unwrap();
        assert_eq!(messages.len(), 14);
        assert_eq!(messages[0], ChatMessage::user("Do the task"));
        assert_eq!(&messages[2..], &recent[..]);
        let ChatMessage::User { content } = &messages[1] else { panic!("the block follows the prompt") };
        assert!(
            content.starts_with(llm_summary::HEADER)
                && content.ends_with("## File Operations\n- a.rs (edited)\n")
        );
        assert!(done.saved_tokens > 0);
        let Event::AgentCompactionCompleted(c) = &done.events[1] else { panic!("{:?}", done.events) };
        assert_eq!((c.original_turn_count, c.preserved_turn_count), (8, 6));
        // Too few turns: nothing to do.
        let mut short = turns(6);
        assert!(compactor.compact(Trigger::Window, &mut short, &inputs(&provider)).await.is_none());
    }

    #[tokio::test]
    async fn a_summary_gets_only_the_room_the_window_leaves_and_is_cut_to_it() {
        /// A summarizer that writes far more than it is asked for, and notes what it was asked.
        struct LongWinded(std::sync::Mutex<Vec<u32>>);
        #[async_trait::async_trait]
        impl ChatProvider for LongWinded {
            fn name(&self) -> &str {
                "test"
            }
            fn applies_reasoning_effort(&self, _model: &str) -> bool {
                false
            }
            async fn chat(
                &self,
                request: &crate::llm::chat::ChatRequest<'_>,
            ) -> Result<crate::llm::chat::ChatResponse, BackendError> {
                self.0.lock().unwrap().push(request.max_output_tokens);
                let text = format!("## Goal\n{}", "word ".repeat(2_000));
                Ok(crate::llm::chat::ChatResponse { text, ..Default::default() })
            }
        }
        let provider = LongWinded(Default::default());
        let mut messages = turns(8);
        let window = 700;
        let mut compactor = Compactor::new(&settings(CompactionMode::Llm), "m", window, 0);
        let before = compactor.estimate(&messages, 10);
        assert!(!side_call::fits(window, before));
        let done = compactor.compact(Trigger::Overflow, &mut messages, &inputs(&provider)).await.unwrap();
        // The prompt and the latest turn stay; the summary may take what the window leaves.
        let kept = compactor.estimate(&[&messages[..1], &messages[messages.len() - 2..]].concat(), 10);
        let asked = provider.0.lock().unwrap()[0];
        assert!(u64::from(asked) < side_call::room(window, kept), "{asked}");
        let after = compactor.estimate(&messages, 10);
        assert!(side_call::fits(window, after), "{after} tokens do not fit {window}");
        assert!(done.saved_tokens > 0 && done.block.unwrap().contains("## Goal\nword word"));
    }

    #[tokio::test]
    async fn a_failed_summary_leaves_a_marker_and_hybrid_falls_back_to_the_records() {
        let provider = Summarizer(Err(BackendError::Retryable("down".into())), Default::default());
        let mut messages = turns(8);
        let mut compactor = Compactor::new(&settings(CompactionMode::Llm), "m", 1000, 0);
        let done = compactor.compact(Trigger::Window, &mut messages, &inputs(&provider)).await.unwrap();
        assert!(done.block.as_deref().unwrap().starts_with(FAILED_HEADER));
        assert!(
            matches!(&done.events[1], Event::AgentCompactionFailed { fallback, .. } if fallback == "compaction_failed_marker")
        );
        let mut messages = turns(8);
        let mut compactor = Compactor::new(&settings(CompactionMode::Hybrid), "m", 1000, 0);
        let done = compactor.compact(Trigger::Window, &mut messages, &inputs(&provider)).await.unwrap();
        assert!(done.block.as_deref().unwrap().starts_with(lossless::HEADER));
    }

    #[tokio::test]
    async fn deterministic_modes_make_no_model_call() {
        let provider = Summarizer(Ok("unused"), Default::default());
        for mode in [CompactionMode::Intent, CompactionMode::Lossless, CompactionMode::Window] {
            let mut messages = turns(10);
            let mut compactor = Compactor::new(&settings(mode), "m", 1000, 0);
            compactor.log.push(intent::Operation {
                turn: 1,
                tool: "read_file".into(),
                target: "f0".into(),
                succeeded: true,
                detail: None,
            });
            let done = compactor.compact(Trigger::Turns, &mut messages, &inputs(&provider)).await.unwrap();
            assert!(done.saved_tokens > 0, "{mode:?}");
            assert_eq!(compactor.uncompacted_turns(&messages), 6, "{mode:?}");
        }
        assert!(provider.1.lock().unwrap().is_empty());
    }

    #[test]
    fn triggers_budget_warnings_and_the_anti_thrash_guard() {
        let messages = turns(8);
        let tokens = 10 + crate::agent::context::tokens(&messages);
        // The window: over the threshold (0.80 for unknown models).
        let mut compactor = Compactor::new(&ContextSettings::default(), "local", tokens, 0);
        assert_eq!(compactor.due(&messages, 10).0, Some(Trigger::Window));
        let mut roomy = Compactor::new(&ContextSettings::default(), "local", tokens * 2, 0);
        assert_eq!(roomy.due(&messages, 10).0, None);
        // A preset's turn count.
        let preset =
            ContextSettings { compaction: Some(CompactionPreset::Aggressive), ..ContextSettings::default() };
        assert_eq!(
            Compactor::new(&preset, "local", tokens * 2, 0).due(&messages, 10).0,
            Some(Trigger::Turns)
        );
        let none = ContextSettings { compaction: Some(CompactionPreset::None), ..ContextSettings::default() };
        assert_eq!(Compactor::new(&none, "local", 1, 0).due(&messages, 10).0, None);
        // The budget: one warning per cycle, and the cutover.
        let budget = ContextSettings {
            context_budget_warn: Some(100),
            context_budget_cutover: Some(300),
            ..ContextSettings::default()
        };
        let mut compactor = Compactor::new(&budget, "local", tokens * 2, 0);
        assert!(compactor.count_input(60).is_none());
        assert!(matches!(
            compactor.count_input(60),
            Some(Event::AgentContextBudgetWarning { input_tokens: 120, .. })
        ));
        assert!(compactor.count_input(60).is_none());
        assert_eq!(compactor.due(&messages, 10).0, None);
        compactor.count_input(200);
        assert_eq!(compactor.due(&messages, 10).0, Some(Trigger::Budget));
        // Anti-thrash: two compactions that saved under half hold the next one back until the
        // conversation grows by a quarter.
        let guarded = ContextSettings {
            compaction_anti_thrash_window: Some(2),
            compaction_anti_thrash_min_savings: Some(0.5),
            ..ContextSettings::default()
        };
        let mut compactor = Compactor::new(&guarded, "local", tokens, 0);
        compactor.savings.extend([0.1, 0.2]);
        let (trigger, events) = compactor.due(&messages, 10);
        assert_eq!(trigger, None);
        assert!(events.iter().any(|e| matches!(e, Event::AgentContextCompactionHeld { .. })));
        assert_eq!(compactor.due(&messages, 10).0, None);
        assert_eq!(compactor.due(&turns(11), 10).0, Some(Trigger::Window));
    }

    #[tokio::test]
    async fn folding_short_turns_into_a_block_that_does_not_grow_is_not_thrashing() {
        let provider = Summarizer(Ok("unused"), Default::default());
        let settings = ContextSettings {
            compaction: Some(CompactionPreset::Aggressive),
            ..settings(CompactionMode::Lossless)
        };
        let mut compactor = Compactor::new(&settings, "local", 100_000, 0);
        let mut messages = turns(0);
        let short: Vec<_> = (0..3)
            .map(|i| ("read_file", serde_json::json!({"path": format!("f{i}")}), "ok".to_string()))
            .collect();
        for _ in 0..30 {
            messages.extend(conversation(&short).drain(1..));
            // The block stays the same size: the tracker's list does not change.
            compactor.compact(Trigger::Turns, &mut messages, &inputs(&provider)).await.unwrap();
            assert_eq!(compactor.due(&messages, 10).0, None, "not due, and not held either");
        }
        assert!(compactor.savings.iter().all(|saved| *saved > 0.5), "{:?}", compactor.savings);
    }
}
