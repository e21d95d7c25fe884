//! Tool permissions: what an agent stage's tools may do without asking (`permissions=` on the
//! node, the graph's default, `--permissions`, the config file; `full` when none says).
//!
//! - `read-only`: reading and searching (read_file, list_dir, glob, grep, the agentic wrappers
//!   that only read the work directory).
//! - `read-write`: also write_file and edit_file.
//! - `full`: also the shell, the web (web_fetch, web_search, agentic_fetch_url), MCP tools and
//!   any other tool.
//!
//! A call above the stage's level is put to the person at the terminal (allow once, allow for the
//! rest of the stage, deny); without one it is denied, so such tools are not offered to the model
//! at all (it is told what its level leaves out). `--auto-approve` answers gates, never this. A
//! denial goes back to the model as the tool's result.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::graph::settings::PermissionLevel as Level;
use crate::graph::Choice;
use crate::interview::{Answer, Interviewer, Question};

/// The level a call of `tool` needs.
pub fn needed_for(tool: &str) -> Level {
    match tool {
        "read_file" | "read_many_files" | "list_dir" | "glob" | "grep" | super::skills::TOOL => {
            Level::ReadOnly
        }
        super::web::WEB_FETCH | super::web::WEB_SEARCH | super::agentic_tools::FETCH_URL => Level::Full,
        _ if super::agentic_tools::is_wrapper(tool) => Level::ReadOnly,
        "write_file" | "edit_file" | "apply_patch" => Level::ReadWrite,
        _ => Level::Full,
    }
}

/// How a call above the level was let through, or why it was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Within the stage's level.
    Within,
    /// The person allowed this call.
    AllowedOnce,
    /// The person allowed this tool for the rest of the stage.
    AllowedForStage,
    /// The person allowed this tool for the rest of the stage earlier.
    AllowedEarlier,
    /// Denied, and why (for the model and the event).
    Denied(String),
}

/// One stage's permission check: its level, the person who may widen it, and the tools allowed
/// for the rest of the stage.
#[derive(Clone, Default)]
pub struct Permissions {
    pub level: Level,
    person: Option<Arc<dyn Interviewer>>,
    allowed: BTreeSet<String>,
}

impl Permissions {
    pub fn new(level: Level, person: Option<Arc<dyn Interviewer>>) -> Permissions {
        Permissions { level, person, allowed: BTreeSet::new() }
    }

    /// The level the model is limited to when no one can allow more: tools above it are not
    /// offered. `None` at `full`, or when a person at a terminal may allow a call.
    pub fn withheld_above(&self) -> Option<Level> {
        (self.level < Level::Full && self.person.is_none()).then_some(self.level)
    }

    /// Whether `tool` is offered to the model.
    pub fn offers(&self, tool: &str) -> bool {
        self.withheld_above().is_none_or(|level| needed_for(tool) <= level)
    }

    /// Whether the person allowed `tool` for the rest of the stage.
    fn allows(&self, tool: &str) -> bool {
        self.allowed.contains(tool)
    }

