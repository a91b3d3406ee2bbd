//! The supervisor's side of `gpuq shell`: the job runs on a pseudo-terminal
//! ([`crate::pty`]); the supervisor keeps its master side, copies what the job
//! prints to the attempt's log and to the attached client, and listens on a
//! unix socket in the job directory (the daemon's, mode 0600) for that client.
//! The daemon authenticates the user and copies bytes between them: it never
//! parses the stream.
//!
//! The stream: from the client, frames of `[kind: u8][length: u16 BE][payload]`,
//! kind [`FRAME_INPUT`] (bytes typed: Ctrl-C and Ctrl-D are bytes, the line
//! discipline makes them signals and end of input) or [`FRAME_RESIZE`] (rows
//! and columns, two u16 BE); to the client, the terminal's output as it is.
//! A new client replaces the old one and first gets the last
//! [`SCROLLBACK`] bytes. When the client goes away and none comes back within
//! [`HANGUP_GRACE`] (a daemon restart drops the connection; `gpuq shell`
//! attaches again), the terminal hangs up (SIGHUP to the job), as when a
//! terminal window closes: the GPUs are freed.

use crate::pty::{self, WindowSize};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};

pub const FRAME_INPUT: u8 = 0;
pub const FRAME_RESIZE: u8 = 1;
/// Output kept for a client that attaches late (the shell's first prompt).
pub const SCROLLBACK: usize = 64 * 1024;
/// How long a terminal whose client went away waits for another before it
/// hangs up: a daemon restart drops the client's connection, and `gpuq shell`
/// attaches again within this.
pub const HANGUP_GRACE: std::time::Duration = std::time::Duration::from_secs(15);
/// The largest frame payload a client sends.
pub const MAX_FRAME: usize = u16::MAX as usize;

/// One frame from the client, encoded.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = payload.len().min(MAX_FRAME);
    let mut out = Vec::with_capacity(3 + len);
    out.push(kind);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&payload[..len]);
    out
}

/// A resize frame.
pub fn resize_frame(size: WindowSize) -> Vec<u8> {
    let mut p = size.rows.to_be_bytes().to_vec();
    p.extend_from_slice(&size.cols.to_be_bytes());
    frame(FRAME_RESIZE, &p)
}

/// What the supervisor shares between its threads.
struct Shared {
    master: OwnedFd,
    /// The attached client, with its number (a newer client replaces it).
    client: Mutex<Option<(u64, UnixStream)>>,
    scrollback: Mutex<VecDeque<u8>>,
    /// The job's process group (its pid: it leads its own session).
    pgid: Mutex<Option<i32>>,
    /// The number of the latest client to attach.
    latest: std::sync::atomic::AtomicU64,
}

