//! Runs `fabro` on a pseudo-terminal, the way a person at a terminal runs it: stdin, stdout and
//! stderr are the terminal, a test types lines and reads what the screen shows.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Terminal {
    child: Child,
    keyboard: File,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    /// Starts `command` with a new pseudo-terminal as its stdin, stdout and stderr.
    pub fn spawn(command: Command) -> Terminal {
        Terminal::start(command, None)
    }

    /// Like [`Terminal::spawn`], on a terminal of `rows` by `columns` characters.
    #[allow(dead_code)]
    pub fn spawn_sized(command: Command, rows: u16, columns: u16) -> Terminal {
        let size = libc::winsize { ws_row: rows, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
        Terminal::start(command, Some(size))
    }

    fn start(mut command: Command, size: Option<libc::winsize>) -> Terminal {
        let (mut master, mut slave) = (0, 0);
        let size = size.as_ref().map_or(std::ptr::null(), |size| size as *const libc::winsize);
        // SAFETY: openpty writes two new descriptors into the integers it is given and only reads
        // the size, which outlives the call.
        let opened =
            unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), size) };
        assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned by nobody else.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the terminal"));
        command.stdin(stdio(&slave)).stdout(stdio(&slave)).stderr(stdio(&slave));
        let child = command.spawn().expect("start fabro on a terminal");
        drop(slave);
        let keyboard = File::from(master.try_clone().expect("dup the terminal"));
        let screen = Arc::new(Mutex::new(Vec::new()));
        let shown = screen.clone();
        std::thread::spawn(move || {
            let mut master = File::from(master);
            let mut buffer = [0u8; 4096];
            // Reading fails with EIO once the program has closed the terminal.
            while let Ok(n) = master.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                shown.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        Terminal { child, keyboard, screen }
    }

    /// Everything shown so far.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits (at most 20 s) until the screen shows `text` `times` times.
    pub fn wait_for(&self, text: &str, times: usize) {
        let started = Instant::now();
        while self.screen().matches(text).count() < times {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the screen never showed {text:?}:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `line` and Enter.
    pub fn type_line(&mut self, line: &str) {
        self.keyboard.write_all(format!("{line}\r").as_bytes()).expect("type on the terminal");
    }

    /// Waits (at most 20 s) for the program to exit.
    pub fn wait(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for fabro") {
                return status;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "fabro did not exit:\n{}", self.screen());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
