//! The server's handlers driven as a client would, without the transport; and random and mutated
//! buffers through every handler, which must answer (or fail a request) and never panic.

use serde_json::{json, Value};

use super::*;

const URI: &str = "file:///tmp/fabro-lsp-test/w.dot";

const WORKFLOW: &str = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  plan [prompt=\"x\", max_retires=2]\n  start -> plan -> exit\n}\n";

fn open(server: &mut Server, text: &str) -> Vec<Message> {
    open_at(server, URI, 1, text)
}

fn ask(server: &mut Server, method: &str, params: Value) -> Result<Value, String> {
    let (response, _) = server.request(request(1, method, params));
    response.response_result.map_err(|error| error.message)
}

fn at(line: u32, character: u32) -> Value {
    json!({ "textDocument": { "uri": URI }, "position": { "line": line, "character": character } })
}

#[test]
fn opening_a_buffer_publishes_its_findings_and_the_quick_fix_renames() {
    let mut server = Server::default();
    let published = open(&mut server, WORKFLOW);
    let [Message::Notification(notification)] = published.as_slice() else { panic!("{published:?}") };
    let diagnostics = &notification.params["diagnostics"];
    let typo = diagnostics
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "unknown_attribute")
        .expect("the typo is found");
    assert_eq!(typo["range"]["start"], json!({ "line": 3, "character": 20 }));
    assert!(
        typo["message"]
            .as_str()
            .unwrap()
            .starts_with("unknown attribute `max_retires` (did you mean `max_retries`?)"),
        "{typo}"
    );
    let actions = ask(
        &mut server,
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": URI }, "range": typo["range"], "context": { "diagnostics": [] } }),
    )
    .unwrap();
    let edit = &actions[0]["edit"]["changes"][URI][0];
    assert_eq!(edit["newText"], "max_retries");
    assert_eq!(edit["range"], typo["range"]);
}

#[test]
fn changes_are_debounced_and_requests_see_the_latest_text() {
    let mut server = Server::default();
    open(&mut server, WORKFLOW);
    let typo = json!({ "start": { "line": 3, "character": 20 }, "end": { "line": 3, "character": 31 } });
    change(&mut server, URI, 2, json!({ "range": typo, "text": "max_retries" }));
    assert!(server.publish_due().is_empty(), "nothing before the debounce");
    let (_, published) = server.request(request(2, "textDocument/hover", at(3, 23)));
    let [Message::Notification(notification)] = published.as_slice() else { panic!("{published:?}") };
    assert!(!notification.params["diagnostics"].to_string().contains("unknown_attribute"));
    let hover = ask(&mut server, "textDocument/hover", at(3, 23)).unwrap();
    assert!(hover["contents"]["value"].as_str().unwrap().starts_with("**max_retries**"), "{hover}");
}

#[test]
fn unknown_methods_and_bad_params_are_errors_not_crashes() {
    let mut server = Server::default();
    assert!(ask(&mut server, "textDocument/hover", json!({ "nonsense": true })).is_err());
    assert!(ask(&mut server, "fabro/none", json!({})).unwrap_err().contains("does not handle"));
    assert!(ask(&mut server, "textDocument/hover", at(0, 0)).unwrap_err().contains("not open"));
    assert!(server.notification(Notification::new("textDocument/didOpen".into(), json!(42))).is_empty());
}

/// A small deterministic generator (xorshift), so a failing case can be replayed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "digraph",
    " w ",
    "{",
    "}",
    "[",
    "]",
    "=",
    "->",
    "--",
    "\"",
    "\\",
    ";",
    ",",
    "\n",
    " ",
    "start",
    "exit",
    "shape=Mdiamond",
    "shape=house",
    "prompt=\"@",
    "condition=\"outcome=",
    "retry_target=",
    "é",
    "😀",
    "/*",
    "*/",
    "//",
    "#",
    "subgraph",
    "node",
    "edge",
    "graph",
    "<",
    ">",
    "0",
    "-1.5",
    "stack.child_dotfile=\"w.dot\"",
    "\u{0}",
];

