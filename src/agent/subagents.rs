//! Sub-agents: child sessions an agent stage starts with `spawn_agent(task, model?, max_turns?)`,
//! each with its own conversation and the stage's tools and permissions in the same work
//! directory, running while the parent goes on (they advance whenever the parent waits on a model
//! call or a tool, and in `wait`). `send_input(id, text)` gives one more input (taken after what
//! it is doing), `wait(id)` returns its answer (or its error, as a failed result: never the
//! parent's failure), `close_agent(id)` stops it. At most `max_subagents` are open at once, and
//! only `max_subagent_depth` levels spawn. Each child's conversation is kept in
//! `stages/<node>/<visit>/subagents/<id>.jsonl`; its usage counts in the stage's. The parent's
//! events `agent.sub.spawned|completed|failed|closed` tell its life.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};

use super::tool_loop::{AgentRun, AgentSettings};
use super::tools::{ToolOutput, Toolbox};
use super::transcript::Transcript;
use crate::chat::{ChatMessage, ToolCall, ToolDefinition};
use crate::event::Event;
use crate::llm::chat::ChatProvider;
use crate::llm::BackendError;

pub const SPAWN: &str = "spawn_agent";
pub const SEND: &str = "send_input";
pub const WAIT: &str = "wait";
pub const CLOSE: &str = "close_agent";

/// Whether `name` is one of the sub-agent tools.
pub fn is_tool(name: &str) -> bool {
    [SPAWN, SEND, WAIT, CLOSE].contains(&name)
}

/// The sub-agent tools.
pub fn definitions() -> Vec<ToolDefinition> {
    let id = json!({"type": "string", "description": "the id spawn_agent answered"});
    vec![
        ToolDefinition {
            name: SPAWN.into(),
            description: "Start a sub-agent on a task: a child session with its own conversation and your tools, in the same work directory, working while you go on. Answers its id; get its answer with wait. model: \"small\" for the cheaper model; max_turns bounds it.".into(),
            parameters: json!({"type": "object", "properties": {"task": {"type": "string"}, "model": {"type": "string"},
                               "max_turns": {"type": "integer"}}, "required": ["task"]}),
        },
        ToolDefinition {
            name: SEND.into(),
            description: "Give a sub-agent one more input; it takes it once it has answered what it is doing.".into(),
            parameters: json!({"type": "object", "properties": {"id": id, "text": {"type": "string"}}, "required": ["id", "text"]}),
        },
        ToolDefinition {
            name: WAIT.into(),
            description: "Wait until a sub-agent has answered (its inputs included) and return its answer.".into(),
            parameters: json!({"type": "object", "properties": {"id": id}, "required": ["id"]}),
        },
        ToolDefinition {
            name: CLOSE.into(),
            description: "Stop a sub-agent (if it still works) and free its place.".into(),
            parameters: json!({"type": "object", "properties": {"id": id}, "required": ["id"]}),
        },
    ]
}

/// How a child's session ended, with its tools back.
struct Ended {
    id: String,
    toolbox: Toolbox,
    result: Result<AgentRun, BackendError>,
}

/// A child's session; it ends early (`None`) when the child is closed.
type Running<'a> = Pin<Box<dyn Future<Output = Option<Ended>> + Send + 'a>>;

/// One child.
struct Child<'a> {
    /// The model it runs on (the stage's or its small model).
    model: &'a str,
    provider: &'a dyn ChatProvider,
    max_turns: u32,
    /// Its conversation so far (the task, its turns, its answers).
    conversation: Vec<ChatMessage>,
    /// Inputs sent while it worked, taken in order when it answers.
    queued: Vec<String>,
    /// Its tools, while it does not work.
    toolbox: Option<Toolbox>,
    /// Stops the session it works in.
    stop: Option<futures::future::AbortHandle>,
    /// Its last answer, or why it failed.
    last: Result<String, String>,
}

/// The sub-agents of one agent session.
pub struct Subagents<'a> {
    provider: &'a dyn ChatProvider,
    settings: &'a AgentSettings<'a>,
    transcript: &'a Transcript<'a>,
    children: BTreeMap<String, Child<'a>>,
    running: FuturesUnordered<Running<'a>>,
    spawned: u32,
    /// Usage of the children's finished sessions not yet counted in the parent's.
    pub usage: crate::usage::Usage,
}

