//! The README and the pages of `docs/` as tests: every command their `console` blocks show runs
//! here, and what a block shows it printing is compared with what it prints. trycmd runs the
//! commands and compares (`[..]` in a line stands for any text: run ids, times, paths; `...` on
//! a line of its own for any lines); this file only cuts the pages into its cases.
//!
//! A page's blocks run in order in one scratch directory holding a copy of `workflows/`, so a
//! later command sees the runs of earlier ones (`--last`). The info string of a block says how
//! it is used:
//! - ` ```console `: `$ COMMAND` lines, each followed by an optional `? STATUS` line (default:
//!   success) and what the command prints (stdout and stderr together);
//! - ` ```console terminal `: the same, run on a pseudo-terminal as a person would; a line
//!   `> ANSWER` of the output is typed at the prompt before it;
//! - ` ```console needs-provider `: needs a real model provider or the network; not run;
//! - ` ```LANG file=NAME `: not a command; written to NAME in the scratch directory first.
//!
//! `http://localhost:8080/v1` in a command is the loopback fake provider
//! ([`LlmServer`]), serving one model, `local`, which answers every call with `Done.`.

use std::path::{Path, PathBuf};

use crate::common;
use common::llm_server::{openai_text, LlmServer, ServerOptions};
use common::pty::Terminal;

/// The pages whose blocks run: the README and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = common::repo_root();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    pages.insert(0, root.join("README.md"));
    pages
}

/// A fenced block: its info string's words, its text and the line of the page it starts on.
struct Fenced {
    info: Vec<String>,
    text: String,
    line: usize,
}

fn fenced_blocks(page: &str) -> Vec<Fenced> {
    let mut blocks = Vec::new();
    let mut lines = page.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let info = info.split_whitespace().map(str::to_string).collect();
        let mut text = String::new();
        for (_, line) in lines.by_ref().take_while(|(_, line)| !line.starts_with("```")) {
            text.push_str(line);
            text.push('\n');
        }
        blocks.push(Fenced { info, text, line: number + 1 });
    }
    blocks
}

/// What a page asks to run, in order.
enum Step {
    /// Commands trycmd runs (a ```console block), and the line of the page the block starts on.
    Commands(String, usize),
    /// Commands run on a terminal.
    Terminal(String),
}

struct Page {
    name: String,
    files: Vec<(String, String)>,
    steps: Vec<Step>,
}

fn read_page(path: &Path, provider_url: &str) -> Page {
    let text = std::fs::read_to_string(path).expect("a page");
    let mut page = Page {
        name: path.file_stem().unwrap_or_default().to_string_lossy().into_owned(),
        files: Vec::new(),
        steps: Vec::new(),
    };
    for block in fenced_blocks(&text) {
        let has = |word: &str| block.info.iter().any(|info| info == word);
        if let Some(name) = block.info.iter().find_map(|info| info.strip_prefix("file=")) {
            page.files.push((name.to_string(), block.text.clone()));
        }
        if block.info.first().map(String::as_str) != Some("console") || has("needs-provider") {
            continue;
        }
        let commands = block.text.replace("http://localhost:8080/v1", provider_url);
        page.steps.push(if has("terminal") {
            Step::Terminal(commands)
        } else {
            Step::Commands(commands, block.line)
        });
    }
    page
}

