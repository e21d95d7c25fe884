//! `fabro serve`'s web view of a team's runs: the board with its filters, starting a run from a
//! workflow of the `--workflows` root, the cancel / resume / rewind buttons (plain form posts,
//! refused from other sites), usage per model, and the files a run changed; over real HTTP, and
//! the whole path in headless Chromium.

use crate::common;
use crate::serve::{
    authority, chromedriver, get, headless, json, page_shows_status, request, wait_until, Server, GATED,
};

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::llm_server::{anthropic_text, openai_text, LlmServer};
use common::{commit_all_in_new_repository, fabro_command, Test};

/// A run of `workflow` in `dir` to its end (`extra` flags added); its id.
fn finished_run(dir: &Path, workflow: &str, extra: &[&str]) -> String {
    let mut args = vec!["run", workflow, "--json", "-q"];
    args.extend_from_slice(extra);
    let output = fabro_command(dir, &args).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The HTML of the board's column `key`.
fn column<'a>(board: &'a str, key: &str) -> &'a str {
    let start =
        board.find(&format!("id=\"column-{key}\"")).unwrap_or_else(|| panic!("no column {key}: {board}"));
    let rest = &board[start..];
    &rest[..rest.find("</section>").unwrap()]
}

/// A workflow of one command stage `work` running `script`.
fn one_command(script: &str) -> String {
    format!(
        "digraph one {{\n    start [shape=Mdiamond]\n    exit [shape=Msquare]\n    work [shape=parallelogram, script=\"{script}\"]\n    start -> work -> exit\n}}\n"
    )
}

#[test]
fn the_board_shows_runs_by_status_and_filters_them_by_status_label_and_text() {
    let test = Test::new()
        .workflow(&GATED.replace("BUILD_SCRIPT", "echo built"))
        .file("tidy.dot", &one_command("echo tidied"));
    let dir = test.path("");
    let output = fabro_command(&dir, &["run", "workflow.dot", "--json", "-q", "--label", "team=payments"])
        .output()
        .unwrap();
    let paused: String = serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .into();
    let tidied = finished_run(
        &dir,
        "tidy.dot",
        &["--label", "team=docs", "--goal", "Tidy the <script>alert(1)</script> docs"],
    );
    let server = Server::start(&dir, &[]);

    let (code, board) = get(&server.at("/"));
    assert_eq!(code, 200, "{board}");
    assert!(column(&board, "waiting").contains(&paused), "{board}");
    assert!(column(&board, "succeeded").contains(&tidied), "{board}");
    assert!(column(&board, "running").contains("<span class=\"count\">0</span>"), "{board}");
    assert!(!board.contains("<script>alert"), "a goal is text, never markup: {board}");
    assert!(board.contains("Tidy the &lt;script&gt;"), "{board}");
    // Labels link to their filter.
    assert!(board.contains("href=\"/?label=team%3Dpayments\""), "{board}");

    for (query, shown, hidden) in [
        ("/?status=waiting", &paused, &tidied),
        ("/?status=paused", &paused, &tidied),
        ("/?status=succeeded", &tidied, &paused),
        ("/?label=team%3Ddocs", &tidied, &paused),
        ("/?q=TIDY", &tidied, &paused),
        ("/?q=payments&label=&status=", &paused, &tidied),
    ] {
        let (code, board) = get(&server.at(query));
        assert_eq!(code, 200, "{query}: {board}");
        assert!(board.contains(shown.as_str()) && !board.contains(hidden.as_str()), "{query}: {board}");
    }
    // The filter form keeps what was asked, escaped.
    let (_, board) = get(&server.at("/?q=%22%3E%3Cb%3E"));
    assert!(board.contains("value=\"&quot;&gt;&lt;b&gt;\""), "{board}");
    assert_eq!(get(&server.at("/?label=no%20label")).0, 400);
}

/// A run whose `build` sleeps the first time (to be canceled) and not after (to be resumed).
const CANCELABLE: &str = r#"digraph cancelable {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="if [ -f once ]; then echo again; else touch once; sleep 60; fi"]
    ship [shape=parallelogram, script="echo shipped >> shipped"]
    start -> build -> ship -> exit
}
"#;

