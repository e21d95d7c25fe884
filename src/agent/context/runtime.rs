//! The runtime block at the top of an agent stage's system prompt (on unless
//! `runtime_context=false`): the operating system, architecture, the shell the `shell` tool runs,
//! the work directory, the local date and time with its zone and the model; the git repository's
//! branch, a short status and the latest commits (or that the work directory is outside git);
//! then the first 100 lines of the work directory's `.gitignore` when it has one. The model need
//! not spend tool calls finding out.

use std::path::Path;

/// Lines of `.gitignore` the block shows at most.
pub const GITIGNORE_LINES: usize = 100;
/// Changed or untracked paths the git status shows at most.
pub const STATUS_PATHS: usize = 8;
/// Latest commits shown.
pub const RECENT_COMMITS: usize = 5;

/// The block for an agent on `model` working in `work_dir`.
pub fn block(work_dir: &Path, model: &str) -> String {
    let mut out = format!(
        "## Runtime environment\nOS: {}\nArchitecture: {}\nShell: sh (the shell tool runs each command with `sh -c`)\n\
         Working directory: {}\nDate/time: {}\nModel: {model}\n",
        std::env::consts::OS,
        std::env::consts::ARCH,
        work_dir.display(),
        local_time()
    );
    out.push_str(&git_state(work_dir));
    let gitignore = work_dir.join(".gitignore");
    if let Ok(text) = crate::regular_file::read_to_string(&gitignore, crate::regular_file::FileKind::WorkFile)
    {
        let lines: Vec<&str> = text.lines().collect();
        let shown = lines.len().min(GITIGNORE_LINES);
        out.push_str("\n## .gitignore of the working directory (paths not to write to or commit)\n");
        for line in &lines[..shown] {
            out.push_str(line);
            out.push('\n');
        }
        if lines.len() > shown {
            out.push_str(&format!("({} more lines not shown)\n", lines.len() - shown));
        }
    }
    out
}

/// The git lines of the block: branch, status, latest commits; or that there is no repository.
fn git_state(work_dir: &Path) -> String {
    let Ok(repo) = git2::Repository::discover(work_dir) else {
        return "Git: the working directory is not in a git repository\n".to_string();
    };
    let mut out = String::new();
    let head = repo.head().ok();
    let branch = match &head {
        Some(head) if head.is_branch() => head.shorthand().unwrap_or("?").to_string(),
        Some(head) => match head.target() {
            Some(id) => format!("(detached at {})", short(id)),
            None => "(detached)".to_string(),
        },
        // A repository without a commit yet: HEAD names the branch to be.
        None => repo
            .find_reference("HEAD")
            .ok()
            .and_then(|head| {
                head.symbolic_target()
                    .ok()
                    .flatten()
                    .map(|name| name.trim_start_matches("refs/heads/").to_string())
            })
            .map_or_else(|| "(none)".to_string(), |name| format!("{name} (no commits yet)")),
    };
    out.push_str(&format!("Git branch: {branch}\n"));
    let mut options = git2::StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(false).exclude_submodules(true);
    if let Ok(statuses) = repo.statuses(Some(&mut options)) {
        let (mut changed, mut untracked) = (0, 0);
        let mut paths = Vec::new();
        for entry in statuses.iter() {
            let status = entry.status();
            if status.is_ignored() {
                continue;
            }
            if status.is_wt_new() && !status.is_index_new() {
                untracked += 1;
            } else {
                changed += 1;
            }
            if paths.len() < STATUS_PATHS {
                paths.extend(entry.path().map(str::to_string));
            }
        }
        let status = if changed + untracked == 0 {
            "clean".to_string()
        } else {
            let more = changed + untracked - paths.len();
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            format!("{changed} changed, {untracked} untracked: {}{more}", paths.join(", "))
        };
        out.push_str(&format!("Git status: {status}\n"));
    }
    if head.is_some() {
        if let Ok(mut walk) = repo.revwalk() {
            if walk.push_head().is_ok() {
                let commits: Vec<String> = walk
                    .filter_map(Result::ok)
                    .take(RECENT_COMMITS)
                    .filter_map(|id| repo.find_commit(id).ok())
                    .map(|commit| {
                        format!("  {} {}", short(commit.id()), commit.summary().ok().flatten().unwrap_or(""))
                    })
                    .collect();
                if !commits.is_empty() {
                    out.push_str(&format!("Recent commits:\n{}\n", commits.join("\n")));
                }
            }
        }
    }
    out
}

