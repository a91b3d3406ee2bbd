//! An attempt's output through its supervisor: the job writes to a pipe, and a
//! thread of the supervisor appends what it reads to the attempt's log, within
//! limits. Beyond `max_bytes` the log keeps its head as written and, of the
//! rest, only the last `min(max_bytes / 2, TAIL_MAX)` bytes (in memory, written
//! when the output ends) after a line saying how many bytes were dropped; the
//! head is the rest of `max_bytes`. The tail is capped because it lives in the
//! supervisor, outside the job's memory limits: one per running job. While the log's disk has
//! less free space than `reserve_bytes`, output is dropped and counted, so a
//! job cannot fill the disk the database lives on. The log stays append-only:
//! `gpuq logs -f` follows it as before.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The supervisor's limits on one attempt's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    pub max_bytes: u64,
    /// Free bytes kept on the log's filesystem.
    pub reserve_bytes: u64,
}

/// The most bytes of tail one attempt's supervisor holds in memory, whatever
/// `max_bytes` is: 64 chatty jobs hold at most 256 MiB together.
pub const TAIL_MAX: u64 = 4 << 20;

/// How often free space is looked at while output flows.
const SPACE_CHECK: Duration = Duration::from_millis(500);
const SPACE_CHECK_BYTES: u64 = 1 << 20;

/// The copying thread; `finish` waits for the end of the output and writes the tail.
pub struct LogPump {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts copying from a new pipe into `log`; returns the pipe's write end
/// (the job's stdout and stderr) and the pump.
pub fn start(log: File, limits: LogLimits) -> std::io::Result<(OwnedFd, LogPump)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("log".into())
        .spawn(move || Copier::new(log, limits).run(File::from(read), &stopping))?;
    Ok((write, LogPump { stop, thread }))
}

