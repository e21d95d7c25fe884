//! One settings file as written: `.fabro/project.toml`, a `workflow.toml`, a run configuration,
//! and the `[run]` table of the fabro config file. Every value keeps its place in the file, and a
//! key the schema does not have is an error at its line with the nearest key it may have meant.

use std::collections::BTreeMap;
use std::path::Path;

use toml::Spanned;

use super::SettingsError;
use crate::agent::mcp::ServerConfig;

/// The only schema version there is (`_version = 1`, or none).
pub const VERSION: i64 = 1;

/// A settings file (project, workflow or run configuration).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerFile {
    #[serde(rename = "_version")]
    pub version: Option<Spanned<i64>>,
    pub workflow: Option<WorkflowTable>,
    pub run: Option<RunTable>,
    /// `[[hooks]]`, as the fabro config file and `fabro.toml` write them.
    #[serde(default)]
    pub hooks: Vec<toml::Value>,
}

/// `[workflow]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowTable {
    /// The workflow file, relative to the settings file's directory.
    pub graph: Option<Spanned<String>>,
}

/// `[run]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunTable {
    pub goal: Option<Spanned<String>>,
    /// A file holding the goal, relative to the settings file's directory.
    pub goal_file: Option<Spanned<String>>,
    /// Where the run works, relative to the settings file's directory.
    pub working_dir: Option<Spanned<String>>,
    pub worktree: Option<Spanned<bool>>,
    pub inputs: Option<Spanned<toml::Table>>,
    #[serde(default)]
    pub labels: BTreeMap<String, Spanned<String>>,
    pub model: Option<ModelTable>,
    pub sandbox: Option<SandboxTable>,
    pub agent: Option<AgentTable>,
    pub limits: Option<LimitsTable>,
    #[serde(default)]
    pub hooks: Vec<toml::Value>,
}

/// `[run.model]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    pub name: Option<Spanned<String>>,
    pub provider: Option<Spanned<String>>,
    pub small_model: Option<Spanned<String>>,
}

/// `[run.sandbox]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxTable {
    pub provider: Option<Spanned<String>>,
}

/// `[run.agent]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTable {
    pub permissions: Option<Spanned<String>>,
    #[serde(default)]
    pub mcps: BTreeMap<String, Spanned<ServerConfig>>,
}

/// `[run.limits]`: the run's ceilings.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsTable {
    pub max_tokens: Option<Spanned<u64>>,
    pub max_cost: Option<Spanned<f64>>,
    pub max_stage_tokens: Option<Spanned<u64>>,
    pub max_stage_cost: Option<Spanned<f64>>,
    /// Bytes, or a size such as `200MB`.
    pub max_output: Option<Spanned<toml::Value>>,
}

/// The settings keys of the fabro config file's own (flat) schema, which keep working there:
/// each is the same setting as a `[run]` key.
#[derive(Debug, Default, serde::Deserialize)]
pub struct UserFile {
    #[serde(rename = "_version")]
    pub version: Option<Spanned<i64>>,
    pub workflow: Option<WorkflowTable>,
    pub run: Option<RunTable>,
    pub default_model: Option<Spanned<String>>,
    pub default_provider: Option<Spanned<String>>,
    pub small_model: Option<Spanned<String>>,
    pub sandbox: Option<Spanned<String>>,
    pub permissions: Option<Spanned<String>>,
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, Spanned<ServerConfig>>,
}

/// Keys Fabro's settings files have that fabro does not implement: named as such, not as typos.
const FABRO_ONLY: [(&str, &str); 16] = [
    ("prepare", "run prepare steps as the first command stage of the workflow"),
    ("pull_request", "open the pull request from a command stage"),
    ("checkpoint", "fabro checkpoints every stage in the run directory"),
    ("artifacts", "stages keep their files in the run directory"),
    ("git", "fabro commits with the repository's own author settings"),
    ("execution", "use `fabro run --retro` for retrospectives"),
    ("fallbacks", "name a stage's fallback models with its `fallback_models` attribute"),
    ("preserve", "keep a run's containers with `fabro run --preserve-sandbox`"),
    ("devcontainer", "fabro's sandboxes are none, bwrap, podman and docker"),
    ("docker", "set provider = \"docker\" and the workflow's `image` attribute"),
    ("daytona", "fabro's sandboxes are none, bwrap, podman and docker"),
    ("env", "let variables into the sandbox with the `sandbox_env` attribute"),
    ("cli", "fabro's command-line settings are its flags"),
    ("server", "configure `fabro serve` with its flags"),
    ("features", "fabro has no feature flags"),
    ("project", "a project is the repository of the work directory"),
];