fn short(id: git2::Oid) -> String {
    id.to_string().chars().take(7).collect()
}

extern "C" {
    /// POSIX: reads `TZ` (or the system's zone) into the C library's time-zone state.
    fn tzset();
}

/// The local date and time with its UTC offset and zone: `2026-11-25 08:20:00 +01:00 (CET)`.
fn local_time() -> String {
    // SAFETY: `time` and `localtime_r` write only into the values passed; `tzset` reads the
    // environment's TZ, and fabro sets no environment variables while running stages.
    let (tm, ok) = unsafe {
        tzset();
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        let ok = !libc::localtime_r(&now, &mut tm).is_null();
        (tm, ok)
    };
    if !ok {
        return format!("{} (UTC)", humantime::format_rfc3339_seconds(std::time::SystemTime::now()));
    }
    let offset = tm.tm_gmtoff;
    let sign = if offset < 0 { '-' } else { '+' };
    let zone = if tm.tm_zone.is_null() {
        String::new()
    } else {
        // SAFETY: `localtime_r` set `tm_zone` to a NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) }.to_string_lossy().into_owned()
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} {sign}{:02}:{:02}{}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        offset.abs() / 3600,
        offset.abs() % 3600 / 60,
        if zone.is_empty() { String::new() } else { format!(" ({zone})") }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_names_the_machine_and_shows_the_gitignore_head() {
        let dir = tempfile::tempdir().unwrap();
        let text = block(dir.path(), "model-x");
        assert!(text.contains(&format!("OS: {}\n", std::env::consts::OS)));
        assert!(
            text.contains("Model: model-x\nGit: the working directory is not in a git repository\n"),
            "{text}"
        );
        assert!(text.contains(&format!("Working directory: {}\n", dir.path().display())));
        let time = text.lines().find_map(|l| l.strip_prefix("Date/time: ")).unwrap();
        assert_eq!(&time[4..5], "-", "{time}");
        assert!(!text.contains(".gitignore"));
        let ignore: String = (1..=150).map(|i| format!("pattern{i}\n")).collect();
        std::fs::write(dir.path().join(".gitignore"), ignore).unwrap();
        let text = block(dir.path(), "model-x");
        assert!(text.contains("pattern100\n") && !text.contains("pattern101"));
        assert!(text.ends_with("(50 more lines not shown)\n"));
    }

    #[test]
    fn the_block_tells_the_branch_the_status_and_the_latest_commits() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        assert!(block(dir.path(), "m").contains(" (no commits yet)\nGit status: clean\n"));
        let signature = git2::Signature::now("t", "t@example.com").unwrap();
        let mut parent: Option<git2::Oid> = None;
        for subject in ["first", "second"] {
            std::fs::write(dir.path().join("a.txt"), subject).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("a.txt")).unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            index.write().unwrap();
            let parents: Vec<git2::Commit> = parent.iter().map(|id| repo.find_commit(*id).unwrap()).collect();
            let refs: Vec<&git2::Commit> = parents.iter().collect();
            parent = Some(repo.commit(Some("HEAD"), &signature, &signature, subject, &tree, &refs).unwrap());
        }
        assert!(block(dir.path(), "m").contains("Git status: clean\n"));
        std::fs::write(dir.path().join("a.txt"), "changed").unwrap();
        std::fs::write(dir.path().join("new.txt"), "new").unwrap();
        let text = block(dir.path(), "m");
        let branch = repo.head().unwrap().shorthand().unwrap().to_string();
        assert!(text.contains(&format!("Git branch: {branch}\n")), "{text}");
        assert!(text.contains("Git status: 1 changed, 1 untracked: a.txt, new.txt\n"), "{text}");
        let second = text.find(" second").unwrap();
        assert!(text.contains("Recent commits:\n") && second < text.find(" first").unwrap(), "{text}");
    }
}
