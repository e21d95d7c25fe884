//! `fabro serve`: the web view of runs, over real HTTP on loopback, and in a real headless
//! Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`; `.ci/run` installs
//! them, and in CI a missing browser fails these tests rather than skipping them).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{fabro_command, Test};

/// A command stage, then a gate that pauses a run without a terminal.
const GATED: &str = r#"digraph gated {
    goal = "Ship it"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="BUILD_SCRIPT"]
    ship [shape=hexagon, label="Ship it?"]
    deploy [shape=parallelogram, script="echo deployed > deployed"]
    start -> build -> ship
    ship -> deploy [label="[Y] Yes"]
    ship -> exit [label="[N] No"]
    deploy -> exit
}
"#;

/// A running `fabro serve`, stopped when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Server {
        let mut all = vec!["serve", "--dir", ".fabro/runs"];
        all.extend_from_slice(args);
        let mut child = fabro_command(dir, &all).stdout(Stdio::piped()).spawn().expect("start fabro serve");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let url = first.trim().strip_prefix("fabro serve: ").expect(&first).to_string();
        Server { child, url }
    }

    /// The URL of `path` (which starts with `/`), keeping the token query when there is one.
    fn at(&self, path: &str) -> String {
        let (base, query) = self.url.split_once('?').map_or((self.url.as_str(), ""), |(b, q)| (b, q));
        let base = base.trim_end_matches('/');
        if query.is_empty() {
            format!("{base}{path}")
        } else {
            format!("{base}{path}{}{query}", if path.contains('?') { "&" } else { "?" })
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let response = reqwest::get(url).await.expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    })
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Waits (at most 30 s) for `done`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what} did not happen");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn paused_run(dir: &Path) -> String {
    let output = fabro_command(dir, &["run", "workflow.dot", "--json", "-q"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn pages_list_runs_show_a_run_and_its_stages_and_refuse_what_is_outside() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    let server = Server::start(&dir, &[]);
    assert!(server.url.starts_with("http://127.0.0.1:"), "loopback by default: {}", server.url);

    let (code, list) = get(&server.at("/"));
    assert_eq!(code, 200);
    assert!(list.contains(&format!("href=\"/runs/{id}\"")) && list.contains("paused"), "{list}");
    let (_, filtered) = get(&server.at("/?status=succeeded"));
    assert!(!filtered.contains(&id), "{filtered}");

    let (code, run) = get(&server.at(&format!("/runs/{id}")));
    assert_eq!(code, 200);
    assert!(run.contains("Waiting at <code>ship</code>:</strong> Ship it?"), "{run}");
    assert!(run.contains("value=\"deploy\"") && run.contains("[Y] Yes"), "{run}");
    assert!(run.contains(&format!("href=\"/runs/{id}/stages/build/1\"")), "{run}");
    let (code, stage) = get(&server.at(&format!("/runs/{id}/stages/build/1")));
    assert_eq!(code, 200);
    assert!(stage.contains("<pre class=\"stdout\">built</pre>"), "{stage}");
    assert!(stage.contains("<h2>status.json</h2>"), "{stage}");

    // Nothing outside a run directory: traversal, unknown runs, a link out of the run.
    for path in [
        format!("/runs/{id}/stages/..%2F..%2F..%2Fetc/1"),
        format!("/runs/{id}/stages/../1"),
        "/runs/..%2F..%2Fetc".to_string(),
        "/runs/nope/stages/build/1".to_string(),
    ] {
        let (code, body) = get(&server.at(&path));
        assert_eq!(code, 404, "{path}: {body}");
    }
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("1")).unwrap();
    std::fs::write(outside.path().join("1/status.json"), "{\"secret\": true}").unwrap();
    let run_dir = dir.join(".fabro/runs").join(&id);
    std::os::unix::fs::symlink(outside.path(), run_dir.join("stages/leak")).unwrap();
    let (code, body) = get(&server.at(&format!("/runs/{id}/stages/leak/1")));
    assert_eq!(code, 404, "{body}");
    assert!(!body.contains("secret"));
}

#[test]
fn a_token_is_required_off_loopback_and_checked_on_every_request() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    paused_run(&dir);
    // Any address other than loopback gets a token, printed in the URL.
    let server = Server::start(&dir, &["--bind", "0.0.0.0"]);
    let token = server.url.split_once("?token=").map(|(_, t)| t.to_string()).expect(&server.url);
    assert_eq!(token.len(), 32, "{token}");
    let base = server.url.split_once('?').unwrap().0.trim_end_matches('/').to_string();
    assert_eq!(get(&format!("{base}/")).0, 401);
    assert_eq!(get(&format!("{base}/?token=wrong")).0, 401);
    assert_eq!(get(&format!("{base}/?token={token}")).0, 200);
    drop(server);
    let server = Server::start(&dir, &["--token", "s3cret"]);
    assert!(server.url.ends_with("/?token=s3cret"), "{}", server.url);
    let base = server.url.split_once('?').unwrap().0.trim_end_matches('/').to_string();
    assert_eq!(get(&format!("{base}/runs")).0, 401);
}

