//! Reproducibility captured at submit: the git checkout and the Python
//! interpreter of the job's directory, in bounded time and bounded size.
//!
//! Nothing here fails a submit: a missing git, a directory outside a checkout,
//! a missing pip or a slow command each leave their part out, with a note.
//! Git and Python are captured on two threads, each under a deadline, so the
//! whole takes at most [`GIT_BUDGET`] or [`PYTHON_BUDGET`], whichever is longer.

pub mod compare;
mod git;
mod python;

use gpuq_api::repro::Repro;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Time for all the git commands together.
const GIT_BUDGET: Duration = Duration::from_secs(2);
/// Time for the interpreter's probe and `pip freeze` (a cached freeze costs no time).
const PYTHON_BUDGET: Duration = Duration::from_millis(2500);

/// Turns capture off (as `--no-repro` does).
pub const NO_REPRO_ENV: &str = "GPUQ_NO_REPRO";

/// Whether to capture: not with `--no-repro`, nor with `GPUQ_NO_REPRO` set to anything but `0` or empty.
pub fn enabled(no_repro_flag: bool) -> bool {
    let off = match std::env::var_os(NO_REPRO_ENV) {
        Some(v) => !(v.is_empty() || v == "0"),
        None => false,
    };
    !(no_repro_flag || off)
}

/// What the capture looks at: the job's directory, command and environment.
pub struct Context<'a> {
    pub cwd: &'a Path,
    /// The job's argument vector (`None` for a `run` script).
    pub argv: Option<&'a [String]>,
    /// The spec's `run` script, when it has one.
    pub script: Option<&'a str>,
    /// The spec's variables: the job gets them on top of this process's
    /// environment, and so do the commands run here (PATH, pyenv's variables).
    pub env: &'a BTreeMap<String, String>,
    /// Where `pip freeze` results are kept between submits; `None`: nowhere.
    pub cache: Option<PathBuf>,
}

/// The capture for a job of `spec` submitted from `submit_cwd`, unless turned
/// off (`--no-repro`, `GPUQ_NO_REPRO=1`).
pub fn capture_for(spec: &gpuq_core::JobSpec, submit_cwd: &str, no_repro: bool) -> Option<Repro> {
    if !enabled(no_repro) {
        return None;
    }
    let cwd = spec.cwd.as_deref().unwrap_or(submit_cwd);
    Some(capture(&Context {
        cwd: Path::new(cwd),
        argv: spec.command.as_deref(),
        script: spec.run.as_deref(),
        env: &spec.env,
        cache: Some(cache_dir()),
    }))
}

/// The user's own cache (`$XDG_CACHE_HOME/gpuq`, else `~/.cache/gpuq`), not
/// `GPUQ_HOME`: an interpreter's packages are the same whichever daemon is
/// asked, and a lab's root-owned home is not the user's to write.
fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(x) = var("XDG_CACHE_HOME") {
        return PathBuf::from(x).join("gpuq");
    }
    match var("HOME") {
        Some(home) => PathBuf::from(home).join(".cache/gpuq"),
        None => gpuq_api::home::resolve_home().join("cache"),
    }
}

/// Captures what can be captured in time. The daemon fills in the command,
/// the directory and the environment.
pub fn capture(ctx: &Context<'_>) -> Repro {
    let started = Instant::now();
    let ((git, mut notes), (python, python_notes)) = std::thread::scope(|s| {
        let git = s.spawn(|| {
            let mut notes = Vec::new();
            let info = git::capture(ctx.cwd, started + GIT_BUDGET, &mut notes);
            (info, notes)
        });
        let mut notes = Vec::new();
        let python = python::capture(ctx, started + PYTHON_BUDGET, &mut notes);
        let git = git
            .join()
            .unwrap_or_else(|_| (None, vec!["git: capture failed".into()]));
        (git, (python, notes))
    });
    notes.extend(python_notes);
    Repro {
        captured_at: gpuq_api::home::now_ms(),
        hostname: hostname(),
        capture_ms: started.elapsed().as_millis() as u64,
        git,
        python,
        notes,
        ..Default::default()
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is ours and its length is passed.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    }
}

/// A finished (or stopped) command: the first `keep` bytes of its output, and
/// the size and SHA-256 of all of it.
pub(crate) struct Bounded {
    /// `None` when it was killed at the deadline.
    pub status: Option<ExitStatus>,
    pub stdout: Vec<u8>,
    /// All the bytes it wrote (more than `stdout` holds when it was cut).
    pub total: u64,
    pub sha256: [u8; 32],
}

impl Bounded {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
    pub fn timed_out(&self) -> bool {
        self.status.is_none()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim_end().to_string()
    }
}

/// Runs `cmd` (its own process group, no stdin, stderr discarded) until it
/// ends or `deadline` passes, keeping at most `keep` bytes of its output.
/// At the deadline its whole group is killed. `Err`: it could not start
/// (`NotFound`: the program is not installed).
pub(crate) fn run_bounded(
    cmd: &mut Command,
    keep: usize,
    deadline: Instant,
) -> std::io::Result<Bounded> {
    use sha2::Digest;
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    // The reader ends at end of file: when the command (and anything it started) is gone.
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut hasher = sha2::Sha256::new();
        let mut total = 0u64;
        let mut buf = [0u8; 64 * 1024];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            total += n as u64;
            let room = keep.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        let _ = tx.send((kept, total, <[u8; 32]>::from(hasher.finalize())));
    });
    let left = deadline.saturating_duration_since(Instant::now());
    let read = rx.recv_timeout(left).ok();
    let status = match read {
        Some(_) => wait_until(&mut child, deadline),
        None => None,
    };
    if status.is_none() {
        // SAFETY: signals the process group we created for this child only.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
    }
    let (stdout, total, sha256) = read
        .or_else(|| rx.recv_timeout(Duration::from_millis(100)).ok())
        .unwrap_or_default();
    Ok(Bounded {
        status,
        stdout,
        total,
        sha256,
    })
}

/// The child's exit status, or `None` if it is still running at `deadline`.
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => return None,
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_cut_at_its_deadline_and_its_output_bounded() {
        let start = Instant::now();
        let out = run_bounded(
            Command::new("sh").args(["-c", "echo hello; sleep 10"]),
            3,
            Instant::now() + Duration::from_millis(300),
        )
        .unwrap();
        assert!(out.timed_out());
        assert!(start.elapsed() < Duration::from_secs(3));

        let out = run_bounded(
            Command::new("sh").args(["-c", "printf 0123456789"]),
            4,
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        assert!(out.success());
        assert_eq!((out.stdout.as_slice(), out.total), (&b"0123"[..], 10));
        let missing = run_bounded(
            &mut Command::new("/nonexistent/gpuq-test"),
            4,
            Instant::now() + Duration::from_secs(1),
        );
        assert_eq!(
            missing.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn no_repro_turns_capture_off() {
        assert!(!enabled(true));
    }
}