impl LogPump {
    /// Waits up to `grace` for every writer to close the pipe (a process that
    /// left the job's group may hold it for ever), then writes the kept tail.
    pub fn finish(self, grace: Duration) {
        let until = Instant::now() + grace;
        while !self.thread.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// What the copier does with the bytes it reads.
struct Copier {
    log: File,
    limits: LogLimits,
    /// Bytes written to the log as they came (the head).
    written: u64,
    /// Past the head: the last bytes, oldest first, at most `tail_cap`.
    tail: Option<std::collections::VecDeque<u8>>,
    tail_cap: usize,
    /// Bytes that went through neither the head nor the kept tail.
    cut: u64,
    /// Bytes dropped while the disk was down to its reserve (not yet said).
    paused: u64,
    checked_at: Instant,
    since_check: u64,
    low: bool,
}

impl Copier {
    fn new(log: File, limits: LogLimits) -> Self {
        let tail_cap = (limits.max_bytes / 2).min(TAIL_MAX) as usize;
        Self {
            log,
            limits,
            written: 0,
            tail: None,
            tail_cap,
            cut: 0,
            paused: 0,
            checked_at: Instant::now() - SPACE_CHECK,
            since_check: SPACE_CHECK_BYTES,
            low: false,
        }
    }

    fn run(mut self, mut pipe: File, stop: &AtomicBool) {
        use std::io::Read;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // Wait for output, looking at `stop` now and then.
            let mut pfd = libc::pollfd {
                fd: pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd we own.
            let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
            if ready == 0 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                continue;
            }
            if ready < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.take(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        self.end();
    }

    /// True while the log's disk has less free space than the reserve.
    fn disk_low(&mut self, more: u64) -> bool {
        self.since_check += more;
        if self.since_check >= SPACE_CHECK_BYTES || self.checked_at.elapsed() >= SPACE_CHECK {
            self.since_check = 0;
            self.checked_at = Instant::now();
            // SAFETY: fstatvfs fills a struct we own for a descriptor we own.
            let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
            self.low = unsafe { libc::fstatvfs(self.log.as_raw_fd(), &mut st) } == 0
                && (st.f_bavail as u64).saturating_mul(st.f_frsize as u64)
                    < self.limits.reserve_bytes.saturating_add(more);
        }
        self.low
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.disk_low(bytes.len() as u64) {
            if self.paused == 0 {
                let _ = self.log.write_all(
                    b"\n[gpuq: output dropped: the disk holding this log is down to the space kept for the database]\n",
                );
            }
            self.paused += bytes.len() as u64;
            return;
        }
        if self.paused > 0 {
            let note = format!(
                "\n[gpuq: {} bytes of output dropped while the disk was full]\n",
                self.paused
            );
            self.paused = 0;
            let _ = self.log.write_all(note.as_bytes());
        }
        // A failed write (a full disk all the same) loses these bytes, never the job.
        let _ = self.log.write_all(bytes);
    }

    fn take(&mut self, mut bytes: &[u8]) {
        let head_cap = self.limits.max_bytes - self.tail_cap as u64;
        if self.tail.is_none() {
            let room = head_cap.saturating_sub(self.written) as usize;
            let now = room.min(bytes.len());
            self.write(&bytes[..now]);
            self.written += now as u64;
            bytes = &bytes[now..];
            if bytes.is_empty() {
                return;
            }
            let note = format!(
                "\n[gpuq: this log reached its limit of {}: from here only its last {} are kept, written when the job ends]\n",
                human(self.limits.max_bytes),
                human(self.tail_cap as u64)
            );
            self.write(note.as_bytes());
            // Room for the whole tail at once: it never grows past `tail_cap`.
            self.tail = Some(std::collections::VecDeque::with_capacity(self.tail_cap));
        }
        let cap = self.tail_cap;
        let tail = self.tail.as_mut().expect("set above");
        if bytes.len() >= cap {
            self.cut += (tail.len() + bytes.len() - cap) as u64;
            tail.clear();
            tail.extend(&bytes[bytes.len() - cap..]);
        } else {
            let over = (tail.len() + bytes.len()).saturating_sub(cap);
            self.cut += over as u64;
            tail.drain(..over);
            tail.extend(bytes);
        }
    }

    fn end(mut self) {
        let Some(tail) = self.tail.take() else {
            if self.paused > 0 {
                self.write(b"");
            }
            return;
        };
        let note = format!(
            "[gpuq: {} bytes dropped here (log limit {}); the last {} follow]\n",
            self.cut,
            human(self.limits.max_bytes),
            human(tail.len() as u64)
        );
        self.write(note.as_bytes());
        let (a, b) = tail.as_slices();
        self.write(a);
        self.write(b);
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pump_through(limits: LogLimits, chunks: &[&[u8]]) -> Vec<u8> {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let (w, pump) = start(log, limits).unwrap();
        let mut w = File::from(w);
        for c in chunks {
            w.write_all(c).unwrap();
        }
        drop(w);
        pump.finish(Duration::from_secs(5));
        std::fs::read(&path).unwrap()
    }

    #[test]
    fn under_the_limit_the_log_is_what_was_written() {
        let out = pump_through(
            LogLimits {
                max_bytes: 1000,
                reserve_bytes: 0,
            },
            &[b"hello\n", b"world\n"],
        );
        assert_eq!(out, b"hello\nworld\n");
    }

    #[test]
    fn over_the_limit_the_head_and_the_tail_are_kept_with_the_count_between() {
        let body: Vec<u8> = (0..10_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let chunks: Vec<&[u8]> = body.chunks(777).collect();
        let out = pump_through(
            LogLimits {
                max_bytes: 2000,
                reserve_bytes: 0,
            },
            &chunks,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("line 0\nline 1\n"), "{text}");
        assert!(text.ends_with("line 9998\nline 9999\n"), "{text}");
        let dropped = body.len() - 2000;
        assert!(
            text.contains(&format!("[gpuq: {dropped} bytes dropped here")),
            "{text}"
        );
        assert!(text.len() < 2400, "{}", text.len());
    }

    #[test]
    fn the_tail_in_memory_stays_bounded_whatever_the_limit() {
        let limits = LogLimits {
            max_bytes: 1 << 40,
            reserve_bytes: 0,
        };
        let log = File::create("/dev/null").unwrap();
        let mut c = Copier::new(log, limits);
        assert_eq!(c.tail_cap as u64, TAIL_MAX);
        // Past the head (1 TiB less the tail), 40 MiB more flow in odd chunks.
        c.written = limits.max_bytes - TAIL_MAX;
        let chunk = vec![b'x'; 65_521];
        let mut sent = 0u64;
        while sent < 40 << 20 {
            c.take(&chunk);
            sent += chunk.len() as u64;
        }
        let tail = c.tail.as_ref().unwrap();
        assert_eq!(tail.len() as u64, TAIL_MAX);
        assert!(
            (tail.capacity() as u64) < 2 * TAIL_MAX,
            "{}",
            tail.capacity()
        );
        assert_eq!(c.cut, sent - TAIL_MAX);
        // A small limit keeps its half as before.
        let small = Copier::new(
            File::create("/dev/null").unwrap(),
            LogLimits {
                max_bytes: 2000,
                reserve_bytes: 0,
            },
        );
        assert_eq!(small.tail_cap, 1000);
    }
}
