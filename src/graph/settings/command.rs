//! What a command stage sets: its script and the language it is in, how much output it may
//! write, and what happens to what it leaves running and to the status file it may write. (Wait
//! stages and human gates have their own files.)

use super::stage::text;
use super::{read, word, InvalidAttribute};
use crate::graph::Attributes;

/// The language of a command stage's script (`language`), which names the program that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Language {
    /// `shell` (or `sh`, the default): POSIX `sh -c`.
    #[default]
    Shell,
    /// `bash -c`.
    Bash,
    /// `python3 -c`.
    Python,
    /// `node -e`.
    Node,
}

impl Language {
    pub const NAMES: &'static [&'static str] = &["shell", "sh", "bash", "python", "node"];

    pub fn from_name(name: &str) -> Option<Language> {
        match name {
            "shell" | "sh" => Some(Language::Shell),
            "bash" => Some(Language::Bash),
            "python" => Some(Language::Python),
            "node" => Some(Language::Node),
            _ => None,
        }
    }

    /// The program that runs a script in this language, and the flag before the script.
    pub fn program(self) -> (&'static str, &'static str) {
        match self {
            Language::Shell => ("sh", "-c"),
            Language::Bash => ("bash", "-c"),
            Language::Python => ("python3", "-c"),
            Language::Node => ("node", "-e"),
        }
    }
}

/// The settings of a command stage.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSettings {
    /// `script` (`None` when unset or blank, an error the `command_script` rule reports).
    pub script: Option<String>,
    /// `language`: what runs the script (an invalid value is an error `fabro validate` reports).
    pub language: Result<Language, InvalidAttribute>,
    /// `max_output`: the most bytes the command may write to its logs.
    pub max_output: Option<u64>,
    /// The graph's `default_max_output` (below `--max-output`).
    pub default_max_output: Option<u64>,
    /// `keep_background=true`: what the script leaves running outlives the stage.
    pub keep_background: bool,
    /// `auto_status=true`: a script that writes no status file succeeds by its exit code alone.
    pub auto_status: bool,
}

impl CommandSettings {
    pub(super) fn parse(attributes: &Attributes, graph: &Attributes) -> CommandSettings {
        let bytes =
            |attributes: &Attributes, key: &str| attributes.integer(key).and_then(|n| u64::try_from(n).ok());
        CommandSettings {
            script: text(attributes, "script"),
            language: read(attributes, "language", |v| word(v, Language::from_name))
                .map(Option::unwrap_or_default),
            max_output: bytes(attributes, "max_output"),
            default_max_output: bytes(graph, "default_max_output"),
            keep_background: attributes.boolean("keep_background").unwrap_or(false),
            auto_status: attributes.boolean("auto_status").unwrap_or(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::super::WaitError;

    #[test]
    fn command_wait_and_gate_settings_are_read() {
        let workflow = built(
            r#"digraph G { default_max_output=100; c [shape=parallelogram, script="make", keep_background=true];
                d [shape=parallelogram, script=" ", max_output=5, auto_status=true];
                w [shape=insulator, duration=5s]; v [shape=insulator];
                h [shape=hexagon, "human.default_choice"=Y, "human.freeform"=true] }"#,
        );
        let settings = |id: &str| &workflow.node(id).unwrap().settings;
        let c = settings("c").command().unwrap();
        assert_eq!(
            (c.script.as_deref(), c.max_output, c.default_max_output),
            (Some("make"), None, Some(100))
        );
        assert!(c.keep_background && !c.auto_status);
        assert_eq!(c.language, Ok(super::Language::Shell));
        let d = settings("d").command().unwrap();
        assert_eq!((d.script.as_deref(), d.max_output, d.auto_status), (None, Some(5), true));
        assert_eq!(settings("w").wait().unwrap().duration, Ok(std::time::Duration::from_secs(5)));
        assert_eq!(settings("v").wait().unwrap().duration, Err(WaitError::Missing));
        let h = settings("h").human().unwrap();
        assert_eq!((h.default_choice.as_deref(), h.freeform), (Some("Y"), true));
    }
}