#[test]
fn random_and_mutated_buffers_never_crash_any_handler() {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut server = Server::default();
    let methods = [
        "textDocument/hover",
        "textDocument/completion",
        "textDocument/definition",
        "textDocument/references",
        "textDocument/prepareRename",
        "textDocument/rename",
        "textDocument/documentSymbol",
        "textDocument/documentLink",
        "textDocument/codeAction",
        "textDocument/formatting",
    ];
    for case in 0..300 {
        let text = if case % 2 == 0 {
            (0..random.below(40)).map(|_| PIECES[random.below(PIECES.len())]).collect::<String>()
        } else {
            let mut text = WORKFLOW.to_string();
            for _ in 0..1 + random.below(4) {
                let mut at = random.below(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                match random.below(3) {
                    0 => text.insert_str(at, PIECES[random.below(PIECES.len())]),
                    1 => {
                        let mut end = (at + random.below(8)).min(text.len());
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        text.replace_range(at..end, "");
                    }
                    _ => text.truncate(at),
                }
            }
            text
        };
        open(&mut server, &text);
        // Ranged edits, some out of range, through the change path too.
        let range = json!({ "start": { "line": random.below(8), "character": random.below(30) },
                            "end": { "line": random.below(8), "character": random.below(30) } });
        change(
            &mut server,
            URI,
            case as i32 + 2,
            json!({ "range": range, "text": PIECES[random.below(PIECES.len())] }),
        );
        for method in methods {
            let mut params = at(random.below(8) as u32, random.below(40) as u32);
            params["newName"] = json!(["renamed", "x y", "", "exit"][random.below(4)]);
            params["context"] = json!({ "includeDeclaration": true, "diagnostics": [] });
            params["range"] =
                json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 99, "character": 0 } });
            params["options"] = json!({ "tabSize": 4, "insertSpaces": true });
            let (response, _) = server.request(request(case, method, params));
            if let Err(error) = response.response_result {
                assert!(
                    !error.message.starts_with("internal error"),
                    "{method} on {text:?}: {}",
                    error.message
                );
            }
        }
    }
}

fn published_diagnostics(messages: &[Message], version: i32) -> Value {
    let [Message::Notification(notification)] = messages else { panic!("{messages:?}") };
    assert_eq!(notification.params["version"], version);
    notification.params["diagnostics"].clone()
}

fn open_at(server: &mut Server, uri: &str, version: i32, text: &str) -> Vec<Message> {
    server.notification(Notification::new(
        "textDocument/didOpen".to_string(),
        json!({ "textDocument": { "uri": uri, "languageId": "dot", "version": version, "text": text } }),
    ))
}

fn change(server: &mut Server, uri: &str, version: i32, change: Value) {
    server.notification(Notification::new(
        "textDocument/didChange".to_string(),
        json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [change] }),
    ));
}

/// The diagnostics published on the way to answering a request about the buffer (analysed then,
/// without waiting for the debounce).
fn diagnostics_on_request(server: &mut Server, uri: &str, version: i32) -> Value {
    let params = json!({ "textDocument": { "uri": uri } });
    let (_, published) = server.request(request(version, "textDocument/documentSymbol", params));
    published_diagnostics(&published, version)
}

#[test]
fn edits_parsed_again_in_part_publish_what_a_whole_analysis_does() {
    let uri = Url::parse(URI).unwrap();
    let mut edited = Server::default();
    open(&mut edited, WORKFLOW);
    // Keystrokes (replace what `find` finds, shifted by `skip`, with `insert`): typing in a prompt,
    // a new stage, an unclosed string and its close, a removed line, a comment opened mid-line,
    // a typo made worse.
    let edits = [
        ("prompt=\"x", 9, "", "y"),
        ("  start -> plan", 0, "", "  review [prompt=\"check\"]\n"),
        ("check", 0, "", "\""),
        ("\"check", 0, "\"", ""),
        ("  exit [shape=Msquare]\n", 0, "  exit [shape=Msquare]\n", ""),
        ("plan -> exit", 5, "", "// "),
        ("max_retires", 0, "", "z"),
        // A statement typed on a line of its own, broken until its last keystroke.
        ("  start -> plan", 0, "", "\n"),
        ("\n  start -> plan", 0, "", "  d"),
        ("  d\n", 3, "", " [pro"),
        ("[pro", 4, "", "mpt="),
        ("mpt=", 4, "", "\"q"),
        ("\"q", 2, "", "\"]"),
    ];
    let mut text = WORKFLOW.to_string();
    for (version, (anchor, skip, replaced, insert)) in edits.into_iter().enumerate() {
        let version = version as i32 + 2;
        let start = text.find(anchor).expect("anchor") + skip;
        let end = start + replaced.len();
        let before = Document::new(uri.clone(), 1, text.clone());
        let range = json!({ "start": before.position(start), "end": before.position(end) });
        text.replace_range(start..end, insert);
        change(&mut edited, URI, version, json!({ "range": range, "text": insert }));
        let diagnostics = diagnostics_on_request(&mut edited, URI, version);
        assert_eq!(edited.documents[&uri].text, text);
        let opened = open_at(&mut Server::default(), URI, version, &text);
        assert_eq!(diagnostics, published_diagnostics(&opened, version), "after edit {version}:\n{text}");
    }
}

