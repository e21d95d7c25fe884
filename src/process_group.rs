//! The process groups that stages start (command stages, agents' shell commands, lifecycle hooks,
//! CLI agents, stdio MCP servers), and how their lives are tied to fabro's.
//!
//! [`ProcessGroup::spawn`] starts a command as the leader of a new process group (its pid is the
//! group id) and returns it with fabro's handle on the group: the handle signals the group, stops
//! it with a grace period, and kills it when dropped. Every live handle is also listed in a
//! registry, so an exit that skips destructors ([`kill_all`] before `std::process::exit`) kills
//! them too.
//!
//! When fabro dies with no chance to run code (SIGKILL, a crash, the OOM killer), a watcher kills
//! the groups: one process per fabro, forked from it once, when the first group is spawned. fabro
//! tells it through a pipe which groups have a live handle. The pipe's write end is fabro's alone
//! (close-on-exec, so no command inherits it), so when fabro is gone the watcher reads the end of
//! the pipe at once (and it also checks every [`WATCH_POLL`] that fabro is still its parent), kills
//! every group it was told of, and exits. A watcher that was killed is reaped and replaced, and the
//! new one told of every live group, the next time fabro writes to it.
//!
//! Commands themselves are not forked from fabro. Spawned with nothing but a process group set,
//! std starts them with `posix_spawn` (a vfork-like clone that copies no page tables), so fabro's
//! pages do not turn copy-on-write with every command it runs. std takes that path unless the
//! command needs what only a fork can do; the one case fabro meets is a program looked up on PATH
//! while the command's environment was cleared or its PATH changed, so such a program must be
//! named by its full path ([`find_program`]; the bwrap sandbox does).
//!
//! What this module must never do: set a `pre_exec` hook (it forces the fork path), or rely on
//! `PR_SET_PDEATHSIG` in a process fabro spawns (the signal comes when the spawning *thread*
//! ends, not fabro). bwrap's `--die-with-parent` is such a tie: fabro spawns from its runtime's
//! threads, which last as long as the run, never from a thread that ends before its command.
//!
//! Limits: a group is not watched between its spawn and the record that follows it, a few
//! microseconds of fabro's own code with no await between them; a command stage's process record
//! (`run_dir::stage_process`) lets the next resume kill a group that escaped that way, or that
//! outlived a watcher killed together with fabro. The watcher holds [`WATCHED_MAX`] groups; when
//! full it forgets the groups that have emptied, and past that it leaves new groups unwatched.
//! A process that leaves its group on purpose (`setsid`) is beyond all of this. The watcher is a
//! fork of fabro as it was when the first group started: the pages fabro rewrites afterwards stay
//! with the watcher, so it costs at most the memory fabro had then.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How often the watcher checks that fabro is still its parent, besides reading the pipe's end.
pub const WATCH_POLL: Duration = Duration::from_millis(100);
/// How many groups the watcher holds at once.
pub const WATCHED_MAX: usize = 1 << 16;
/// How long a stopped group gets after SIGTERM before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// How often a stopping group is looked at.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// The live handles and the watcher that kills their groups if fabro dies.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry { live: BTreeSet::new(), watcher: None, serial: 0 });

/// Kills every group that still has a live handle; for exits that skip destructors.
pub fn kill_all() {
    let live: Vec<Watched> = registry().live.iter().copied().collect();
    for watched in live {
        signal(watched.pgid, libc::SIGKILL);
    }
}

/// A stage's process group. Dropped while armed, it kills the whole group.
#[derive(Debug)]
pub struct ProcessGroup {
    watched: Option<Watched>,
}

impl ProcessGroup {
    /// Starts `command` as the leader of a new process group that dies with fabro, and returns
    /// the child with the group's handle. A command that cannot start is an error of the spawn
    /// (`NotFound`, `PermissionDenied`, ...), as is a watcher that cannot be started.
    pub fn spawn(command: &mut tokio::process::Command) -> io::Result<(tokio::process::Child, ProcessGroup)> {
        command.process_group(0);
        registry().start_watcher()?;
        let child = command.spawn()?;
        let Some(pgid) = child.id().and_then(|pid| i32::try_from(pid).ok()).filter(|pgid| *pgid > 1) else {
            return Ok((child, ProcessGroup { watched: None }));
        };
        match registry().watch(pgid) {
            Ok(watched) => Ok((child, ProcessGroup { watched: Some(watched) })),
            Err(error) => {
                // A group fabro cannot have killed when it dies does not run. (Dropping the
                // child hands it to tokio, which reaps it.)
                signal(pgid, libc::SIGKILL);
                Err(error)
            }
        }
    }

