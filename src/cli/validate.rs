//! `fabro validate WORKFLOW [--json] [--deny-warnings] [--input KEY=VALUE]... [--inputs FILE]`

use std::path::Path;

use fabro::{LoadError, Loader};
use serde_json::json;

use super::exit;
use super::render::{diagnostic_json, render_diagnostics, render_load_error, summary_line};

pub fn run(
    path: &Path,
    json_output: bool,
    deny_warnings: bool,
    inputs_file: Option<&Path>,
    inputs: &[String],
) -> u8 {
    let inputs = match fabro::graph::inputs::gather(inputs_file, inputs) {
        Ok(inputs) => inputs,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::INVALID;
        }
    };
    let checked = match Loader::new().with_inputs(inputs).load_file(path) {
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
    // The lifecycle hooks a run of this workflow would take (config file and fabro.toml).
    let hooks = fabro::lifecycle_hooks::LifecycleHooks::for_workflow(
        path,
        &fabro::config_files::ConfigFiles::from_disk(),
    )
    .err();
    let valid = !checked.has_errors() && !denied && hooks.is_none();
    if json_output {
        let mut diagnostics: Vec<_> =
            checked.diagnostics.iter().map(|d| diagnostic_json(d, &source)).collect();
        diagnostics.extend(hooks.map(|error| hooks_json(&error)));
        println!("{}", json!({ "valid": valid, "diagnostics": diagnostics }));
    } else {
        print!("{}", render_diagnostics(&checked.diagnostics, &source));
        if let Some(error) = &hooks {
            println!("error: {error}");
        }
        println!("{}", summary_line(path, &checked.diagnostics));
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

/// A `[[hooks]]` entry that a run would refuse, as a diagnostic of rule `hooks`.
fn hooks_json(error: &fabro::lifecycle_hooks::HookConfigError) -> serde_json::Value {
    json!({
        "rule": "hooks",
        "severity": "error",
        "message": error.to_string(),
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
