//! `fabro settings [WORKFLOW|RUN.toml] [--workdir DIR] [--json]`: the settings a run would take
//! from its layers (user config, project, workflow, run configuration, environment), each with
//! the file and line it came from. Command-line flags are over all of them.

use std::path::PathBuf;

use fabro::config_files::ConfigFiles;
use fabro::run_settings::{Layer, RunSettings, Sources};
use serde_json::json;

use super::exit;

#[derive(clap::Args)]
pub struct SettingsArgs {
    /// The workflow (.dot) or run configuration (.toml) a run would be started with; without
    /// it, the user and project layers alone.
    target: Option<PathBuf>,
    /// The work directory the run would have (its repository holds `.fabro/project.toml`).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Print `{"files": [...], "settings": [...], "hooks": [...]}` instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: SettingsArgs) -> u8 {
    let files = ConfigFiles::from_disk();
    let settings = match settings_of(&args, &files) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("error: {message}");
            return exit::INVALID;
        }
    };
    if args.json {
        return super::print(&format!("{:#}\n", as_json(&settings)));
    }
    super::print(&as_text(&settings))
}

fn settings_of(args: &SettingsArgs, files: &ConfigFiles) -> Result<RunSettings, String> {
    match &args.target {
        Some(target) => {
            let target = super::run::RunTarget::locate(target, args.workdir.as_deref(), files)?;
            target.settings(files).map_err(|error| error.to_string())
        }
        None => {
            let work_dir = match &args.workdir {
                Some(dir) => dir.clone(),
                None => std::env::current_dir()
                    .map_err(|error| format!("cannot read the current directory: {error}"))?,
            };
            fabro::run_settings::load(&Sources::for_run(&work_dir, None, None), files)
                .map_err(|error| error.to_string())
        }
    }
}

fn as_text(settings: &RunSettings) -> String {
    let mut out = String::from("layers (lowest first; flags on the command line are over all):\n");
    for (layer, path, exists) in &settings.files {
        let state = if *exists { "" } else { "  (none)" };
        out.push_str(&format!("  {:<12}{}{state}\n", layer.as_str(), path.display()));
    }
    out.push_str(&format!("  {:<12}FABRO_LLM_MODEL, FABRO_LLM_PROVIDER\n", Layer::Environment.as_str()));
    let entries = settings.entries();
    if entries.is_empty() && settings.hooks.is_empty() {
        out.push_str("\nno settings: every value is fabro's default\n");
        return out;
    }
    out.push('\n');
    let width = entries.iter().map(|(key, value, _)| key.len() + value.len() + 3).max().unwrap_or(0);
    for (key, value, origin) in &entries {
        let assignment = format!("{key} = {value}");
        let line = origin.line.map(|line| format!(":{line}")).unwrap_or_default();
        let written = if origin.key == *key { String::new() } else { format!(" ({})", origin.key) };
        out.push_str(&format!(
            "{assignment:<width$}  # {} {}{line}{written}\n",
            origin.layer.as_str(),
            origin.source
        ));
    }
    for hook in settings.hooks.hooks() {
        out.push_str(&format!("hook `{}` on {}  # {}\n", hook.name, hook.event, hook.file.display()));
    }
    out
}

fn as_json(settings: &RunSettings) -> serde_json::Value {
    let files: Vec<_> = settings
        .files
        .iter()
        .map(|(layer, path, exists)| json!({ "layer": layer, "path": path, "exists": exists }))
        .collect();
    let values: Vec<_> = settings
        .entries()
        .into_iter()
        .map(|(key, value, origin)| {
            let value: serde_json::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
                .ok()
                .and_then(|table| table.get("v").and_then(|v| serde_json::to_value(v).ok()))
                .unwrap_or(serde_json::Value::String(value));
            json!({ "key": key, "value": value, "origin": origin })
        })
        .collect();
    let hooks: Vec<_> = settings
        .hooks
        .hooks()
        .iter()
        .map(|hook| json!({ "name": hook.name, "event": hook.event, "file": hook.file }))
        .collect();
    json!({ "files": files, "settings": values, "hooks": hooks })
}