#[test]
fn cancel_resume_and_rewind_are_form_posts_from_the_run_page_and_refused_from_other_sites() {
    let test = Test::new().workflow(CANCELABLE);
    let dir = test.path("");
    let mut run = fabro_command(&dir, &["run", "workflow.dot", "-q"]).stdout(Stdio::null()).spawn().unwrap();
    let runs = dir.join(".fabro/runs");
    wait_until("the run directory", || std::fs::read_dir(&runs).is_ok_and(|mut e| e.next().is_some()));
    let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    wait_until("build starts", || dir.join("once").exists());
    let id = json(&run_dir.join("manifest.json"))["run_id"].as_str().unwrap().to_string();
    let server = Server::start(&dir, &[]);
    let own = format!("http://{}", authority(&server));
    let post = |action: &str, headers: &[(&str, &str)], form: &str| {
        request("POST", &server.at(&format!("/runs/{id}/{action}")), headers, Some(form))
    };
    let status = || json(&run_dir.join("manifest.json"))["status"].as_str().unwrap_or_default().to_string();

    // Running: a cancel button, no resume.
    let (_, page) = get(&server.at(&format!("/runs/{id}")));
    assert!(page.contains(&format!("action=\"/runs/{id}/cancel\"")), "{page}");
    assert!(!page.contains(&format!("action=\"/runs/{id}/resume\"")), "{page}");
    for headers in
        [vec![("origin", "http://evil.example")], vec![("referer", "http://evil.example/x")], vec![]]
    {
        let (code, _, body) = post("cancel", &headers, "");
        assert_eq!(code, 403, "{headers:?}: {body}");
    }
    assert_eq!(status(), "running");
    let (code, headers, body) = post("cancel", &[("origin", &own)], "");
    assert_eq!(code, 303, "{body}");
    assert_eq!(headers["location"], format!("/runs/{id}"));
    let _ = run.wait();
    assert_eq!(status(), "interrupted");

    // Interrupted: resume, refused cross-site, then from the page.
    let (_, page) = get(&server.at(&format!("/runs/{id}")));
    assert!(page.contains(&format!("action=\"/runs/{id}/resume\"")), "{page}");
    assert!(!page.contains(&format!("action=\"/runs/{id}/cancel\"")), "{page}");
    let (code, _, _) = post("resume", &[("origin", "http://evil.example")], "");
    assert_eq!(code, 403);
    assert_eq!(status(), "interrupted");
    let (code, _, body) = post("cancel", &[("origin", &own)], "");
    assert_eq!(code, 409, "nothing to cancel: {body}");
    assert!(body.contains("nothing to cancel"), "{body}");
    let (code, _, body) = post("resume", &[("origin", &own)], "");
    assert_eq!(code, 303, "{body}");
    wait_until("the resumed run succeeds and lets go", || status() == "succeeded" && !lock_held(&run_dir));
    assert_eq!(std::fs::read_to_string(dir.join("shipped")).unwrap(), "shipped\n");

    // Ended: rewind to a stage visit picked from the page, and resume from there.
    let (_, page) = get(&server.at(&format!("/runs/{id}")));
    assert!(page.contains("<option value=\"build@1\">build@1</option>"), "{page}");
    assert!(!page.contains("<option value=\"exit@1\">"), "nothing continues after the exit: {page}");
    let (code, _, _) = post("rewind", &[("origin", "http://evil.example")], "to=build%401&resume=1");
    assert_eq!(code, 403);
    assert!(!run_dir.join("rewound").exists());
    let (code, _, body) = post("rewind", &[("origin", &own)], "to=nope%401");
    assert_eq!(code, 400, "a point the run does not have: {body}");
    assert!(body.contains("nope"), "{body}");
    let (code, _, body) = post("rewind", &[("origin", &own)], "to=build%401&resume=1");
    assert_eq!(code, 303, "{body}");
    assert!(run_dir.join("rewound").is_dir());
    wait_until("the rewound run ships again", || {
        std::fs::read_to_string(dir.join("shipped")).is_ok_and(|text| text == "shipped\nshipped\n")
    });
    wait_until("the rewound run succeeds", || status() == "succeeded" && !lock_held(&run_dir));

    // With a token (off loopback), a form post without it is refused.
    drop(server);
    let server = Server::start(&dir, &["--token", "s3cret"]);
    let base = server.url.split_once('?').unwrap().0.trim_end_matches('/').to_string();
    let own = format!("http://{}", authority(&server));
    let (code, _, _) =
        request("POST", &format!("{base}/runs/{id}/rewind"), &[("origin", &own)], Some("to=build%401"));
    assert_eq!(code, 401);
}

