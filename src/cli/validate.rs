//! `fabro validate WORKFLOW|RUN.toml [--json] [--deny-warnings] [--input KEY=VALUE]... [--inputs FILE]`

use std::path::Path;

use fabro::LoadError;
use serde_json::json;

use super::exit;
use super::render::{diagnostic_json, render_diagnostics, render_load_error, summary_line};

pub fn run(
    given: &Path,
    json_output: bool,
    deny_warnings: bool,
    inputs_file: Option<&Path>,
    inputs: &[String],
) -> u8 {
    let files = fabro::config_files::ConfigFiles::from_disk();
    let target = match super::run::RunTarget::locate(given, None, &files) {
        Ok(target) => target,
        Err(message) => {
            if json_output {
                println!("{}", json!({ "valid": false, "diagnostics": [settings_json(&message)] }));
            } else {
                eprintln!("error: {message}");
            }
            return exit::INVALID;
        }
    };
    let path = target.workflow.as_path();
    // The settings a run of this target would take (layers, hooks); a problem is an error of the
    // run, reported with the workflow's own.
    let (settings, settings_error) = match target.settings(&files) {
        Ok(settings) => (settings, None),
        Err(error) => (fabro::run_settings::RunSettings::default(), Some(error.to_string())),
    };
    let inputs = match super::run::inputs_of(&settings, inputs_file, inputs) {
        Ok(inputs) => inputs,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::INVALID;
        }
    };
    let checked = match settings.loader(inputs).load_file(path) {
        Ok(checked) => checked,
        Err(error) => {
            if json_output {
                println!("{}", json!({ "valid": false, "diagnostics": [load_error_json(&error)] }));
            } else {
                eprint!("{}", render_load_error(&error));
            }
            return exit::INVALID;
        }
    };
    let source = checked.workflow.source().clone();
    let warnings = checked.diagnostics.iter().filter(|d| d.severity == fabro::Severity::Warning).count();
    let denied = deny_warnings && warnings > 0;
    let valid = !checked.has_errors() && !denied && settings_error.is_none();
    if json_output {
        let mut diagnostics: Vec<_> =
            checked.diagnostics.iter().map(|d| diagnostic_json(d, &source)).collect();
        diagnostics.extend(settings_error.as_deref().map(settings_json));
        println!("{}", json!({ "valid": valid, "diagnostics": diagnostics }));
    } else {
        print!("{}", render_diagnostics(&checked.diagnostics, &source));
        if let Some(error) = &settings_error {
            println!("error: {error}");
        }
        println!("{}", summary_line(path, &checked.diagnostics, usize::from(settings_error.is_some())));
        if deny_warnings && warnings > 0 && !checked.has_errors() {
            println!("error: --deny-warnings: {warnings} warning(s) count as errors");
        }
    }
    if valid {
        exit::SUCCESS
    } else {
        exit::INVALID
    }
}

/// A settings layer (a hook entry among them) that a run would refuse, as a diagnostic of rule
/// `settings`.
fn settings_json(message: &str) -> serde_json::Value {
    json!({
        "rule": "settings",
        "severity": "error",
        "message": message,
        "node_id": null,
        "edge": null,
        "line": null,
        "column": null,
        "fix": null,
    })
}

fn load_error_json(error: &LoadError) -> serde_json::Value {
    let (line, column, message, fix) = match error {
        LoadError::Read { .. } => (None, None, error.to_string(), None),
        LoadError::Syntax { error, file } => {
            let location = file.location(error.span.start);
            (Some(location.line), Some(location.column), error.to_string(), error.help())
        }
    };
    json!({
        "rule": "syntax",
        "severity": "error",
        "message": message,
        "node_id": null,
        "edge": null,
        "line": line,
        "column": column,
        "fix": fix,
    })
}
