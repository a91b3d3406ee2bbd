//! Pseudo-terminals for interactive jobs (`gpuq shell`, issue 17): a job that
//! runs on a terminal gets its own session with the terminal's slave side as
//! its controlling terminal and stdio; whoever holds the master side types
//! into it (Ctrl-C and Ctrl-D are the line discipline's, as in any terminal)
//! and reads what it prints. The supervisor serves it ([`crate::terminal`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

impl WindowSize {
    fn winsize(self) -> libc::winsize {
        libc::winsize {
            ws_row: self.rows,
            ws_col: self.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// Both sides of a new pseudo-terminal.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal of `size`; both descriptors are close-on-exec.
pub fn open(size: WindowSize) -> io::Result<Pty> {
    let (mut master, mut slave) = (-1, -1);
    let ws = size.winsize();
    // SAFETY: openpty writes two descriptors into our ints; the name buffer and
    // termios are null (not wanted), the winsize is ours.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openpty succeeded: both are open descriptors that we now own.
    let pty = unsafe {
        Pty {
            master: OwnedFd::from_raw_fd(master),
            slave: OwnedFd::from_raw_fd(slave),
        }
    };
    for fd in [pty.master.as_raw_fd(), pty.slave.as_raw_fd()] {
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(pty)
}

/// Tells the terminal (and so the job, by SIGWINCH) its new size.
pub fn resize(master: BorrowedFd<'_>, size: WindowSize) -> io::Result<()> {
    let ws = size.winsize();
    // SAFETY: TIOCSWINSZ reads the winsize we pass.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd` run on the terminal of `slave`: stdin, stdout and stderr on it,
/// in a session of its own (so its process group is its pid, as the stop
/// protocol expects) with the terminal as its controlling terminal. Do not
/// also ask for a process group: a group leader cannot start a session.
pub fn attach(cmd: &mut Command, slave: &OwnedFd) -> io::Result<()> {
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave.try_clone()?));
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the slave by now
    // (the child sets up stdio before these hooks run).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A job on a terminal, and what it printed so far.
    struct OnTerminal {
        child: std::process::Child,
        input: std::fs::File,
        output: mpsc::Receiver<Vec<u8>>,
        seen: String,
        master: OwnedFd,
    }

    impl OnTerminal {
        fn start(script: &str, size: WindowSize) -> Self {
            let pty = open(size).unwrap();
            let mut cmd = Command::new("sh");
            cmd.args(["-c", script]);
            attach(&mut cmd, &pty.slave).unwrap();
            let child = cmd.spawn().unwrap();
            drop(pty.slave);
            let mut reader = std::fs::File::from(pty.master.try_clone().unwrap());
            let (tx, output) = mpsc::channel();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                // EIO once the job and everything on the terminal are gone.
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            });
            let input = std::fs::File::from(pty.master.try_clone().unwrap());
            Self {
                child,
                input,
                output,
                seen: String::new(),
                master: pty.master,
            }
        }

        fn wait_for(&mut self, needle: &str) {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !self.seen.contains(needle) {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match self.output.recv_timeout(left) {
                    Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                    Err(_) => panic!("{needle:?} never came; the terminal showed {:?}", self.seen),
                }
            }
        }

        fn type_in(&mut self, text: &[u8]) {
            self.input.write_all(text).unwrap();
        }

        fn exit_code(mut self) -> Option<i32> {
            self.child.wait().unwrap().code()
        }
    }

    #[test]
    fn input_output_size_and_exit_status_pass_through() {
        let mut t = OnTerminal::start(
            "stty size; test -t 0 && echo on-a-tty; read line; echo got:$line; exit 3",
            WindowSize { rows: 31, cols: 97 },
        );
        t.wait_for("31 97");
        t.wait_for("on-a-tty");
        t.type_in(b"hello\n");
        t.wait_for("got:hello");
        assert_eq!(t.exit_code(), Some(3));
    }

    #[test]
    fn ctrl_c_interrupts_and_ctrl_d_ends_input() {
        let mut t = OnTerminal::start(
            "trap 'echo interrupted; exit 130' INT; echo ready; while :; do sleep 0.05; done",
            WindowSize { rows: 24, cols: 80 },
        );
        t.wait_for("ready");
        t.type_in(b"\x03");
        t.wait_for("interrupted");
        assert_eq!(t.exit_code(), Some(130));

        let mut t = OnTerminal::start("cat; echo eof-seen", WindowSize { rows: 24, cols: 80 });
        t.type_in(b"line\n");
        t.wait_for("line");
        t.type_in(b"\x04");
        t.wait_for("eof-seen");
        assert_eq!(t.exit_code(), Some(0));
    }

    #[test]
    fn a_resize_reaches_the_job() {
        let mut t = OnTerminal::start(
            "trap 'stty size' WINCH; echo ready; i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done",
            WindowSize { rows: 24, cols: 80 },
        );
        t.wait_for("ready");
        resize(
            std::os::fd::AsFd::as_fd(&t.master),
            WindowSize {
                rows: 50,
                cols: 132,
            },
        )
        .unwrap();
        t.wait_for("50 132");
        let _ = t.child.kill();
    }
}
