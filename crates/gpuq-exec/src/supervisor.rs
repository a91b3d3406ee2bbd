//! The per-attempt supervisor: starts the job in its own process group (so the
//! group can be signalled as a whole), waits, and writes the exit record.

use crate::layout::{write_atomically, JobDir};
use serde::{Deserialize, Serialize};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};

/// How an attempt's process ended, as the supervisor saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Set when the command could not be started at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_error: Option<String>,
    pub ended_at_ms: i64,
}

impl ExitRecord {
    /// The record of an attempt that could not be started at all.
    pub fn spawn_failed(why: String, at_ms: i64) -> Self {
        Self {
            exit_code: None,
            signal: None,
            spawn_error: Some(why),
            ended_at_ms: at_ms,
        }
    }

    pub fn read(dir: &JobDir, attempt: u32) -> Option<ExitRecord> {
        let bytes = std::fs::read(dir.exit_record(attempt)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The reason shown to users: "exit 0", "exit 3", "killed by signal 9", …
    pub fn describe(&self) -> String {
        match (self.exit_code, self.signal, &self.spawn_error) {
            (_, _, Some(e)) => format!("could not start: {e}"),
            (_, Some(sig), _) => format!("killed by signal {sig} ({})", signal_name(sig)),
            (Some(code), None, _) => format!("exit {code}"),
            (None, None, None) => "ended without a status".into(),
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGBUS => "SIGBUS",
        _ => "signal",
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Body of `gpuq __supervise`. Stdout and stderr are already the attempt's log;
/// the environment and working directory are already the job's.
/// Reads the job's environment from stdin (the attempt's lock file, written by the
/// daemon), then empties the file: it may hold secrets.
fn read_environment() -> Result<std::collections::BTreeMap<String, String>, String> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::FromRawFd;
    // SAFETY: fd 0 is the lock file the daemon handed over; ManuallyDrop keeps it
    // open (closing it would release the lock).
    let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read_at(&mut chunk, buf.len() as u64)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let env = serde_json::from_slice(&buf).map_err(|e| e.to_string())?;
    file.set_len(0).map_err(|e| e.to_string())?;
    Ok(env)
}

/// Credentials the job takes before it starts (the supervisor itself stays root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

pub fn supervise(
    dir: &JobDir,
    attempt: u32,
    argv: &[String],
    env_from_stdin: bool,
    credentials: Option<Credentials>,
) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("gpuq supervisor: empty command");
        return 2;
    };
    let mut cmd = Command::new(program);
    // Its own process group (pgid = its pid), so the stop protocol can signal the
    // job and everything it started at once. No pre_exec hook: the spawn can use
    // posix_spawn rather than fork, which keeps the start latency low.
    cmd.args(args).stdin(Stdio::null()).process_group(0);
    if env_from_stdin {
        match read_environment() {
            Ok(env) => {
                cmd.env_clear().envs(env);
            }
            Err(e) => {
                eprintln!("gpuq supervisor: cannot read the job's environment: {e}");
                return 1;
            }
        }
    }
    if let Some(c) = credentials {
        let groups: Vec<libc::gid_t> = c.groups.clone();
        // SAFETY: setgroups/setgid/setuid are async-signal-safe and use only data
        // captured before the fork. Groups and gid go first, while still root.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(c.gid) != 0
                    || libc::setuid(c.uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let record = match cmd.spawn() {
        Err(e) => {
            eprintln!("gpuq: cannot start {program:?}: {e}");
            ExitRecord {
                exit_code: Some(127),
                signal: None,
                spawn_error: Some(format!("{program}: {e}")),
                ended_at_ms: now_ms(),
            }
        }
        Ok(mut child) => {
            // The job is its own process group leader: pgid == pid.
            if let Err(e) =
                write_atomically(&dir.pgid_file(attempt), child.id().to_string().as_bytes())
            {
                eprintln!("gpuq supervisor: cannot record the job's process group: {e}");
            }
            let status = loop {
                match child.wait() {
                    Ok(s) => break Some(s),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        eprintln!("gpuq supervisor: wait failed: {e}");
                        break None;
                    }
                }
            };
            // Leftover processes of the job (daemons it forked) would hold its GPUs:
            // end the whole group, then forget its id so no later signal can hit a reused pid.
            let pgid = child.id() as i32;
            // SAFETY: plain syscall on the job's own process group (pgid > 1, it was our child).
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            let _ = std::fs::remove_file(dir.pgid_file(attempt));
            ExitRecord {
                exit_code: status.and_then(|s| s.code()),
                signal: status.and_then(|s| s.signal()),
                spawn_error: None,
                ended_at_ms: now_ms(),
            }
        }
    };
    let json = serde_json::to_vec(&record).expect("exit record serializes");
    if let Err(e) = write_atomically(&dir.exit_record(attempt), &json) {
        eprintln!("gpuq supervisor: cannot write the exit record: {e}");
        return 1;
    }
    0
}