#[test]
fn the_settings_layers_beside_the_buffer_give_their_inputs_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let flows = dir.path().join("flows");
    std::fs::create_dir(&flows).unwrap();
    let uri = Url::from_file_path(flows.join("report.dot")).unwrap();
    let text = "digraph report {\n  graph [goal=\"Fix {{ inputs.ticket }}\"]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    let mut server = Server::new(dir.path().to_path_buf());
    let uri = uri.as_str();
    let rules = |server: &mut Server, version: i32| -> Vec<String> {
        change(server, uri, version, json!({ "text": text }));
        let diagnostics = diagnostics_on_request(server, uri, version);
        let rules =
            diagnostics.as_array().unwrap().iter().map(|d| format!("{}: {}", d["code"], d["message"]));
        rules.collect()
    };
    open_at(&mut server, uri, 1, text);
    let found = rules(&mut server, 2);
    assert!(found.iter().any(|rule| rule.contains("undefined_input")), "{found:?}");

    std::fs::write(flows.join("workflow.toml"), "[run.inputs]\nticket = \"PAY-12\"\n").unwrap();
    let found = rules(&mut server, 3);
    assert!(found.is_empty(), "the input is defined by workflow.toml: {found:?}");

    std::fs::write(flows.join("workflow.toml"), "[run]\ngaol = \"x\"\n").unwrap();
    let found = rules(&mut server, 4);
    assert!(
        found.iter().any(|rule| rule.starts_with("\"settings\"") && rule.contains("unknown key `gaol`")),
        "{found:?}"
    );
}

#[test]
fn a_change_to_a_file_the_buffer_reads_analyses_it_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("flows")).unwrap();
    let uri = Url::from_file_path(dir.path().join("flows/w.dot")).unwrap();
    let text = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  plan [prompt=\"@../plan.md\"]\n  start -> plan -> exit\n}\n";
    let mut server = Server::new(dir.path().to_path_buf());
    let opened = open_at(&mut server, uri.as_str(), 1, text);
    let rules = |diagnostics: Value| -> Vec<String> {
        diagnostics.as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap().to_string()).collect()
    };
    let missing = rules(published_diagnostics(&opened, 1));
    assert!(!missing.is_empty(), "the prompt file is missing");
    let changed = |server: &mut Server, name: &str| {
        let file = Url::from_file_path(dir.path().join(name)).unwrap();
        server.notification(Notification::new(
            "workspace/didChangeWatchedFiles".to_string(),
            json!({ "changes": [{ "uri": file, "type": 1 }] }),
        ));
        std::thread::sleep(DEBOUNCE + Duration::from_millis(20));
        server.publish_due()
    };
    std::fs::write(dir.path().join("notes.md"), "unrelated").unwrap();
    assert!(changed(&mut server, "notes.md").is_empty(), "a file the buffer does not read");
    std::fs::write(dir.path().join("plan.md"), "Plan the work.").unwrap();
    let published = changed(&mut server, "plan.md");
    let now = rules(published_diagnostics(&published, 1));
    assert!(now.len() < missing.len(), "{missing:?} -> {now:?}");
    std::fs::write(dir.path().join("flows/workflow.toml"), "[run]\ngaol = 1\n").unwrap();
    let published = changed(&mut server, "flows/workflow.toml");
    assert!(rules(published_diagnostics(&published, 1)).contains(&"settings".to_string()));
}

#[test]
fn a_client_that_can_watch_files_is_asked_to() {
    let params = json!({ "capabilities": { "workspace": { "didChangeWatchedFiles": { "dynamicRegistration": true } } } });
    let request = watch_files_request(&params).expect("asked");
    assert_eq!(request.method, "client/registerCapability");
    assert_eq!(request.params["registrations"][0]["method"], "workspace/didChangeWatchedFiles");
    assert!(watch_files_request(&json!({ "capabilities": {} })).is_none());
}
