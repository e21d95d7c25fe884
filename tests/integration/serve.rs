//! `fabro serve`: the web view of runs, over real HTTP on loopback, and in a real headless
//! Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`; `scripts/test` installs
//! them, and in CI a missing browser fails these tests rather than skipping them).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{fabro_command, Test};

/// A command stage, then a gate that pauses a run without a terminal.
pub(crate) const GATED: &str = r#"digraph gated {
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
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Server {
    pub(crate) fn start(dir: &Path, args: &[&str]) -> Server {
        Server::start_with(dir, args, &[])
    }

    /// With environment variables `env` set for the server.
    fn start_with(dir: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Server {
        let mut all = vec!["serve", "--dir", ".fabro/runs"];
        all.extend_from_slice(args);
        let mut command = fabro_command(dir, &all);
        command.envs(env.iter().copied());
        let mut child = command.stdout(Stdio::piped()).spawn().expect("start fabro serve");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let url = first.trim().strip_prefix("fabro serve: ").expect(&first).to_string();
        Server { child, url }
    }

    /// The URL of `path` (which starts with `/`), keeping the token query when there is one.
    pub(crate) fn at(&self, path: &str) -> String {
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

pub(crate) fn get(url: &str) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let response = reqwest::get(url).await.expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    })
}

/// `METHOD url` with `headers` (a `Host` among them replaces the real one), redirects not
/// followed: the status, the response headers and the body.
pub(crate) fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    form: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let mut builder = client.request(method.parse().unwrap(), url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(form) = form {
            builder =
                builder.header("content-type", "application/x-www-form-urlencoded").body(form.to_string());
        }
        let response = builder.send().await.expect("request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap_or_default())
    })
}

/// `host:port` of the server.
pub(crate) fn authority(server: &Server) -> String {
    server.url.trim_start_matches("http://").split('/').next().unwrap().to_string()
}

fn answers_files(run_dir: &Path) -> usize {
    std::fs::read_dir(run_dir)
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().file_name().to_string_lossy().starts_with("answers-"))
        .count()
}

pub(crate) fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Waits (at most 30 s) for `done`.
pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what} did not happen");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn paused_run(dir: &Path) -> String {
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
fn the_runs_list_filters_by_label() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let labeled = |label: &str| {
        let output =
            fabro_command(&dir, &["run", "workflow.dot", "--json", "-q", "--label", label]).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (payments, search) = (labeled("team=payments"), labeled("team=search"));
    let server = Server::start(&dir, &[]);
    let (code, list) = get(&server.at("/?label=team%3Dpayments"));
    assert_eq!(code, 200);
    assert!(list.contains(&payments) && !list.contains(&search), "{list}");
    assert_eq!(get(&server.at("/?label=no%20label")).0, 400);
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
fn pages_of_other_sites_can_neither_answer_a_gate_nor_read_through_another_host_name() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    let run_dir = dir.join(".fabro/runs").join(&id);
    let server = Server::start(&dir, &[]);
    let own = authority(&server);
    let answer = server.at(&format!("/runs/{id}/answer"));
    let own_origin = format!("http://{own}");
    let evil_host = format!("evil.example:{}", own.rsplit_once(':').unwrap().1);

    // DNS rebinding: a page of evil.example whose name now points at 127.0.0.1.
    let (code, _, body) = request("GET", &server.at("/"), &[("host", &evil_host)], None);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("is not a host name this server serves"), "{body}");
    for headers in [
        vec![("host", evil_host.as_str()), ("origin", "http://evil.example")],
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        vec![("referer", "http://evil.example/page")],
        vec![],
    ] {
        let (code, _, body) = request("POST", &answer, &headers, Some("answer=deploy"));
        assert_eq!(code, 403, "{headers:?}: {body}");
        assert_eq!(answers_files(&run_dir), 0, "{headers:?}");
    }
    let (_, _, body) = request("POST", &answer, &[("origin", "http://evil.example")], Some("answer=deploy"));
    assert!(body.contains("must come from a page of this server"), "{body}");
    assert_eq!(json(&run_dir.join("manifest.json"))["status"], "paused");

    // Every response carries the security headers, and the pages hold no inline script.
    for (path, expected) in [
        ("/".to_string(), 200),
        (format!("/runs/{id}"), 200),
        (format!("/runs/{id}/stages/build/1"), 200),
        ("/fabro.js".to_string(), 200),
        ("/runs/nope".to_string(), 404),
    ] {
        let (code, headers, body) = request("GET", &server.at(&path), &[], None);
        assert_eq!(code, expected, "{path}: {body}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["referrer-policy"], "same-origin");
        if body.contains("<html") {
            assert!(!body.replace("<script src=\"/fabro.js\"></script>", "").contains("<script"), "{body}");
        }
    }

    // The server's own page posts with its Origin (or, without one, its Referer).
    let (code, _, body) =
        request("POST", &answer, &[("referer", &format!("{own_origin}/runs/{id}"))], Some("answer=nope"));
    assert_eq!(code, 400, "{body}");
    let (code, _, body) = request("POST", &answer, &[("origin", &own_origin)], Some("answer=deploy"));
    assert_eq!(code, 303, "{body}");
    wait_until("the answered run ends", || json(&run_dir.join("manifest.json"))["status"] == "succeeded");
}