/// Whether a process still holds the run (it is finishing its records).
fn lock_held(run_dir: &Path) -> bool {
    fabro::run_dir::lock_is_held(run_dir)
}

#[test]
fn the_run_page_shows_tokens_and_cost_per_model() {
    let workflow = r#"digraph two_models {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        ask_claude [shape=tab, prompt="Plan", llm_model="claude-sonnet-4-5"]
        ask_local [shape=tab, prompt="Do", llm_model="local-model"]
        start -> ask_claude -> ask_local -> exit
    }"#;
    let server =
        LlmServer::start(vec![anthropic_text("Planned.", 1200, 300), openai_text("Done.", 700, 50)], vec![]);
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let output = fabro_command(&dir, &["run", "workflow.dot", "--json", "-q"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        .env("ANTHROPIC_BASE_URL", server.url(""))
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let id = serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let web = Server::start(&dir, &[]);
    let (code, page) = get(&web.at(&format!("/runs/{id}")));
    assert_eq!(code, 200);
    let usage = &page[page.find("<table id=\"usage\">").unwrap_or_else(|| panic!("no usage: {page}"))..];
    let usage = &usage[..usage.find("</table>").unwrap()];
    let row = |model: &str| {
        let start =
            usage.find(&format!("<code>{model}</code>")).unwrap_or_else(|| panic!("{model}: {usage}"));
        usage[start..].split("</tr>").next().unwrap().to_string()
    };
    let claude = row("claude-sonnet-4-5");
    assert!(claude.contains("<td>1200</td><td>300</td><td>$"), "a known price has a cost: {claude}");
    // The model is the one that answered (the local server names itself `test-model`).
    let local = row("test-model");
    assert!(local.contains("<td>700</td><td>50</td><td>n/a</td>"), "an unknown price has none: {local}");
    assert!(usage.contains("<th>1900</th><th>350</th>"), "{usage}");
}

/// A stage that changes a tracked file, writes a huge one, plants a link to a key file and
/// names a file with markup.
const CHANGES: &str =
    "echo changed >> README.md; seq 1 120000 > big.txt; ln -s /etc/passwd leak; echo x > 'a<b>.txt'";

#[test]
fn files_changed_shows_the_diff_cut_when_huge_links_as_paths_and_says_why_when_it_cannot() {
    // Outside git: said so.
    let test = Test::new().workflow(&one_command(CHANGES));
    let dir = test.path("");
    let id = finished_run(&dir, "workflow.dot", &[]);
    let server = Server::start(&dir, &[]);
    let (code, page) = get(&server.at(&format!("/runs/{id}/files")));
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("is not in a git repository"), "{page}");
    drop(server);

    // In a git repository: the changes since the commit the run started from.
    let test = Test::new().workflow(&one_command(CHANGES)).file("README.md", "# project\n");
    let dir = test.path("");
    commit_all_in_new_repository(&dir);
    let head = common::git(&dir, &["rev-parse", "HEAD"]);
    let id = finished_run(&dir, "workflow.dot", &[]);
    let run_dir = dir.join(".fabro/runs").join(&id);
    assert_eq!(json(&run_dir.join("manifest.json"))["base_commit"], head.trim());
    let server = Server::start(&dir, &[]);
    let (_, run_page) = get(&server.at(&format!("/runs/{id}")));
    assert!(run_page.contains(&format!("href=\"/runs/{id}/files\"")), "{run_page}");
    let (code, page) = get(&server.at(&format!("/runs/{id}/files")));
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<code class=\"path\">README.md</code>"), "{page}");
    assert!(page.contains("<pre>+changed</pre>"), "{page}");
    // A huge diff is cut, with a note.
    assert!(page.contains("id=\"files-cut\""), "{page}");
    assert!(page.len() < 2 * 1024 * 1024, "{} bytes", page.len());
    // A link a stage planted is shown as the path it points to, never followed.
    assert!(page.contains("<code class=\"path\">leak</code>") && page.contains("symbolic link"), "{page}");
    assert!(page.contains("/etc/passwd") && !page.contains("root:"), "{page}");
    // Names are text.
    assert!(page.contains("a&lt;b&gt;.txt") && !page.contains("a<b>.txt"), "{page}");
    assert!(!run_dir.join("rewound").exists());

    // A run made before fabro recorded its starting commit: said so.
    let manifest_path = run_dir.join("manifest.json");
    let mut manifest = json(&manifest_path);
    manifest.as_object_mut().unwrap().remove("base_commit");
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let (code, page) = get(&server.at(&format!("/runs/{id}/files")));
    assert_eq!(code, 200);
    assert!(page.contains("started before fabro recorded the commit"), "{page}");
    assert_eq!(get(&server.at("/runs/nope/files")).0, 404);

    // A run in a worktree of its own: its commits on its branch, nothing of the checkout.
    let worktree_run = finished_run(&dir, "workflow.dot", &["--worktree"]);
    let (code, page) = get(&server.at(&format!("/runs/{worktree_run}/files")));
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("<code class=\"path\">README.md</code>") && page.contains("<pre>+changed</pre>"),
        "{page}"
    );
    assert!(!page.contains("without a worktree of its own"), "{page}");
}