    /// Whether stage `node` may call `tool(arguments)`, asking the person when it is above the
    /// level.
    pub async fn check(&mut self, node: &str, tool: &str, arguments: &Value) -> Verdict {
        let needed = needed_for(tool);
        if needed <= self.level {
            return Verdict::Within;
        }
        if self.allows(tool) {
            return Verdict::AllowedEarlier;
        }
        let refused = format!(
            "Permission denied: `{tool}` needs permissions={} and stage `{node}` runs with permissions={}",
            needed.as_str(),
            self.level.as_str()
        );
        let Some(person) = &self.person else {
            return Verdict::Denied(format!(
                "{refused}, with no one at a terminal to allow it. The call did not run; do the work with the \
                 tools this level allows, or say what you could not do."
            ));
        };
        let text = format!(
            "Stage `{node}` (permissions={}) wants to call `{tool}` {}",
            self.level.as_str(),
            crate::llm::http::excerpt(&arguments.to_string(), 300)
        );
        // What each answer does, shown after its label.
        let for_stage = format!("every `{tool}` call of this stage runs");
        let choices = [
            Choice::from_edge(Some("[O] Allow once"), "this call runs"),
            Choice::from_edge(Some("[S] Allow for this stage"), &for_stage),
            Choice::from_edge(Some("[D] Deny"), "the model is told it was denied"),
        ];
        let question =
            Question { gate_id: node, text: &text, choices: &choices, timeout: None, freeform: false };
        match person.ask(&question).await {
            Answer::Choice(0) => Verdict::AllowedOnce,
            Answer::Choice(1) => {
                self.allowed.insert(tool.to_string());
                Verdict::AllowedForStage
            }
            _ => Verdict::Denied(format!(
                "{refused}, and the person at the terminal denied it. The call did not run; do the work another \
                 way or say what you could not do."
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Answers(std::sync::Mutex<Vec<Answer>>);

    #[async_trait::async_trait]
    impl Interviewer for Answers {
        async fn ask(&self, _question: &Question<'_>) -> Answer {
            self.0.lock().unwrap().remove(0)
        }
    }

    #[test]
    fn tools_need_their_tier() {
        assert_eq!(needed_for("grep"), Level::ReadOnly);
        assert_eq!(needed_for("edit_file"), Level::ReadWrite);
        assert_eq!(needed_for("shell"), Level::Full);
        assert_eq!(needed_for("agentic_grep"), Level::ReadOnly);
        for web in ["web_fetch", "web_search", "agentic_fetch_url"] {
            assert_eq!(needed_for(web), Level::Full, "{web}");
        }
        assert_eq!(needed_for("mcp__files__read_text_file"), Level::Full);
        assert_eq!(needed_for("something_new"), Level::Full);
        assert!(crate::graph::settings::PERMISSION_LEVELS
            .iter()
            .all(|name| Level::parse(name).map(Level::as_str) == Some(name)));
    }

    #[test]
    fn tools_above_the_level_are_offered_only_when_someone_can_allow_them() {
        let alone = Permissions::new(Level::ReadWrite, None);
        assert_eq!(alone.withheld_above(), Some(Level::ReadWrite));
        assert!(alone.offers("write_file") && !alone.offers("shell") && !alone.offers("mcp__a__b"));
        let full = Permissions::new(Level::Full, None);
        assert_eq!(full.withheld_above(), None);
        assert!(full.offers("shell"));
        let person: Arc<dyn Interviewer> = Arc::new(Answers(std::sync::Mutex::new(Vec::new())));
        let asked = Permissions::new(Level::ReadOnly, Some(person));
        assert_eq!(asked.withheld_above(), None);
        assert!(asked.offers("shell"));
    }

    #[tokio::test]
    async fn a_person_allows_once_or_for_the_stage_and_no_one_denies() {
        let args = serde_json::json!({"command": "ls"});
        let mut alone = Permissions::new(Level::ReadOnly, None);
        assert_eq!(alone.check("n", "glob", &args).await, Verdict::Within);
        assert!(
            matches!(alone.check("n", "write_file", &args).await, Verdict::Denied(why) if why.contains("permissions=read-write"))
        );
        let person =
            Answers(std::sync::Mutex::new(vec![Answer::Choice(0), Answer::Choice(1), Answer::Choice(2)]));
        let mut asked = Permissions::new(Level::ReadWrite, Some(Arc::new(person)));
        assert_eq!(asked.check("n", "shell", &args).await, Verdict::AllowedOnce);
        assert_eq!(asked.check("n", "shell", &args).await, Verdict::AllowedForStage);
        assert_eq!(asked.check("n", "shell", &args).await, Verdict::AllowedEarlier);
        assert!(matches!(asked.check("n", "mcp__a__b", &args).await, Verdict::Denied(_)));
    }
}
