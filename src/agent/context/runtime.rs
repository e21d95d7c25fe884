//! The runtime block at the top of an agent stage's system prompt (on unless
//! `runtime_context=false`): the operating system, architecture, the shell the `shell` tool runs,
//! the work directory and the local date and time with its zone, then the first 100 lines of the
//! work directory's `.gitignore` when it has one. The model need not spend tool calls finding out.

use std::path::Path;

/// Lines of `.gitignore` the block shows at most.
pub const GITIGNORE_LINES: usize = 100;

/// The block for an agent working in `work_dir`.
pub fn block(work_dir: &Path) -> String {
    let mut out = format!(
        "## Runtime environment\nOS: {}\nArchitecture: {}\nShell: sh (the shell tool runs each command with `sh -c`)\n\
         Working directory: {}\nDate/time: {}\n",
        std::env::consts::OS,
        std::env::consts::ARCH,
        work_dir.display(),
        local_time()
    );
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
        let text = block(dir.path());
        assert!(text.contains(&format!("OS: {}\n", std::env::consts::OS)));
        assert!(text.contains(&format!("Working directory: {}\n", dir.path().display())));
        let time = text.lines().find_map(|l| l.strip_prefix("Date/time: ")).unwrap();
        assert_eq!(&time[4..5], "-", "{time}");
        assert!(!text.contains(".gitignore"));
        let ignore: String = (1..=150).map(|i| format!("pattern{i}\n")).collect();
        std::fs::write(dir.path().join(".gitignore"), ignore).unwrap();
        let text = block(dir.path());
        assert!(text.contains("pattern100\n") && !text.contains("pattern101"));
        assert!(text.ends_with("(50 more lines not shown)\n"));
    }
}