#[test]
fn in_a_browser_a_run_is_started_its_gate_answered_and_its_changed_files_seen() {
    let Some((mut driver, port)) = chromedriver() else { return };
    // A workflow with a declared input and a human gate.
    let ship = GATED.replace("BUILD_SCRIPT", "echo {{ inputs.feature }} > feature.txt");
    let test = Test::new().file("flows/ship.dot", &ship).file("README.md", "# project\n");
    let dir = test.path("");
    commit_all_in_new_repository(&dir);
    let server = Server::start(&dir, &["--workflows", "flows"]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let outcome = runtime.block_on(async {
        let client = headless(port).await;
        let result = start_answer_and_see_files(&client, &server).await;
        let _ = client.close().await;
        result
    });
    let _ = driver.kill();
    let _ = driver.wait();
    outcome.unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("feature.txt")).unwrap(), "dark-mode\n");
    assert!(dir.join("deployed").exists(), "the answer from the page deployed");
}

async fn start_answer_and_see_files(client: &fantoccini::Client, server: &Server) -> Result<(), String> {
    use fantoccini::Locator;
    let fail = |e: fantoccini::error::CmdError| e.to_string();
    // Waits for `css` on the current page (reloading it when `reload`), at most 60 s.
    let find = |css: &'static str, reload: bool| async move {
        let started = Instant::now();
        loop {
            if let Ok(found) = client.find(Locator::Css(css)).await {
                return Ok(found);
            }
            if started.elapsed() > Duration::from_secs(60) {
                let source = client.source().await.unwrap_or_default();
                return Err(format!("never found {css}: {source}"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            if reload {
                let _ = client.refresh().await;
            }
        }
    };
    client.goto(&server.at("/")).await.map_err(fail)?;
    find("#start-run", false).await?.click().await.map_err(fail)?;
    find("#choose", false).await?.click().await.map_err(fail)?;
    find("#input-feature", false).await?.send_keys("dark-mode").await.map_err(fail)?;
    find("#labels", false).await?.send_keys("team=web").await.map_err(fail)?;
    find("#start-button", false).await?.click().await.map_err(fail)?;
    // The run's page: queued, then waiting at the gate.
    let url = client.current_url().await.map_err(fail)?;
    if !url.path().starts_with("/runs/") {
        return Err(format!("the form led to {url}"));
    }
    find("#choice-Y", true).await?.click().await.map_err(fail)?;
    page_shows_status(client, "succeeded").await?;
    // The board has it, labeled, among the succeeded.
    client.goto(&server.at("/?label=team%3Dweb")).await.map_err(fail)?;
    find("#column-succeeded li.card", false).await?;
    client.back().await.map_err(fail)?;
    find("#files-link", false).await?.click().await.map_err(fail)?;
    let mut paths = Vec::new();
    for path in client.find_all(Locator::Css("code.path")).await.map_err(fail)? {
        paths.push(path.text().await.map_err(fail)?);
    }
    if paths != ["deployed", "feature.txt"] {
        return Err(format!("the files page shows {paths:?}"));
    }
    let source = client.source().await.map_err(fail)?;
    if !source.contains("+dark-mode") || !source.contains("+deployed") {
        return Err(format!("the diff lacks the lines: {source}"));
    }
    Ok(())
}

#[test]
fn the_start_form_lists_the_workflows_asks_for_their_inputs_and_refuses_what_cannot_run() {
    let ship = GATED.replace("BUILD_SCRIPT", "echo {{ inputs.feature }} > feature.txt");
    let test = Test::new().file("flows/ship.dot", &ship).file("secret.dot", TIDY_FOR_OUTSIDE);
    let dir = test.path("");
    // Without --workflows: no form to start anything.
    let server = Server::start(&dir, &[]);
    let (_, board) = get(&server.at("/"));
    assert!(!board.contains("href=\"/runs/new\""), "{board}");
    let (_, page) = get(&server.at("/runs/new"));
    assert!(page.contains("without <code>--workflows DIR</code>"), "{page}");
    drop(server);

    let server = Server::start(&dir, &["--workflows", "flows"]);
    let own = format!("http://{}", authority(&server));
    let (_, board) = get(&server.at("/"));
    assert!(board.contains("href=\"/runs/new\""), "{board}");
    let (code, page) = get(&server.at("/runs/new?workflow=ship.dot"));
    assert_eq!(code, 200);
    assert!(page.contains("<option value=\"ship.dot\" selected>"), "{page}");
    assert!(page.contains("name=\"input.feature\""), "{page}");
    let start =
        |headers: &[(&str, &str)], form: &str| request("POST", &server.at("/runs"), headers, Some(form));
    let runs = || std::fs::read_dir(dir.join(".fabro/runs")).map_or(0, |entries| entries.count());

    let (code, _, _) = start(&[("origin", "http://evil.example")], "workflow=ship.dot&input.feature=x");
    assert_eq!(code, 403);
    assert_eq!(runs(), 0);
    let (code, _, page) = start(&[("origin", &own)], "workflow=ship.dot&input.feature=");
    assert_eq!(code, 422, "{page}");
    assert!(page.contains("no input `feature`") && page.contains("id=\"start-error\""), "{page}");
    for outside in ["..%2Fsecret.dot", "%2Fetc%2Fpasswd"] {
        let (code, _, page) = start(&[("origin", &own)], &format!("workflow={outside}"));
        assert!(code == 400 || code == 404, "{outside}: {code} {page}");
    }
    assert_eq!(runs(), 0);

    let (code, headers, page) =
        start(&[("origin", &own)], "workflow=ship.dot&input.feature=dark&labels=team%3Dweb&goal=");
    assert_eq!(code, 303, "{page}");
    let location = headers["location"].to_str().unwrap().to_string();
    let id = location.strip_prefix("/runs/").unwrap().to_string();
    let (code, page) = get(&server.at(&location));
    assert_eq!(code, 200, "{page}");
    let run_dir = dir.join(".fabro/runs").join(&id);
    wait_until("the run waits at its gate", || {
        run_dir.join("manifest.json").exists() && json(&run_dir.join("manifest.json"))["status"] == "paused"
    });
    let manifest = json(&run_dir.join("manifest.json"));
    assert_eq!(manifest["labels"]["team"], "web");
    // At its gate it goes on by an answer, not by a bare resume.
    let (_, page) = get(&server.at(&location));
    assert!(page.contains("id=\"choice-Y\"") && !page.contains("id=\"resume-button\""), "{page}");
    assert_eq!(std::fs::read_to_string(dir.join("feature.txt")).unwrap(), "dark\n");
}

/// A workflow outside the `--workflows` root.
const TIDY_FOR_OUTSIDE: &str = "digraph secret { start [shape=Mdiamond] exit [shape=Msquare] start -> exit }";

#[test]
fn pause_after_this_stage_and_fork_are_form_posts_from_the_run_page() {
    let test = Test::new().workflow(&common::three_steps("proceed"));
    let dir = test.path("");
    let mut run = fabro_command(&dir, &["run", "workflow.dot", "-q"]).stdout(Stdio::null()).spawn().unwrap();
    wait_until("two starts", || dir.join("two-started").exists());
    let runs = dir.join(".fabro/runs");
    let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let id = json(&run_dir.join("manifest.json"))["run_id"].as_str().unwrap().to_string();
    let server = Server::start(&dir, &[]);
    let own = format!("http://{}", authority(&server));
    let post = |action: &str, headers: &[(&str, &str)], form: &str| {
        request("POST", &server.at(&format!("/runs/{id}/{action}")), headers, Some(form))
    };
    let steps = || std::fs::read_to_string(dir.join("steps")).unwrap_or_default();

    // Running: pause after this stage (refused cross-site); no rewind or fork yet.
    let (_, page) = get(&server.at(&format!("/runs/{id}")));
    assert!(page.contains(&format!("action=\"/runs/{id}/interrupt\"")), "{page}");
    assert!(!page.contains(&format!("action=\"/runs/{id}/fork\"")), "{page}");
    assert!(!page.contains(&format!("action=\"/runs/{id}/rewind\"")), "{page}");
    let (code, _, _) = post("interrupt", &[("origin", "http://evil.example")], "");
    assert_eq!(code, 403);
    assert!(!run_dir.join("interrupt.request").exists());
    let (code, _, body) = post("interrupt", &[("origin", &own)], "");
    assert_eq!(code, 303, "{body}");
    std::fs::write(dir.join("proceed"), "").unwrap();
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(3), "the run paused after `two`");
    assert_eq!(steps(), "one\ntwo\n");
    let manifest = json(&run_dir.join("manifest.json"));
    assert_eq!(manifest["pause"]["kind"], "interrupt", "{manifest}");
    let (code, _, body) = post("interrupt", &[("origin", &own)], "");
    assert_eq!(code, 409, "not running: {body}");

    // Forked from right after `two` and resumed: the new run's page, the original left paused.
    let (_, page) = get(&server.at(&format!("/runs/{id}")));
    assert!(page.contains("<option value=\"two@1\">two@1</option>"), "{page}");
    assert!(page.contains(&format!("action=\"/runs/{id}/fork\"")), "{page}");
    assert!(!page.contains(&format!("action=\"/runs/{id}/interrupt\"")), "{page}");
    let (code, headers, body) = post("fork", &[("origin", &own)], "to=two%401&resume=1");
    assert_eq!(code, 303, "{body}");
    let location = headers["location"].to_str().unwrap().to_string();
    let fork_id = location.strip_prefix("/runs/").unwrap().to_string();
    assert_ne!(fork_id, id);
    let fork_dir = runs.join(&fork_id);
    wait_until("the fork succeeds", || json(&fork_dir.join("manifest.json"))["status"] == "succeeded");
    assert_eq!(steps(), "one\ntwo\nthree\n");
    assert_eq!(json(&run_dir.join("manifest.json"))["status"], "paused");
    let (code, _, body) = post("fork", &[("origin", &own)], "to=nowhere");
    assert_eq!(code, 400, "{body}");
}