#[test]
fn a_javascript_link_in_a_runs_workflow_never_reaches_the_run_page() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    // A stage rewrote the stored workflow: nothing validates it before it is drawn.
    let stored = dir.join(".fabro/runs").join(&id).join("workflow.dot");
    let text = std::fs::read_to_string(&stored).unwrap().replacen(
        "build [",
        "build [URL=\"javascript:alert(document.cookie)\", href=\"data:text/html,x\", image=\"/etc/passwd\", ",
        1,
    );
    std::fs::write(&stored, text).unwrap();
    let server = Server::start(&dir, &[]);
    let (code, run) = get(&server.at(&format!("/runs/{id}")));
    assert_eq!(code, 200);
    if std::process::Command::new("dot").arg("-V").output().is_ok() {
        assert!(run.contains("<svg"), "{run}");
    }
    for hostile in ["javascript:", "data:text", "/etc/passwd"] {
        assert!(!run.contains(hostile), "{hostile} in {run}");
    }
}

#[test]
fn a_graphviz_that_never_finishes_leaves_the_run_page_with_the_plain_list() {
    use std::os::unix::fs::PermissionsExt;
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    // A `dot` that hangs, first on PATH for the server.
    let bin = dir.join("hanging-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("dot"), "#!/bin/sh\nexec sleep 120\n").unwrap();
    std::fs::set_permissions(bin.join("dot"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let server = Server::start_with(&dir, &[], &[("PATH", path.as_os_str())]);
    let started = Instant::now();
    let (code, run) = get(&server.at(&format!("/runs/{id}")));
    let took = started.elapsed();
    eprintln!("run page with a hanging dot answered in {took:?}");
    assert_eq!(code, 200);
    assert!(run.contains("took over 10 s") && !run.contains("<svg"), "{run}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // Meanwhile other pages are served.
    assert_eq!(get(&server.at("/")).0, 200);
}

#[test]
fn thirty_answers_at_once_resume_the_run_once_and_the_others_are_told_why() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    let run_dir = dir.join(".fabro/runs").join(&id);
    let server = Server::start(&dir, &[]);
    let origin = format!("http://{}", authority(&server));
    let answer = server.at(&format!("/runs/{id}/answer"));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let replies: Vec<(u16, String)> = runtime.block_on(async {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let posts = (0..30).map(|_| {
            let request = client
                .post(&answer)
                .header("origin", &origin)
                .header("content-type", "application/x-www-form-urlencoded")
                .body("answer=deploy");
            async move {
                let response = request.send().await.expect("POST");
                (response.status().as_u16(), response.text().await.unwrap_or_default())
            }
        });
        futures::future::join_all(posts).await
    });
    let resumed = replies.iter().filter(|(code, _)| *code == 303).count();
    assert_eq!(resumed, 1, "{replies:?}");
    for (code, body) in replies.iter().filter(|(code, _)| *code != 303) {
        assert_eq!(*code, 409, "{body}");
        assert!(body.contains("already answered") || body.contains("not waiting"), "{body}");
    }
    wait_until("the run ends", || json(&run_dir.join("manifest.json"))["status"] == "succeeded");
    assert_eq!(answers_files(&run_dir), 1);
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    assert_eq!(events.matches("\"run.resumed\"").count(), 1, "{events}");
}

#[test]
fn a_token_with_reserved_characters_is_percent_encoded_in_the_printed_url() {
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    paused_run(&dir);
    let server = Server::start(&dir, &["--token", "a&b c%"]);
    assert!(server.url.ends_with("/?token=a%26b%20c%25"), "{}", server.url);
    assert_eq!(get(&server.url).0, 200, "the printed URL authenticates");
    let base = server.url.split_once('?').unwrap().0.to_string();
    assert_eq!(get(&format!("{base}?token=a")).0, 401);
    assert_eq!(get(&base).0, 401);
}

#[test]
fn connections_that_never_finish_their_headers_are_closed_while_others_are_served() {
    use std::io::{Read, Write};
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    paused_run(&dir);
    let server = Server::start(&dir, &[]);
    let own = authority(&server);
    // 50 loopback clients: half send part of their headers, half nothing at all.
    let started = Instant::now();
    let mut slow: Vec<std::net::TcpStream> = (0..50)
        .map(|i| {
            let mut stream = std::net::TcpStream::connect(&own).unwrap();
            if i % 2 == 0 {
                stream.write_all(format!("GET / HTTP/1.1\r\nHost: {own}\r\n").as_bytes()).unwrap();
            }
            stream
        })
        .collect();
    let served = Instant::now();
    let (code, _) = get(&server.at("/"));
    assert_eq!(code, 200);
    let served_in = served.elapsed();
    assert!(served_in < Duration::from_secs(3), "another client waited {served_in:?}");
    for stream in &mut slow {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        // The server closes the connection (end of stream), answering nothing.
        stream.read_to_end(&mut rest).expect("closed by the server, not timed out here");
    }
    let closed_in = started.elapsed();
    eprintln!("another client served in {served_in:?}; 50 silent connections closed after {closed_in:?}");
    assert!(closed_in < Duration::from_secs(10), "{closed_in:?}");
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
pub(crate) fn chromedriver() -> Option<(Child, u16)> {
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

/// Waits (at most 60 s) for the run page in `client` to show the run's status `wanted`.
pub(crate) async fn page_shows_status(client: &fantoccini::Client, wanted: &str) -> Result<(), String> {
    let started = Instant::now();
    loop {
        // After a form's post, while the next page loads, there may be no #status yet.
        let status = match client.find(fantoccini::Locator::Css("#status")).await {
            Ok(status) => status.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if status == wanted {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("the page never showed the run {wanted}: {status:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A headless Chromium session through the chromedriver listening on `port`.
pub(crate) async fn headless(port: u16) -> fantoccini::Client {
    // fantoccini's TLS (unused here: chromedriver speaks plain HTTP) needs a crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_string(),
        serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}),
    );
    fantoccini::ClientBuilder::rustls()
        .expect("rustls")
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("connect to chromedriver")
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

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let outcome = runtime.block_on(async {
        let client = headless(port).await;
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
    page_shows_status(client, "succeeded").await?;
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

#[test]
fn a_gate_with_a_freeform_edge_is_answered_in_words_from_the_run_page() {
    let workflow = r#"digraph words {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        review [shape=hexagon, label="Ship it?"]
        ship [shape=parallelogram, script="echo shipped > shipped"]
        revise [shape=parallelogram, script="echo revised > revised"]
        start -> review
        review -> ship [label="[Y] Yes"]
        review -> revise [freeform=true]
        ship -> exit
        revise -> exit
    }"#;
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let id = paused_run(&dir);
    let run_dir = dir.join(".fabro/runs").join(&id);
    let server = Server::start(&dir, &[]);
    let (code, page) = get(&server.at(&format!("/runs/{id}")));
    assert_eq!(code, 200);
    // The freeform edge is no button: it takes the text.
    assert!(page.contains("id=\"choice-Y\"") && page.contains("name=\"text\""), "{page}");
    assert!(!page.contains("value=\"revise\""), "{page}");
    let origin = format!("http://{}", authority(&server));
    let answer = server.at(&format!("/runs/{id}/answer"));
    let (code, _, body) = request("POST", &answer, &[("origin", &origin)], Some("answer=&text="));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("choose one of the gate's choices, or write an answer"), "{body}");
    let (code, _, body) =
        request("POST", &answer, &[("origin", &origin)], Some("text=Split+the+migration+in+two+first"));
    assert_eq!(code, 303, "{body}");
    wait_until("the answered run ends", || json(&run_dir.join("manifest.json"))["status"] == "succeeded");
    assert!(dir.join("revised").exists() && !dir.join("shipped").exists());
    let checkpoint = json(&run_dir.join("checkpoint.json"));
    assert_eq!(checkpoint["context"]["human.gate.text"], "Split the migration in two first");
    assert_eq!(checkpoint["context"]["human.gate.selected"], "freeform");

    // A gate without free text refuses text.
    let test = Test::new().workflow(&GATED.replace("BUILD_SCRIPT", "echo built"));
    let dir = test.path("");
    let id = paused_run(&dir);
    let server = Server::start(&dir, &[]);
    let origin = format!("http://{}", authority(&server));
    let (code, page) = get(&server.at(&format!("/runs/{id}")));
    assert_eq!(code, 200);
    assert!(!page.contains("name=\"text\""), "{page}");
    let (code, _, body) = request(
        "POST",
        &server.at(&format!("/runs/{id}/answer")),
        &[("origin", &origin)],
        Some("text=maybe"),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("takes one of its choices, not text"), "{body}");
}