    /// The group id, while the handle is armed.
    pub fn id(&self) -> Option<i32> {
        self.watched.map(|watched| watched.pgid)
    }

    /// Whether the handle is armed and a process is left in the group.
    pub fn has_members(&self) -> bool {
        self.id().is_some_and(alive)
    }

    /// Stops every process in the group: SIGTERM, up to [`KILL_GRACE`] for the group to empty,
    /// then SIGKILL. Reaps the leader and returns its exit status when it could be had.
    pub async fn terminate(&mut self, child: &mut tokio::process::Child) -> Option<ExitStatus> {
        let Some(pgid) = self.id() else {
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
        let Some(pgid) = self.id() else { return };
        if signal(pgid, libc::SIGTERM) {
            let deadline = tokio::time::Instant::now() + KILL_GRACE;
            while alive(pgid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(GROUP_POLL).await;
            }
            signal(pgid, libc::SIGKILL);
        }
        self.forget();
    }

    /// Lets what is left of the group run on, past fabro too.
    pub fn release(&mut self) {
        self.forget();
    }

    /// Lets the group run on untouched by this handle and by the watcher.
    fn forget(&mut self) {
        if let Some(watched) = self.watched.take() {
            registry().forget(watched);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.id() {
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

/// The full path of `program` as a PATH search from fabro's environment finds it (the first
/// executable file of that name in an absolute PATH directory), or `None`. A command whose
/// environment is cleared or whose PATH is changed must name its program this way to be spawned
/// without forking fabro.
pub fn find_program(program: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).filter(|dir| dir.is_absolute()).map(|dir| dir.join(program)).find(|file| {
        std::fs::metadata(file).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    })
}

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A group with a live handle. The serial tells apart two handles on the same group id (a pid
/// reused after the first group emptied), so that forgetting one never forgets the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Watched {
    pgid: i32,
    serial: u64,
}

/// What fabro knows of its groups.
struct Registry {
    live: BTreeSet<Watched>,
    watcher: Option<watcher::Watcher>,
    serial: u64,
}

impl Registry {
    /// Starts the watcher unless it runs.
    fn start_watcher(&mut self) -> io::Result<()> {
        if self.watcher.is_none() {
            self.watcher = Some(watcher::Watcher::start(&self.live)?);
        }
        Ok(())
    }

    fn watch(&mut self, pgid: i32) -> io::Result<Watched> {
        self.serial += 1;
        let watched = Watched { pgid, serial: self.serial };
        self.live.insert(watched);
        if let Err(error) = self.tell(watcher::Record::Watch(watched)) {
            self.live.remove(&watched);
            return Err(error);
        }
        Ok(watched)
    }

    fn forget(&mut self, watched: Watched) {
        self.live.remove(&watched);
        if let Err(error) = self.tell(watcher::Record::Forget(watched)) {
            tracing::warn!(%error, "the process-group watcher was not told of a group let go");
        }
    }

    /// Sends `record` to the watcher; when it is gone, starts a new one, which learns every live
    /// group (`record` included, or not, as `live` already says).
    fn tell(&mut self, record: watcher::Record) -> io::Result<()> {
        let Some(watcher) = self.watcher.as_mut() else { return self.start_watcher() };
        match watcher.send(record) {
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                if let Some(gone) = self.watcher.take() {
                    gone.end();
                }
                self.start_watcher()
            }
            sent => sent,
        }
    }
}

mod watcher {
    //! The watcher process: started by a fork of fabro, after which it may only make
    //! async-signal-safe calls and never allocate (fabro's other threads may have held locks at
    //! the fork). Its table of groups is allocated before the fork and filled within its capacity.

    use std::collections::BTreeSet;
    use std::io::{self, Write};
    use std::os::fd::{FromRawFd, OwnedFd};

    use super::{Watched, WATCHED_MAX, WATCH_POLL};

    /// The descriptor the watcher reads its records from.
    const PIPE: libc::c_int = 3;
    /// A record's size: operation (u32), group id (i32), serial (u64). Writes this small to a
    /// pipe are atomic, so records from several threads never interleave.
    const RECORD: usize = 16;
    const WATCH: u32 = 1;
    const FORGET: u32 = 2;

    /// What fabro tells the watcher.
    #[derive(Debug, Clone, Copy)]
    pub(super) enum Record {
        Watch(Watched),
        Forget(Watched),
    }

    impl Record {
        fn encode(self) -> [u8; RECORD] {
            let (op, watched) = match self {
                Record::Watch(watched) => (WATCH, watched),
                Record::Forget(watched) => (FORGET, watched),
            };
            let mut bytes = [0; RECORD];
            bytes[..4].copy_from_slice(&op.to_ne_bytes());
            bytes[4..8].copy_from_slice(&watched.pgid.to_ne_bytes());
            bytes[8..].copy_from_slice(&watched.serial.to_ne_bytes());
            bytes
        }

        fn decode(bytes: &[u8]) -> Option<Record> {
            let op = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
            let pgid = i32::from_ne_bytes(bytes.get(4..8)?.try_into().ok()?);
            let serial = u64::from_ne_bytes(bytes.get(8..RECORD)?.try_into().ok()?);
            let watched = Watched { pgid, serial };
            match op {
                WATCH => Some(Record::Watch(watched)),
                FORGET => Some(Record::Forget(watched)),
                _ => None,
            }
        }
    }

    /// fabro's side of a running watcher.
    pub(super) struct Watcher {
        pid: libc::pid_t,
        pipe: std::fs::File,
    }

    impl Watcher {
        /// Forks the watcher and tells it of the groups in `live`.
        pub(super) fn start(live: &BTreeSet<Watched>) -> io::Result<Watcher> {
            let mut ends = [0; 2];
            // SAFETY: pipe2 writes two descriptors into the array it is given.
            if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: both descriptors were just opened and are owned here alone.
            let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
            let mut table: Vec<Watched> = Vec::with_capacity(WATCHED_MAX);
            let fabro = std::process::id() as libc::pid_t;
            // SAFETY: the child runs only `watch`, which keeps to async-signal-safe calls and
            // never allocates; it never returns.
            match unsafe { libc::fork() } {
                -1 => Err(io::Error::last_os_error()),
                0 => unsafe { watch(ends[0], fabro, &mut table) },
                pid => {
                    drop(read);
                    let mut watcher = Watcher { pid, pipe: std::fs::File::from(write) };
                    if let Err(error) =
                        live.iter().try_for_each(|watched| watcher.send(Record::Watch(*watched)))
                    {
                        watcher.end();
                        return Err(error);
                    }
                    Ok(watcher)
                }
            }
        }

        pub(super) fn send(&mut self, record: Record) -> io::Result<()> {
            self.pipe.write_all(&record.encode())
        }

        /// Ends the watcher without letting it kill what it holds (SIGKILL before its pipe
        /// closes), and reaps it, so it leaves no zombie. For a watcher whose pipe broke, which
        /// has exited already, only the reaping is left to do.
        pub(super) fn end(self) {
            let Watcher { pid, pipe } = self;
            // SAFETY: kill and waitpid on our own child; a null status pointer is allowed.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                drop(pipe);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }

        #[cfg(test)]
        pub(super) fn pid(&self) -> libc::pid_t {
            self.pid
        }
    }

    /// The watcher's life: let go of fabro's descriptors and signals, keep the table of groups
    /// as records come, and when fabro is gone kill them all.
    unsafe fn watch(pipe: libc::c_int, fabro: libc::pid_t, table: &mut Vec<Watched>) -> ! {
        detach(pipe);
        let mut buffer = [0u8; RECORD * 64];
        let mut filled = 0;
        let poll_ms = WATCH_POLL.as_millis() as libc::c_int;
        loop {
            let mut ready = libc::pollfd { fd: PIPE, events: libc::POLLIN, revents: 0 };
            if libc::poll(&mut ready, 1, poll_ms) > 0 {
                let Some(free) = buffer.get_mut(filled..) else { break };
                let read = libc::read(PIPE, free.as_mut_ptr().cast(), free.len());
                if read == 0 {
                    break; // every write end is closed: fabro is gone
                }
                if read < 0 {
                    let errno = *libc::__errno_location();
                    if errno == libc::EINTR || errno == libc::EAGAIN {
                        continue;
                    }
                    break;
                }
                filled += read as usize;
                let whole = filled - filled % RECORD;
                for bytes in buffer[..whole].chunks_exact(RECORD) {
                    match Record::decode(bytes) {
                        Some(Record::Watch(watched)) => add(table, watched),
                        Some(Record::Forget(watched)) => {
                            if let Some(at) = table.iter().rposition(|entry| *entry == watched) {
                                table.swap_remove(at);
                            }
                        }
                        None => {}
                    }
                }
                buffer.copy_within(whole..filled, 0);
                filled -= whole;
            }
            if libc::getppid() != fabro {
                break;
            }
        }
        for watched in table.iter() {
            super::signal(watched.pgid, libc::SIGKILL);
        }
        libc::_exit(0)
    }

    /// Adds `watched` to the table within its capacity (a push past it would allocate): when
    /// full, the groups that have emptied are dropped first.
    fn add(table: &mut Vec<Watched>, watched: Watched) {
        if table.len() == table.capacity() {
            table.retain(|entry| super::alive(entry.pgid));
        }
        if table.len() < table.capacity() {
            table.push(watched);
        }
    }

    /// Leaves fabro behind: a session of its own (no terminal's signals, no group stop of
    /// fabro's reaches it), every catchable signal ignored (fabro's handlers would write to
    /// fabro's descriptors), the pipe on [`PIPE`], /dev/null on stdin, stdout and stderr (no
    /// reader of fabro's output waits for the watcher), and nothing else of fabro's open.
    unsafe fn detach(pipe: libc::c_int) {
        libc::setsid();
        libc::prctl(libc::PR_SET_NAME, c"fabro-watcher".as_ptr());
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        let faults = [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGABRT,
            libc::SIGTRAP,
            libc::SIGSYS,
        ];
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP && !faults.contains(&sig) {
                libc::sigaction(sig, &ignore, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if pipe != PIPE && libc::dup2(pipe, PIPE) != PIPE {
            libc::_exit(127);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                if fd != null {
                    libc::dup2(null, fd);
                }
            }
        }
        close_from(PIPE + 1);
    }

    /// Closes every descriptor from `first` on.
    unsafe fn close_from(first: libc::c_int) {
        if libc::syscall(libc::SYS_close_range, first as libc::c_uint, libc::c_uint::MAX, 0 as libc::c_uint)
            == 0
        {
            return;
        }
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536)
        } else {
            1024
        };
        for fd in first..highest as libc::c_int {
            libc::close(fd);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn records_go_through_the_pipe_unchanged() {
            let watched = Watched { pgid: 4242, serial: u64::MAX - 1 };
            for record in [Record::Watch(watched), Record::Forget(watched)] {
                let decoded = Record::decode(&record.encode()).unwrap();
                assert_eq!(format!("{decoded:?}"), format!("{record:?}"));
            }
            assert!(Record::decode(&[0; RECORD]).is_none(), "an unknown operation is no record");
        }

        #[test]
        fn a_full_table_makes_room_by_dropping_emptied_groups_and_never_grows() {
            let mut table = Vec::with_capacity(2);
            // Group ids that no process has (above any pid_max).
            add(&mut table, Watched { pgid: i32::MAX - 1, serial: 1 });
            add(&mut table, Watched { pgid: i32::MAX - 2, serial: 2 });
            let capacity = table.capacity();
            for serial in 3..10 {
                add(&mut table, Watched { pgid: i32::MAX - serial as i32, serial });
            }
            assert_eq!(table.capacity(), capacity);
            assert!(table.len() <= capacity);
            assert_eq!(table.last().map(|watched| watched.serial), Some(9));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn sh(script: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("sh");
        command.arg("-c").arg(script).kill_on_drop(true);
        command
    }

    async fn run(mut command: tokio::process::Command) -> (ExitStatus, ProcessGroup) {
        let (mut child, group) = ProcessGroup::spawn(&mut command).unwrap();
        (child.wait().await.unwrap(), group)
    }

    #[tokio::test]
    async fn the_status_is_the_commands_own_and_the_command_leads_its_group() {
        assert_eq!(run(sh("exit 7")).await.0.code(), Some(7));
        assert_eq!(run(sh("kill -TERM $$")).await.0.signal(), Some(libc::SIGTERM));
        // Fields 4 and 5 of /proc/<pid>/stat: the parent and the process group.
        let mut command = sh("echo out; echo err >&2; cut -d' ' -f4,5 /proc/$$/stat");
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        let (child, group) = ProcessGroup::spawn(&mut command).unwrap();
        let pid = child.id().unwrap() as i32;
        let output = child.wait_with_output().await.unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        let fabro = std::process::id();
        assert_eq!(
            stdout,
            format!("out\n{fabro} {pid}\n"),
            "the command is fabro's child and leads its group"
        );
        assert_eq!(output.stderr, b"err\n");
        assert_eq!(group.id(), Some(pid));
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_is_an_error_of_the_spawn() {
        let mut missing = tokio::process::Command::new("/nonexistent/program");
        assert_eq!(ProcessGroup::spawn(&mut missing).unwrap_err().kind(), io::ErrorKind::NotFound);
        let mut not_on_path = tokio::process::Command::new("fabro-no-such-program");
        assert_eq!(ProcessGroup::spawn(&mut not_on_path).unwrap_err().kind(), io::ErrorKind::NotFound);
        let temp = tempfile::tempdir().unwrap();
        let script = temp.path().join("not-executable");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let mut denied = tokio::process::Command::new(&script);
        assert_eq!(ProcessGroup::spawn(&mut denied).unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        let mut no_dir = sh("true");
        no_dir.current_dir(temp.path().join("missing"));
        assert_eq!(ProcessGroup::spawn(&mut no_dir).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    thread_local! {
        /// How many times this thread forked (counted by a `pthread_atfork` hook; posix_spawn
        /// runs no such hook).
        static FORKS: Cell<u32> = const { Cell::new(0) };
    }

    /// Held by the tests that fork the registry's watcher or count forks.
    static WATCHER_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    extern "C" fn count_fork() {
        FORKS.with(|forks| forks.set(forks.get() + 1));
    }

    #[tokio::test]
    async fn spawning_a_group_does_not_fork_fabro() {
        let _serial = WATCHER_TESTS.lock().await;
        static HOOK: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a hook that only bumps a counter of the forking thread.
        HOOK.call_once(|| unsafe {
            libc::pthread_atfork(Some(count_fork), None, None);
        });
        registry().start_watcher().unwrap();
        let before = FORKS.with(Cell::get);
        let temp = tempfile::tempdir().unwrap();
        let mut in_dir = sh("exit 3");
        in_dir.current_dir(temp.path()).env("FABRO_SOMETHING", "x");
        assert_eq!(run(in_dir).await.0.code(), Some(3));
        // A cleared environment with the program named by its full path (as the sandbox does).
        let mut cleared = tokio::process::Command::new(find_program("sh".as_ref()).unwrap());
        cleared.arg("-c").arg("test -z \"$HOME\"").env_clear().env("PATH", "/nonexistent");
        assert!(run(cleared).await.0.success());
        assert_eq!(FORKS.with(Cell::get), before, "a command was forked from fabro");

        // The hook does count: a bare name with PATH changed goes the fork path.
        let mut forked = sh("true");
        forked.env("PATH", std::env::var_os("PATH").unwrap());
        run(forked).await;
        assert_eq!(FORKS.with(Cell::get), before + 1);
    }

    #[tokio::test]
    async fn terminate_stops_the_group_and_gets_the_commands_status() {
        let (mut child, mut group) =
            ProcessGroup::spawn(&mut sh("trap 'exit 3' TERM; sleep 30 & wait")).unwrap();
        let pgid = group.id().unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let status = group.terminate(&mut child).await.unwrap();
        assert_eq!(status.code(), Some(3), "the script's trap answered");
        assert!(!alive(pgid));
        assert!(!registry().live.iter().any(|watched| watched.pgid == pgid));
    }

    #[tokio::test]
    async fn stop_rest_ends_background_processes_after_the_leader() {
        let (status, mut group) = run(sh("sleep 30 >/dev/null 2>&1 & exit 0")).await;
        assert!(status.success());
        let pgid = group.id().unwrap();
        assert!(group.has_members(), "the background sleep is still there");
        group.stop_rest().await;
        assert!(!alive(pgid));
        assert!(!group.has_members());
    }

    /// Waits up to two seconds for `done`.
    fn within_two_seconds(mut done: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !done() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// A `sleep 30` leading its own group, not known to the registry.
    fn sleeping_group() -> std::process::Child {
        let mut command = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command.arg("30").spawn().unwrap()
    }

    #[test]
    fn a_watcher_whose_pipe_closes_kills_what_it_was_told_of_and_spares_what_was_let_go() {
        let (mut known, mut told, mut let_go) = (sleeping_group(), sleeping_group(), sleeping_group());
        let watched = |child: &std::process::Child, serial| Watched { pgid: child.id() as i32, serial };
        // A watcher of its own (not the registry's), as one started anew: it learns `known` at start.
        let mut watcher = watcher::Watcher::start(&BTreeSet::from([watched(&known, 1)])).unwrap();
        watcher.send(watcher::Record::Watch(watched(&told, 2))).unwrap();
        watcher.send(watcher::Record::Watch(watched(&let_go, 3))).unwrap();
        watcher.send(watcher::Record::Forget(watched(&let_go, 3))).unwrap();
        // The same group id with another serial is another handle: forgetting it keeps `told`.
        watcher.send(watcher::Record::Forget(watched(&told, 99))).unwrap();
        let pid = watcher.pid();
        // Closing the write end is what fabro's death does.
        drop(watcher);
        assert!(within_two_seconds(|| known.try_wait().unwrap().is_some()), "the group known at start lives");
        assert!(within_two_seconds(|| told.try_wait().unwrap().is_some()), "the group told of lives");
        assert_eq!(known.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(told.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(let_go.try_wait().unwrap().is_none(), "the group let go was killed");
        let _ = let_go.kill();
        let _ = let_go.wait();
        // The watcher exited by itself.
        let mut status = 0;
        // SAFETY: waitpid on the watcher this test forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{status:#x}");
    }

    #[tokio::test]
    async fn a_killed_watcher_is_reaped_and_replaced() {
        let _serial = WATCHER_TESTS.lock().await;
        registry().start_watcher().unwrap();
        let first = registry().watcher.as_ref().map(watcher::Watcher::pid).unwrap();
        let comm = std::fs::read_to_string(format!("/proc/{first}/comm")).unwrap();
        assert_eq!(comm.trim(), "fabro-watcher");
        // SAFETY: killing the watcher this process forked.
        unsafe { libc::kill(first, libc::SIGKILL) };
        let state = || std::fs::read_to_string(format!("/proc/{first}/stat")).unwrap_or_default();
        assert!(within_two_seconds(|| state().contains(") Z ")), "the watcher did not die: {}", state());
        // The next group fabro starts finds the pipe broken: the watcher is reaped and replaced.
        let (status, group) = run(sh("exit 0")).await;
        assert!(status.success());
        drop(group);
        let second = registry().watcher.as_ref().map(watcher::Watcher::pid).unwrap();
        assert_ne!(first, second);
        // SAFETY: probing a pid; a zombie would still answer.
        assert_eq!(unsafe { libc::kill(first, 0) }, -1, "the killed watcher was not reaped");
        assert!(std::fs::read_to_string(format!("/proc/{second}/comm")).is_ok());
    }
}