/// Reads `text` (the file at `path`) as `T`; a mistake is an error at its line and column.
pub fn parse<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, SettingsError> {
    toml::from_str(text).map_err(|error| error_at(path, text, &error))
}

/// A TOML or schema error of `text` (the file at `path`) at its line and column.
pub fn error_at(path: &Path, text: &str, error: &toml::de::Error) -> SettingsError {
    let (line, column) = error.span().map_or((None, None), |span| {
        let (line, column) = line_column(text, span.start);
        (Some(line), Some(column))
    });
    SettingsError::Invalid { path: path.to_path_buf(), line, column, message: explain(error.message()) }
}

/// A schema error in words a user can act on: an unknown key gets the key it may have meant,
/// or says that it is a Fabro setting fabro does not have.
fn explain(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else { return message.trim().to_string() };
    let Some((key, expected)) = rest.split_once('`') else { return message.trim().to_string() };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    if key == "version" {
        return "`version` is not a key; the schema version is `_version = 1`".to_string();
    }
    if let Some((_, instead)) = FABRO_ONLY.iter().find(|(name, _)| *name == key) {
        return format!("`{key}` is a Fabro setting that fabro does not support ({instead}); remove it");
    }
    let keys = known.iter().map(|key| format!("`{key}`")).collect::<Vec<_>>().join(", ");
    match crate::diagnostic::did_you_mean(key, known.iter().copied()) {
        Some(near) => format!("unknown key `{key}` (did you mean `{near}`?); the keys here are {keys}"),
        None => format!("unknown key `{key}`; the keys here are {keys}"),
    }
}

/// The 1-based line and column of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
    (line, column)
}

/// Refuses a schema version other than 1.
pub fn check_version(path: &Path, text: &str, version: Option<&Spanned<i64>>) -> Result<(), SettingsError> {
    match version {
        Some(version) if *version.get_ref() != VERSION => {
            let (line, column) = line_column(text, version.span().start);
            Err(SettingsError::Invalid {
                path: path.to_path_buf(),
                line: Some(line),
                column: Some(column),
                message: format!(
                    "`_version = {}` is not a schema version fabro reads; write `_version = {VERSION}`",
                    version.get_ref()
                ),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        parse::<LayerFile>(Path::new("project.toml"), text).unwrap_err().to_string()
    }

    #[test]
    fn a_misspelled_key_names_its_line_and_the_key_it_may_have_meant() {
        let error = error_of("_version = 1\n\n[run.model]\nnmae = \"m\"\n");
        assert!(error.starts_with("project.toml:4:1: unknown key `nmae` (did you mean `name`?)"), "{error}");
        let error = error_of("[rnu]\ngoal = \"x\"\n");
        assert!(error.contains(":1:2: unknown key `rnu` (did you mean `run`?)"), "{error}");
    }

    #[test]
    fn a_fabro_setting_fabro_lacks_says_so() {
        let error = error_of("[run.pull_request]\nenabled = true\n");
        assert!(error.contains("`pull_request` is a Fabro setting that fabro does not support"), "{error}");
        let error = error_of("version = 1\n");
        assert!(error.contains("the schema version is `_version = 1`"), "{error}");
    }

    #[test]
    fn values_keep_their_lines() {
        let text = "[run]\ngoal = \"ship\"\n\n[run.labels]\nteam = \"infra\"\n";
        let file: LayerFile = parse(Path::new("x.toml"), text).unwrap();
        let run = file.run.unwrap();
        let goal = run.goal.unwrap();
        assert_eq!(line_column(text, goal.span().start), (2, 8));
        assert_eq!(line_column(text, run.labels["team"].span().start).0, 5);
        assert!(check_version(Path::new("x.toml"), "_version = 2", Some(&Spanned::new(0..1, 2))).is_err());
    }
}
