//! The web view's form to start a run (`/runs/new`): pick a workflow under the service's
//! `--workflows` root, then fill the inputs it reads (`{{ inputs.KEY }}`), a goal and labels.
//! Two plain forms, no script: choosing a workflow is a GET that shows its inputs; starting is a
//! POST to `/runs` that queues the run and redirects to its page.

use std::fmt::Write as _;
use std::path::Path;

use crate::report::run_page::escape;

/// The form field of input `name`: `input.<name>`.
pub const INPUT_PREFIX: &str = "input.";

/// The page to start a run: the workflows under `root`, and when one is `chosen`, its form.
/// `error`: why the last attempt was refused, shown above the form.
pub fn start_page(root: Option<&Path>, chosen: Option<&str>, error: Option<&str>) -> String {
    let mut body = String::from("<h1>Start a run</h1>\n");
    if let Some(error) = error {
        let _ = writeln!(body, "<pre class=\"failed\" id=\"start-error\">{}</pre>", escape(error));
    }
    let Some(root) = root else {
        body.push_str(
            "<p class=\"note\">This service was started without <code>--workflows DIR</code>: it starts no \
             workflow from the web view. Start it with <code>--workflows</code> naming the directory of the \
             workflows it may run.</p>\n",
        );
        return super::pages::page("start a run", &body);
    };
    let workflows = super::actions::workflows_under(root);
    if workflows.is_empty() {
        let _ = writeln!(
            body,
            "<p class=\"note\">There is no workflow (<code>*.dot</code>) under <code>{}</code>.</p>",
            escape(&root.display().to_string())
        );
        return super::pages::page("start a run", &body);
    }
    body.push_str(
        "<form id=\"pick-workflow\" method=\"get\" action=\"/runs/new\">\n<label>Workflow <select name=\"workflow\">\n",
    );
    for name in &workflows {
        let selected = if chosen == Some(name.as_str()) { " selected" } else { "" };
        let _ = writeln!(body, "<option value=\"{0}\"{selected}>{0}</option>", escape(name));
    }
    body.push_str("</select></label>\n<button type=\"submit\" id=\"choose\">Choose</button>\n</form>\n");
    let Some(chosen) = chosen.filter(|name| workflows.iter().any(|known| known == name)) else {
        return super::pages::page("start a run", &body);
    };
    let text = super::actions::workflow_under(root, chosen)
        .ok()
        .and_then(|path| crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input).ok())
        .unwrap_or_default();
    let _ = writeln!(
        body,
        "<form id=\"start\" method=\"post\" action=\"/runs\">\n<h2><code>{0}</code></h2>\n<input type=\"hidden\" name=\"workflow\" value=\"{0}\">",
        escape(chosen)
    );
    let inputs = crate::graph::inputs::referenced(&text);
    if !inputs.is_empty() {
        body.push_str("<fieldset><legend>Inputs</legend>\n");
        for name in &inputs {
            let _ = writeln!(
                body,
                "<p><label for=\"input-{0}\"><code>{0}</code></label><br><input id=\"input-{0}\" name=\"{INPUT_PREFIX}{0}\" size=\"60\" required></p>",
                escape(name)
            );
        }
        body.push_str("</fieldset>\n");
    }
    body.push_str(
        "<p><label for=\"goal\">Goal (leave empty for the workflow's own)</label><br><textarea id=\"goal\" name=\"goal\" rows=\"3\" cols=\"60\"></textarea></p>\n\
         <p><label for=\"labels\">Labels, <code>key=value</code>, one per line</label><br><textarea id=\"labels\" name=\"labels\" rows=\"2\" cols=\"60\"></textarea></p>\n\
         <p><label><input type=\"checkbox\" name=\"simulate\" value=\"1\"> Simulate LLM stages (no provider is called)</label></p>\n\
         <button type=\"submit\" id=\"start-button\">Start the run</button>\n</form>\n",
    );
    super::pages::page("start a run", &body)
}

/// The form `/runs/new` posts, as a run request: its fields are `workflow`, `goal`, `labels`
/// (`key=value` a line), `simulate` and one `input.<name>` per input. Empty fields are left out.
pub fn run_request(fields: &[(String, String)]) -> Result<super::actions::RunRequest, String> {
    let mut request = super::actions::RunRequest::default();
    for (name, value) in fields {
        let value = value.trim();
        match name.as_str() {
            "workflow" => request.workflow = Some(value.to_string()),
            "goal" if !value.is_empty() => request.goal = Some(value.to_string()),
            "simulate" => request.simulate = !value.is_empty(),
            "labels" => {
                for line in value.lines().map(str::trim).filter(|line| !line.is_empty()) {
                    let (key, value) = crate::run_dir::parse_label(line)
                        .map_err(|problem| format!("label `{line}`: {problem}"))?;
                    request.labels.insert(key, value);
                }
            }
            _ => {
                if let Some(input) = name.strip_prefix(INPUT_PREFIX) {
                    if !crate::graph::inputs::is_input_name(input) {
                        return Err(format!("`{input}` is not an input name"));
                    }
                    if !value.is_empty() {
                        request
                            .inputs
                            .insert(input.to_string(), serde_json::Value::String(value.to_string()));
                    }
                }
            }
        }
    }
    if request.workflow.as_deref().is_none_or(str::is_empty) {
        return Err("choose a workflow".into());
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()
    }

    #[test]
    fn the_form_becomes_a_run_request_and_bad_fields_are_refused() {
        let request = run_request(&fields(&[
            ("workflow", "ship.dot"),
            ("input.ticket", " PAY-12 "),
            ("input.empty", ""),
            ("goal", ""),
            ("labels", "team=payments\n\nowner=ana\n"),
            ("simulate", "1"),
        ]))
        .unwrap();
        assert_eq!(request.workflow.as_deref(), Some("ship.dot"));
        assert_eq!(request.inputs.len(), 1);
        assert_eq!(request.inputs["ticket"], "PAY-12");
        assert_eq!(request.goal, None);
        assert_eq!(request.labels["owner"], "ana");
        assert!(request.simulate);
        assert!(run_request(&fields(&[("workflow", "x.dot"), ("labels", "no label")])).is_err());
        assert!(run_request(&fields(&[("workflow", "x.dot"), ("input.a-b", "1")])).is_err());
        assert!(run_request(&fields(&[("goal", "g")])).is_err());
    }

    #[test]
    fn the_form_asks_for_each_input_the_workflow_reads() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("ship.dot"),
            "digraph ship { a [shape=parallelogram, script=\"echo {{ inputs.ticket }}\"] }",
        )
        .unwrap();
        let page = start_page(Some(root.path()), Some("ship.dot"), Some("<bad>"));
        assert!(page.contains("name=\"input.ticket\""), "{page}");
        assert!(page.contains("&lt;bad&gt;"), "{page}");
        let page = start_page(Some(root.path()), Some("../etc/passwd"), None);
        assert!(!page.contains("id=\"start\""), "{page}");
        assert!(start_page(None, None, None).contains("--workflows"));
    }
}