#[test]
fn runs_and_run_files_that_are_symbolic_links_are_never_shown() {
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("id_rsa"), "-----BEGIN PRIVATE KEY----- s3cr3t").unwrap();
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    let run_dir = dir.join(".fabro/runs").join(&id);
    // A stage replaced its status.json and stdout with links to a private key.
    for name in ["status.json", "stdout.log"] {
        let file = run_dir.join("stages/build/1").join(name);
        let _ = std::fs::remove_file(&file);
        std::os::unix::fs::symlink(secret.path().join("id_rsa"), &file).unwrap();
    }
    // A run directory elsewhere, linked into the runs directory.
    let other = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo other"));
    let other_id = paused_run(&other.path(""));
    std::os::unix::fs::symlink(other.path(".fabro/runs").join(&other_id), dir.join(".fabro/runs/linked"))
        .unwrap();
    let server = Server::start(&dir, &[]);
    let (_, list) = get(&server.at("/"));
    assert!(list.contains(&id) && !list.contains(&other_id), "{list}");
    assert_eq!(get(&server.at(&format!("/runs/{other_id}"))).0, 404);
    for path in [format!("/runs/{id}"), format!("/runs/{id}/stages/build/1")] {
        let (code, page) = get(&server.at(&path));
        assert_eq!(code, 200, "{path}");
        assert!(!page.contains("s3cr3t") && !page.contains("PRIVATE KEY"), "{path}: {page}");
    }
}

/// Starts chromedriver on a free port; in CI a missing driver fails the test.
fn chromedriver() -> Option<(Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let spawned = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(error) => {
            assert!(std::env::var_os("CI").is_none(), "chromedriver is missing in CI: {error}");
            eprintln!("skipped: chromedriver is not installed (apt-get install chromium chromium-driver)");
            return None;
        }
    };
    wait_until("chromedriver listening", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    Some((child, port))
}

#[test]
fn in_a_browser_a_stage_turns_green_live_and_a_gate_is_answered_from_the_page() {
    let Some((mut driver, port)) = chromedriver() else { return };
    // `build` runs long enough for the browser to start and open the page while it runs.
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "sleep 6; echo built"));
    let dir = test.path("");
    let server = Server::start(&dir, &[]);
    // The run starts in the background; after `build` the gate pauses it.
    let mut run = fabro_command(&dir, &["run", "workflow.dot", "-q"]).spawn().unwrap();
    let runs = dir.join(".fabro/runs");
    wait_until("the run directory", || std::fs::read_dir(&runs).is_ok_and(|mut e| e.next().is_some()));
    let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let id = json(&run_dir.join("manifest.json"))["run_id"].as_str().unwrap().to_string();
    wait_until("build starts", || run_dir.join("stages/build/1").exists());

    // fantoccini's TLS (unused here: chromedriver speaks plain HTTP) needs a crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let outcome = runtime.block_on(async {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_string(),
            serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}),
        );
        let client = fantoccini::ClientBuilder::rustls()
            .expect("rustls")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("connect to chromedriver");
        let result = browse(&client, &server, &id, &run_dir).await;
        let _ = client.close().await;
        result
    });
    let _ = run.wait();
    let _ = driver.kill();
    let _ = driver.wait();
    outcome.unwrap();
    assert!(dir.join("deployed").exists(), "the answer from the page deployed");
}

async fn browse(
    client: &fantoccini::Client,
    server: &Server,
    id: &str,
    run_dir: &Path,
) -> Result<(), String> {
    use fantoccini::Locator;
    let wait = |what: &'static str| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        what
    };
    // The runs list links the run.
    client.goto(&server.at("/")).await.map_err(|e| e.to_string())?;
    client.find(Locator::Css(&format!("a[href='/runs/{id}']"))).await.map_err(|e| e.to_string())?;

    // The run page, opened while `build` runs: its row turns from running to success live.
    client.goto(&server.at(&format!("/runs/{id}"))).await.map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut seen_running = false;
    loop {
        let text = match client.find(Locator::Css("#row-build-1")).await {
            Ok(row) => row.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        seen_running |= text.contains("running");
        if text.contains("success") {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!("the build row never turned to success: {text:?}"));
        }
        wait("poll").await;
    }
    if !seen_running {
        return Err("the build row was never shown running".into());
    }
    let node_state = client
        .execute("const g=[...document.querySelectorAll('#graph g.node')].find(g=>g.querySelector('title').textContent==='build'); return g ? g.getAttribute('data-state') : 'no graph';", vec![])
        .await
        .map_err(|e| e.to_string())?;
    if node_state != serde_json::json!("completed") && node_state != serde_json::json!("no graph") {
        return Err(format!("the graph node of build is {node_state}"));
    }

    // Once paused at the gate, a reload shows the question; choosing resumes the run.
    let started = Instant::now();
    while json(&run_dir.join("manifest.json"))["status"] != "paused" {
        if started.elapsed() > Duration::from_secs(30) {
            return Err("the run never paused at the gate".into());
        }
        wait("pause").await;
    }
    client.goto(&server.at(&format!("/runs/{id}"))).await.map_err(|e| e.to_string())?;
    let yes = client.find(Locator::Css("#choice-Y")).await.map_err(|e| e.to_string())?;
    yes.click().await.map_err(|e| e.to_string())?;
    let started = Instant::now();
    loop {
        // The choice posts a form: while the next page loads there may be no #status yet.
        let status = match client.find(Locator::Css("#status")).await {
            Ok(status) => status.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if status == "succeeded" {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!("the page never showed the run succeeded: {status:?}"));
        }
        wait("succeeded").await;
    }
    // The stage page, reached from the stage table.
    client
        .find(Locator::Css("#row-build-1 a"))
        .await
        .map_err(|e| e.to_string())?
        .click()
        .await
        .map_err(|e| e.to_string())?;
    // A click on a link: the stage page may still be loading.
    let started = Instant::now();
    let stdout = loop {
        match client.find(Locator::Css("pre.stdout")).await {
            Ok(stdout) => break stdout.text().await.unwrap_or_default(),
            Err(error) if started.elapsed() > Duration::from_secs(30) => return Err(error.to_string()),
            Err(_) => wait("stage page").await,
        };
    };
    if stdout != "built" {
        return Err(format!("the stage page shows stdout {stdout:?}"));
    }
    Ok(())
}