/// `fabro` for the pages' commands: the test's binary, without the environment of whoever runs
/// the tests (CI, a config file), as [`common::fabro_command`] has it; a provider variable is
/// kept only when a page set it to `provider_url`, the loopback fake provider.
fn isolated_fabro(scratch: &Path, provider_url: &str) -> PathBuf {
    let script = format!(
        "#!/bin/sh\n\
         for name in {providers}; do\n\
         \x20   eval \"value=\\${{$name-}}\"\n\
         \x20   case \"$value\" in {provider_url}*) ;; *) unset \"$name\" ;; esac\n\
         done\n\
         exec env -u CI -u GITHUB_STEP_SUMMARY -u FABRO_LOG -u NO_COLOR XDG_CONFIG_HOME='{config}' '{fabro}' \"$@\"\n",
        providers = common::PROVIDER_ENV.join(" "),
        config = scratch.join(".no-fabro-config").display(),
        fabro = common::fabro_bin().display(),
    );
    let path = scratch.join("fabro");
    std::fs::write(&path, script).expect("write the fabro wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod the wrapper");
    path
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a scratch directory");
    for entry in std::fs::read_dir(from).expect("read a directory").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The terminal of ```console terminal blocks: wide enough for every line a page shows, and tall
/// enough to keep all of them on the screen.
const ROWS: u16 = 500;
const COLUMNS: u16 = 200;

/// Runs the commands of a ```console terminal block on a pseudo-terminal and compares the
/// screen they leave with the block.
fn run_on_terminal(block: &str, dir: &Path, fabro: &Path) {
    let mut lines = block.lines().peekable();
    while let Some(line) = lines.next() {
        let command = line.strip_prefix("$ ").unwrap_or_else(|| panic!("expected `$ ` in\n{block}"));
        let status: i32 = match lines.peek().and_then(|line| line.strip_prefix("? ")) {
            Some(status) => {
                let status = status.trim().parse().expect("a `? STATUS` line names an exit code");
                lines.next();
                status
            }
            None => 0,
        };
        let mut expected = String::new();
        while let Some(line) = lines.next_if(|line| !line.starts_with("$ ")) {
            expected.push_str(line);
            expected.push('\n');
        }
        let words = shlex::split(command).unwrap_or_else(|| panic!("unbalanced quotes in `{command}`"));
        assert_eq!(
            words.first().map(String::as_str),
            Some("fabro"),
            "a terminal block runs fabro: {command}"
        );
        let mut process = std::process::Command::new(fabro);
        process.args(&words[1..]).current_dir(dir).env("TERM", "xterm");
        let mut terminal = Terminal::spawn_sized(process, ROWS, COLUMNS);
        for (typed, answer) in expected.lines().filter_map(|line| line.strip_prefix("> ")).enumerate() {
            terminal.wait_for("\n> ", typed + 1);
            terminal.type_line(answer);
        }
        let exit = terminal.wait();
        let size = |n| std::num::NonZeroU16::new(n).expect("not zero");
        let mut screen = vt100::Parser::new(size(ROWS), size(COLUMNS), 0);
        screen.process(terminal.screen().as_bytes());
        // Row by row: a line as long as the terminal is wide continues on the next row.
        let rows: Vec<String> =
            screen.screen().rows(0, COLUMNS).map(|row| row.trim_end().to_string()).collect();
        let shown = rows.join("\n");
        assert_eq!(exit.code(), Some(status), "`{command}` exited {exit}:\n{shown}");
        snapbox::Assert::new().eq(format!("{}\n", shown.trim_end()), expected);
    }
}

/// A page's block as a trycmd case. trycmd drops the last line break before a command or the
/// block's end, as written before a blank line there; a page shows no such blank lines.
fn trycmd_case(commands: &str) -> String {
    let mut case = String::from("```console\n");
    for (index, line) in commands.lines().enumerate() {
        if index > 0 && line.starts_with("$ ") {
            case.push('\n');
        }
        case.push_str(line);
        case.push('\n');
    }
    case.push_str("\n```\n");
    case
}

/// The programs besides fabro that pages' commands may run (to make a file to show an error on).
const SHELL_TOOLS: &[&str] = &["cp", "sed"];

/// Where `PATH` finds `program`.
fn which(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("`{program}` is not on PATH"))
}

#[test]
fn every_console_block_of_the_readme_and_docs_runs_as_shown() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let replies = (0..40).map(|_| openai_text("Done.", 10, 2)).collect();
    let models = serde_json::json!({"object": "list", "data": [{"id": "local", "object": "model"}]});
    let provider =
        LlmServer::start_with(replies, vec![], ServerOptions { models: Some(models), ..Default::default() });
    let fabro = isolated_fabro(scratch.path(), &provider.url("/v1"));
    let mut ran = 0;
    for path in pages() {
        let page = read_page(&path, &provider.url("/v1"));
        if page.steps.is_empty() {
            continue;
        }
        let dir = scratch.path().join(&page.name);
        copy_dir(&common::repo_root().join("workflows"), &dir.join("workflows"));
        for (name, text) in &page.files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap_or(&dir)).expect("make a file's directory");
            std::fs::write(path, text).expect("write a file a page shows");
        }
        for step in &page.steps {
            match step {
                Step::Commands(commands, line) => {
                    // trycmd runs a case `NAME.md` in `NAME.in/`: the page's directory for all.
                    // The name says where the block is: `README.md-line-102.md`.
                    let case = scratch.path().join(format!("{}.md-line-{line}.md", page.name));
                    std::fs::write(&case, trycmd_case(commands)).expect("write a case");
                    std::os::unix::fs::symlink(&dir, case.with_extension("in")).expect("link the directory");
                    let cases = trycmd::TestCases::new();
                    cases.register_bin("fabro", &fabro).case(&case);
                    for tool in SHELL_TOOLS {
                        cases.register_bin(*tool, which(tool));
                    }
                    cases.run();
                }
                Step::Terminal(commands) => run_on_terminal(commands, &dir, &fabro),
            }
            ran += 1;
        }
    }
    assert!(ran > 0, "no console block ran");
}

#[test]
fn a_wrong_line_in_a_transcript_fails() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let fabro = isolated_fabro(scratch.path(), "http://127.0.0.1:9/v1");
    copy_dir(&common::repo_root().join("workflows"), &scratch.path().join("deliberately-wrong.in/workflows"));
    let case = scratch.path().join("deliberately-wrong.md");
    std::fs::write(
        &case,
        "```console\n$ fabro validate workflows/linear.dot\nworkflows/linear.dot: valid (1 warning)\n```\n",
    )
    .expect("write a case");
    let failed = std::panic::catch_unwind(|| {
        trycmd::TestCases::new().register_bin("fabro", &fabro).case(&case).run();
    });
    assert!(failed.is_err(), "trycmd passed a transcript that fabro does not print");
}
