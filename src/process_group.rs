//! The process groups that stages start (command stages, agents' shell commands, CLI agents),
//! and how their lives are tied to fabro's.
//!
//! Each such process leads its own process group through a small guard: the process spawned
//! is a forked copy of fabro that never executes anything; it forks the real command into the
//! same group, waits for it and exits as it did. While it waits it checks every
//! [`GUARD_POLL`] that fabro is still its parent; when fabro is gone (SIGKILL, a crash, a second
//! Ctrl-C) it kills the whole group, so nothing a stage started outlives fabro by more than
//! that. (A process that leaves the group on purpose, with `setsid`, is beyond it.)
//!
//! [`ProcessGroup`] is fabro's handle on such a group: it signals the group, stops it with a
//! grace period, and kills it when dropped. Every live handle is also listed in a registry, so
//! an exit that skips destructors ([`kill_all`] before `std::process::exit`) kills them too.

use std::collections::BTreeSet;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::Duration;

/// How often the guard checks that fabro is still running.
pub const GUARD_POLL: Duration = Duration::from_millis(100);
/// How long a stopped group gets after SIGTERM before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// How often a stopping group is looked at.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Groups with a live [`ProcessGroup`] handle.
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Makes `command` start in a new process group led by a guard that kills the group when fabro
/// goes away. The pid of the spawned child is the group id.
pub fn lead_guarded_group(command: &mut tokio::process::Command) {
    command.process_group(0);
    let fabro = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec. It calls only
    // async-signal-safe functions (fork, signal mask and disposition calls, waitpid, kill,
    // getppid, sigtimedwait, close_range/close, setrlimit, _exit) and allocates nothing.
    unsafe {
        command.pre_exec(move || guard::split(fabro));
    }
}

/// Kills every group that still has a live handle; for exits that skip destructors.
pub fn kill_all() {
    let groups: Vec<i32> = LIVE.lock().map(|live| live.iter().copied().collect()).unwrap_or_default();
    for pgid in groups {
        signal(pgid, libc::SIGKILL);
    }
}

/// A stage's process group. Dropped while armed, it kills the whole group.
#[derive(Debug)]
pub struct ProcessGroup {
    pgid: Option<i32>,
}

impl ProcessGroup {
    /// The group led by `child` (spawned with [`lead_guarded_group`]).
    pub fn of(child: &tokio::process::Child) -> Self {
        let pgid = child.id().and_then(|pid| i32::try_from(pid).ok()).filter(|pgid| *pgid > 1);
        if let (Some(pgid), Ok(mut live)) = (pgid, LIVE.lock()) {
            live.insert(pgid);
        }
        ProcessGroup { pgid }
    }

    /// The group id, while the handle is armed.
    pub fn id(&self) -> Option<i32> {
        self.pgid
    }

    /// Stops every process in the group: SIGTERM, up to [`KILL_GRACE`] for the group to empty,
    /// then SIGKILL. Reaps the leader and returns its exit status when it could be had.
    pub async fn terminate(&mut self, child: &mut tokio::process::Child) -> Option<ExitStatus> {
        let Some(pgid) = self.pgid else {
            let _ = child.start_kill();
            return child.wait().await.ok();
        };
        signal(pgid, libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + KILL_GRACE;
        let mut status = tokio::time::timeout_at(deadline, child.wait()).await.ok().and_then(Result::ok);
        // The leader is gone; give the rest of the group what is left of the grace period.
        while status.is_some() && alive(pgid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(GROUP_POLL).await;
        }
        signal(pgid, libc::SIGKILL);
        if status.is_none() {
            status = child.wait().await.ok();
        }
        self.forget();
        status
    }

    /// Stops what is left of the group after its leader ended (background processes a command
    /// left behind): SIGTERM, up to [`KILL_GRACE`], then SIGKILL. Returns at once when the group
    /// is already empty.
    pub async fn stop_rest(&mut self) {
        let Some(pgid) = self.pgid else { return };
        if signal(pgid, libc::SIGTERM) {
            let deadline = tokio::time::Instant::now() + KILL_GRACE;
            while alive(pgid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(GROUP_POLL).await;
            }
            signal(pgid, libc::SIGKILL);
        }
        self.forget();
    }

    /// Lets what is left of the group run on.
    pub fn release(&mut self) {
        self.forget();
    }

    /// Lets the group run on untouched by this handle.
    fn forget(&mut self) {
        if let (Some(pgid), Ok(mut live)) = (self.pgid.take(), LIVE.lock()) {
            live.remove(&pgid);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            signal(pgid, libc::SIGKILL);
            self.forget();
        }
    }
}

/// Sends `sig` to every process in group `pgid`; false when none received it.
pub fn signal(pgid: i32, sig: libc::c_int) -> bool {
    // A group id of 0 or 1 would mean "our own group" or "every process": never signal those.
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Whether any process is left in group `pgid`.
pub fn alive(pgid: i32) -> bool {
    signal(pgid, 0)
}

/// Stops group `pgid` from a blocking context: SIGTERM, up to half a second, then SIGKILL.
pub fn stop_blocking(pgid: i32) {
    if !signal(pgid, libc::SIGTERM) {
        return;
    }
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(25));
        if !alive(pgid) {
            return;
        }
    }
    signal(pgid, libc::SIGKILL);
}