impl<'a> Subagents<'a> {
    /// The sub-agents of the session of `settings` on `provider`, which records in `transcript`.
    pub fn new(
        provider: &'a dyn ChatProvider,
        settings: &'a AgentSettings<'a>,
        transcript: &'a Transcript<'a>,
    ) -> Subagents<'a> {
        Subagents {
            provider,
            settings,
            transcript,
            children: BTreeMap::new(),
            running: FuturesUnordered::new(),
            spawned: 0,
            usage: crate::usage::Usage::default(),
        }
    }

    /// Whether this session offers the sub-agent tools.
    pub fn offered(&self) -> bool {
        self.settings.subagents.max_open > 0 && self.settings.subagents.depth_left > 0
    }

    /// Awaits `work` while the children work too; their ends are kept for `wait`.
    pub async fn drive<T>(&mut self, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        loop {
            let mut ended = None;
            let outcome = std::future::poll_fn(|cx| {
                if let Poll::Ready(value) = work.as_mut().poll(cx) {
                    return Poll::Ready(Some(value));
                }
                if !self.running.is_empty() {
                    if let Poll::Ready(Some(end)) = self.running.poll_next_unpin(cx) {
                        ended = Some(end);
                        return Poll::Ready(None);
                    }
                }
                Poll::Pending
            })
            .await;
            if let Some(Some(end)) = ended {
                self.ended(end);
            }
            if let Some(value) = outcome {
                return value;
            }
        }
    }

    /// Handles one sub-agent tool call; `toolbox` is the parent's (a child gets tools like them).
    pub async fn call(&mut self, call: &ToolCall, toolbox: &Toolbox) -> ToolOutput {
        let id = call.arguments["id"].as_str().unwrap_or_default().trim().to_string();
        let result = match call.name.as_str() {
            SPAWN => self.spawn(&call.arguments, toolbox),
            SEND => self.send(&id, call.arguments["text"].as_str().unwrap_or_default()),
            WAIT => self.wait(&id).await,
            CLOSE => self.close(&id),
            other => Err(format!("there is no sub-agent tool `{other}`")),
        };
        match result {
            Ok(content) => ToolOutput { content, is_error: false },
            Err(content) => ToolOutput { content, is_error: true },
        }
    }

    fn spawn(&mut self, arguments: &Value, toolbox: &Toolbox) -> Result<String, String> {
        let settings = self.settings;
        let task = arguments["task"]
            .as_str()
            .map(str::trim)
            .filter(|task| !task.is_empty())
            .ok_or("missing `task`")?;
        let limits = &settings.subagents;
        if self.children.len() >= limits.max_open {
            return Err(format!(
                "{} sub-agents are open, the most this stage has (max_subagents={}); wait for one and close it with \
                 close_agent first",
                self.children.len(),
                limits.max_open
            ));
        }
        let small = settings.small_model.as_ref();
        let wants_small = match arguments["model"].as_str().map(str::trim) {
            None | Some("") => limits.model == crate::graph::settings::SubagentModel::Small,
            Some("small") => true,
            Some(name) if name == settings.model => false,
            Some(name) if small.is_some_and(|small| small.model == name) => true,
            Some(name) => {
                return Err(format!(
                    "model `{name}` is not one a sub-agent can run on here: `{}` (this stage's){}",
                    settings.model,
                    small.map(|small| format!(" or `{}` (\"small\")", small.model)).unwrap_or_default()
                ))
            }
        };
        let (model, provider) = match (wants_small, small) {
            (false, _) => (settings.model, self.provider),
            (true, Some(small)) => (small.model, small.provider),
            (true, None) => {
                return Err(
                    "this stage has no small model (agentic_tools=false); spawn without `model`".to_string()
                )
            }
        };
        let max_turns = arguments["max_turns"]
            .as_u64()
            .and_then(|turns| u32::try_from(turns).ok())
            .filter(|turns| *turns > 0)
            .map_or(settings.max_turns, |turns| turns.min(settings.max_turns));
        let toolbox = toolbox.sibling().map_err(|error| format!("cannot start a sub-agent: {error}"))?;
        self.spawned += 1;
        let id = format!("sub-{}", self.spawned);
        self.children.insert(
            id.clone(),
            Child {
                model,
                provider,
                max_turns,
                conversation: vec![ChatMessage::user(task)],
                queued: Vec::new(),
                toolbox: Some(toolbox),
                stop: None,
                last: Ok(String::new()),
            },
        );
        self.transcript.event(Event::AgentSubSpawned {
            id: id.clone(),
            model: model.to_string(),
            task: task.to_string(),
        });
        self.start(&id);
        Ok(format!("started sub-agent {id} on {model}; get its answer with wait(id=\"{id}\")"))
    }

    /// Starts a session of `id` on its conversation.
    fn start(&mut self, id: &str) {
        let Some(child) = self.children.get_mut(id) else { return };
        let Some(toolbox) = child.toolbox.take() else { return };
        let settings = self.settings.child(child.model, child.max_turns);
        let (stop, registration) = futures::future::AbortHandle::new_pair();
        child.stop = Some(stop);
        let session = session(
            id.to_string(),
            child.provider,
            settings,
            toolbox,
            child.conversation.clone(),
            self.transcript.subagent(id),
        );
        self.running
            .push(Box::pin(async move { futures::future::Abortable::new(session, registration).await.ok() }));
    }

    fn send(&mut self, id: &str, text: &str) -> Result<String, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("missing `text`".to_string());
        }
        let child = self.child(id)?;
        if child.stop.is_some() {
            child.queued.push(text.to_string());
            return Ok(format!("{id} takes it once it has answered what it is doing"));
        }
        child.conversation.push(ChatMessage::user(text));
        self.start(id);
        Ok(format!("{id} is working on it; get its answer with wait(id=\"{id}\")"))
    }

    async fn wait(&mut self, id: &str) -> Result<String, String> {
        self.child(id)?;
        while self.children.get(id).is_some_and(|child| child.stop.is_some()) {
            match self.running.next().await {
                Some(Some(end)) => self.ended(end),
                Some(None) => {}
                None => break,
            }
        }
        let child = self.child(id)?;
        child.last.clone().map_err(|error| format!("sub-agent {id} failed: {error}"))
    }

    fn close(&mut self, id: &str) -> Result<String, String> {
        let child = self.children.remove(id).ok_or_else(|| self.unknown(id))?;
        let working = child.stop.is_some();
        if let Some(stop) = child.stop {
            // Its session ends at its next poll, its tools (and what they run) with it.
            stop.abort();
        }
        self.transcript.event(Event::AgentSubClosed { id: id.to_string(), working });
        Ok(if working { format!("stopped {id}") } else { format!("closed {id}") })
    }

    /// A child's session ended: its answer is kept, and its queued inputs start its next one.
    fn ended(&mut self, end: Ended) {
        let Some(child) = self.children.get_mut(&end.id) else { return };
        child.toolbox = Some(end.toolbox);
        child.stop = None;
        match end.result {
            Ok(run) => {
                self.usage.add(&run.usage);
                child.conversation = run.conversation;
                let answered = matches!(child.conversation.last(), Some(ChatMessage::Assistant { tool_calls, .. }) if tool_calls.is_empty());
                if !answered {
                    child.conversation.push(ChatMessage::assistant(run.text.clone(), Vec::new()));
                }
                child.last = Ok(if run.hit_turn_limit {
                    format!("{}\n\n[the sub-agent stopped at its turn limit]", run.text)
                } else {
                    run.text.clone()
                });
                self.transcript.event(Event::AgentSubCompleted {
                    id: end.id.clone(),
                    turns: run.turns,
                    input_tokens: run.usage.input_tokens,
                    output_tokens: run.usage.output_tokens,
                });
                if !child.queued.is_empty() {
                    let inputs: Vec<ChatMessage> = child.queued.drain(..).map(ChatMessage::user).collect();
                    child.conversation.extend(inputs);
                    self.start(&end.id);
                }
            }
            Err(error) => {
                child.last = Err(error.to_string());
                child.queued.clear();
                self.transcript.event(Event::AgentSubFailed { id: end.id.clone(), error: error.to_string() });
            }
        }
    }

    fn child(&mut self, id: &str) -> Result<&mut Child<'a>, String> {
        let unknown = self.unknown(id);
        self.children.get_mut(id).ok_or(unknown)
    }

    fn unknown(&self, id: &str) -> String {
        let open: Vec<&str> = self.children.keys().map(String::as_str).collect();
        if open.is_empty() {
            format!("there is no sub-agent `{id}` (none is open)")
        } else {
            format!("there is no sub-agent `{id}`; the open ones are {}", open.join(", "))
        }
    }

    /// Stops every child (the session ends).
    pub fn close_all(&mut self) {
        let ids: Vec<String> = self.children.keys().cloned().collect();
        for id in ids {
            let _ = self.close(&id);
        }
        self.running = FuturesUnordered::new();
    }
}

/// One session of a child: the agent loop on its conversation, boxed (the loop is what starts it).
fn session<'a>(
    id: String,
    provider: &'a dyn ChatProvider,
    settings: AgentSettings<'a>,
    mut toolbox: Toolbox,
    messages: Vec<ChatMessage>,
    transcript: Transcript<'a>,
) -> Pin<Box<dyn Future<Output = Ended> + Send + 'a>> {
    Box::pin(async move {
        let result = super::tool_loop::run(provider, &settings, &mut toolbox, messages, &transcript).await;
        Ended { id, toolbox, result }
    })
}