/// Opens the terminal a job will run on and its socket: the socket is made
/// with mode 0600 (only the supervisor's user, the daemon's, may connect), and
/// the terminal's job side belongs to the job's user, as a login's does.
pub fn open(socket: &std::path::Path, owner: Option<u32>) -> io::Result<(pty::Pty, UnixListener)> {
    let pty = pty::open(WindowSize { rows: 24, cols: 80 })?;
    if let Some(uid) = owner {
        // SAFETY: fchown/fchmod on a descriptor we own.
        unsafe {
            if libc::fchown(pty.slave.as_raw_fd(), uid, u32::MAX) != 0
                || libc::fchmod(pty.slave.as_raw_fd(), 0o620) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
    }
    let _ = std::fs::remove_file(socket);
    // SAFETY: umask is process-wide; the supervisor is single-threaded here.
    let old = unsafe { libc::umask(0o077) };
    let listener = UnixListener::bind(socket);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    Ok((pty, listener?))
}

/// A terminal being served: started before the job, so the job's first
/// output is kept.
pub struct Terminal {
    shared: Arc<Shared>,
    output: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Starts copying the master's output to `log` and serving `listener`.
    pub fn serve(master: OwnedFd, listener: UnixListener, log: std::fs::File) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            master,
            client: Mutex::new(None),
            scrollback: Mutex::new(VecDeque::with_capacity(SCROLLBACK)),
            pgid: Mutex::new(None),
            latest: std::sync::atomic::AtomicU64::new(0),
        });
        let reader = Arc::clone(&shared);
        let output = std::thread::Builder::new()
            .name("terminal-output".into())
            .spawn(move || copy_output(&reader, log))?;
        let acceptor = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("terminal-accept".into())
            .spawn(move || accept_clients(&acceptor, listener))?;
        Ok(Self {
            shared,
            output: Some(output),
        })
    }

    /// The job started: input hang-ups go to its group from now on.
    pub fn started(&self, pgid: i32) {
        *lock(&self.shared.pgid) = Some(pgid);
    }

    /// After the job ended: waits (a little) until its terminal is closed
    /// everywhere, so the output is all copied, then disconnects the client. A
    /// process that escaped the job's session may hold the terminal open: it is
    /// not waited for.
    pub fn finish(mut self) {
        if let Some(output) = self.output.take() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while !output.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        if let Some((_, c)) = lock(&self.shared.client).take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn copy_output(shared: &Shared, mut log: std::fs::File) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: read into our buffer from a descriptor we own.
        let n = unsafe {
            libc::read(
                shared.master.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // EIO: every descriptor of the terminal's other side is closed: the job is gone.
        if n <= 0 {
            return;
        }
        let data = &buf[..n as usize];
        let _ = log.write_all(data);
        {
            let mut sb = lock(&shared.scrollback);
            sb.extend(data);
            let excess = sb.len().saturating_sub(SCROLLBACK);
            sb.drain(..excess);
        }
        let mut client = lock(&shared.client);
        if let Some((_, c)) = client.as_mut() {
            if c.write_all(data).is_err() {
                *client = None;
            }
        }
    }
}

fn accept_clients(shared: &Arc<Shared>, listener: UnixListener) {
    for (number, conn) in (1u64..).zip(listener.incoming()) {
        let Ok(mut conn) = conn else { continue };
        let Ok(reader) = conn.try_clone() else {
            continue;
        };
        {
            let mut client = lock(&shared.client);
            if let Some((_, old)) = client.take() {
                // Its reader sees the end, but must not hang the terminal up.
                let _ = old.shutdown(std::net::Shutdown::Both);
            }
            let sb = lock(&shared.scrollback);
            let (a, b) = sb.as_slices();
            if conn.write_all(a).and_then(|_| conn.write_all(b)).is_err() {
                continue;
            }
            *client = Some((number, conn));
            shared
                .latest
                .store(number, std::sync::atomic::Ordering::SeqCst);
        }
        let shared = Arc::clone(shared);
        let _ = std::thread::Builder::new()
            .name("terminal-input".into())
            .spawn(move || {
                copy_input(&shared, reader);
                {
                    let mut client = lock(&shared.client);
                    // A replaced client's leaving is nothing; the current one's is.
                    if client.as_ref().is_none_or(|(n, _)| *n != number) {
                        return;
                    }
                    *client = None;
                }
                // Hang up unless another client comes within the grace.
                std::thread::sleep(HANGUP_GRACE);
                if shared.latest.load(std::sync::atomic::Ordering::SeqCst) == number {
                    hang_up(&shared);
                }
            });
    }
}

/// Copies one client's frames to the terminal until it goes away.
fn copy_input(shared: &Shared, mut conn: UnixStream) {
    let mut header = [0u8; 3];
    let mut payload = vec![0u8; MAX_FRAME];
    loop {
        if conn.read_exact(&mut header).is_err() {
            return;
        }
        let len = u16::from_be_bytes([header[1], header[2]]) as usize;
        if conn.read_exact(&mut payload[..len]).is_err() {
            return;
        }
        let data = &payload[..len];
        match header[0] {
            FRAME_INPUT if write_all_fd(&shared.master, data).is_err() => return,
            FRAME_INPUT => {}
            FRAME_RESIZE if len == 4 => {
                let size = WindowSize {
                    rows: u16::from_be_bytes([data[0], data[1]]),
                    cols: u16::from_be_bytes([data[2], data[3]]),
                };
                if size.rows > 0 && size.cols > 0 {
                    let _ = pty::resize(shared.master.as_fd(), size);
                }
            }
            // A frame of a kind this side does not know is skipped (a newer client).
            _ => {}
        }
    }
}

fn write_all_fd(fd: &OwnedFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: write from our buffer to a descriptor we own.
        let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// The client went away: hang the terminal up, as a closed terminal window does.
fn hang_up(shared: &Shared) {
    if let Some(pgid) = *lock(&shared.pgid) {
        if pgid > 1 {
            // SAFETY: signals to the job's own session leader's group (pgid > 1).
            unsafe {
                libc::killpg(pgid, libc::SIGHUP);
                libc::killpg(pgid, libc::SIGCONT);
            }
        }
    }
}

/// Ends every process left in the job's session (`sid`): an interactive shell
/// puts each command in a process group of its own, which the job's group
/// signal does not reach. SIGHUP first (what a terminal's hang-up sends), then
/// SIGKILL to what is left. A process that left the session itself is out of
/// reach, as one that leaves its process group is for other jobs.
pub fn end_session(sid: i32) {
    if sid <= 1 {
        return;
    }
    let members = || -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| session_of(*pid) == Some(sid))
            .collect()
    };
    let first = members();
    if first.is_empty() {
        return;
    }
    for pid in &first {
        // SAFETY: plain signal to a process of the job's session.
        unsafe { libc::kill(*pid, libc::SIGHUP) };
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    for pid in members() {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The session id of a process, from `/proc/PID/stat` (field 6, after the
/// command name in parentheses, which may itself hold spaces and parentheses).
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_their_kind_and_length() {
        assert_eq!(frame(FRAME_INPUT, b"ab"), vec![0, 0, 2, b'a', b'b']);
        assert_eq!(
            resize_frame(WindowSize {
                rows: 40,
                cols: 300
            }),
            vec![1, 0, 4, 0, 40, 1, 44]
        );
        let big = vec![7u8; MAX_FRAME + 10];
        assert_eq!(frame(FRAME_INPUT, &big).len(), 3 + MAX_FRAME);
    }

    #[test]
    fn the_session_of_this_process_is_read_from_proc() {
        // SAFETY: getsid(0) cannot fail for the calling process.
        let sid = unsafe { libc::getsid(0) };
        assert_eq!(session_of(std::process::id() as i32), Some(sid));
    }
}