mod guard {
    //! The code that runs in the forked child between fork and exec.

    use std::io;

    use super::GUARD_POLL;

    /// Forks the command's process off the guard. Returns (to exec) in the command's process;
    /// never returns in the guard, which exits as the command did.
    pub(super) fn split(fabro: libc::pid_t) -> io::Result<()> {
        // SAFETY: see `lead_guarded_group`; everything here is async-signal-safe.
        unsafe {
            // SIGCHLD stays blocked in the guard, so the command's end is never missed between
            // two looks; the command gets the mask it had.
            let mut chld: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut chld);
            libc::sigaddset(&mut chld, libc::SIGCHLD);
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut before);
            let guard = libc::getpid();
            match libc::fork() {
                -1 => {
                    let error = io::Error::last_os_error();
                    libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                    Err(error)
                }
                0 => {
                    // The command: it dies with its guard, and runs with the mask it was given.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    if libc::getppid() != guard {
                        libc::_exit(137);
                    }
                    libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                    Ok(())
                }
                command => watch(fabro, command, &chld),
            }
        }
    }

    /// The guard's life: hold nothing of fabro's open, ignore the signals a group stop sends
    /// (the command answers them), and wait.
    unsafe fn watch(fabro: libc::pid_t, command: libc::pid_t, chld: &libc::sigset_t) -> ! {
        close_inherited_files();
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let poll = libc::timespec { tv_sec: 0, tv_nsec: GUARD_POLL.as_nanos() as libc::c_long };
        loop {
            let mut status = 0;
            let waited = libc::waitpid(command, &mut status, libc::WNOHANG);
            if waited == command {
                exit_as(status);
            }
            if waited == -1 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
            if libc::getppid() != fabro {
                // fabro is gone: nothing of this stage may go on.
                libc::kill(0, libc::SIGKILL);
                libc::_exit(137);
            }
            libc::sigtimedwait(chld, std::ptr::null_mut(), &poll);
        }
    }

    /// Ends the guard the way the command ended: same exit code, or killed by the same signal.
    unsafe fn exit_as(status: libc::c_int) -> ! {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut only: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut only);
            libc::sigaddset(&mut only, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }

    /// Closes every descriptor above stderr: fabro's files, sockets and locks must not stay
    /// open in the guard, and the spawner waits for its status pipe to close.
    unsafe fn close_inherited_files() {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536)
        } else {
            1024
        };
        for fd in 3..highest as libc::c_int {
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guarded(script: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("sh");
        command.arg("-c").arg(script).kill_on_drop(true);
        lead_guarded_group(&mut command);
        command
    }

    #[tokio::test]
    async fn the_guard_exits_as_the_command_did() {
        let status = guarded("exit 7").status().await.unwrap();
        assert_eq!(status.code(), Some(7));
        let status = guarded("kill -TERM $$").status().await.unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGTERM));
        let output = guarded("echo out; echo err >&2").output().await.unwrap();
        assert_eq!(output.stdout, b"out\n");
        assert_eq!(output.stderr, b"err\n");
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_is_an_error_of_the_spawn() {
        let mut command = tokio::process::Command::new("/nonexistent/program");
        lead_guarded_group(&mut command);
        let error = command.status().await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn terminate_stops_the_group_and_gets_the_commands_status() {
        let mut child = guarded("trap 'exit 3' TERM; sleep 30 & wait").spawn().unwrap();
        let mut group = ProcessGroup::of(&child);
        let pgid = group.id().unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let status = group.terminate(&mut child).await.unwrap();
        assert_eq!(status.code(), Some(3), "the script's trap answered, not the guard");
        assert!(!alive(pgid));
        assert!(!LIVE.lock().unwrap().contains(&pgid));
    }

    #[tokio::test]
    async fn stop_rest_ends_background_processes_after_the_leader() {
        let mut child = guarded("sleep 30 >/dev/null 2>&1 & exit 0").spawn().unwrap();
        let mut group = ProcessGroup::of(&child);
        let pgid = group.id().unwrap();
        assert!(child.wait().await.unwrap().success());
        assert!(alive(pgid), "the background sleep is still there");
        group.stop_rest().await;
        assert!(!alive(pgid));
    }
}
