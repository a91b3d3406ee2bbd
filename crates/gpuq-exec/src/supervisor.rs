//! The per-attempt supervisor: starts the job in its own process group (so the
//! group can be signalled as a whole), waits, and writes the exit record.

/// `eprintln!` that never panics: the supervisor's stderr is the attempt's log,
/// and a write to it failing on a full disk must not kill the process that
/// records the job's end (eprintln! panics on a failed write).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use crate::layout::{exit_record_name, pgid_file_name, JobDir};
use crate::safe_fs::Dir;
use serde::{Deserialize, Serialize};
use std::os::fd::AsFd;
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
    /// The command can never start as given (not found, not executable, its
    /// directory gone): a retry would fail the same way. An exit status, even
    /// a shell's 127, never sets this.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cannot_start: bool,
    pub ended_at_ms: i64,
    /// What the attempt's cgroup counted (memory peak and limit, CPU time,
    /// an OOM kill); `None` where the job ran unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::CgroupUsage>,
}

impl ExitRecord {
    /// The record of an attempt that could not be started at all.
    pub fn spawn_failed(why: String, at_ms: i64) -> Self {
        Self {
            exit_code: None,
            signal: None,
            spawn_error: Some(why),
            cannot_start: false,
            ended_at_ms: at_ms,
            usage: None,
        }
    }

    /// The record of a command that can never start as given (see `cannot_start`).
    pub fn cannot_start(why: String, at_ms: i64) -> Self {
        Self {
            cannot_start: true,
            ..Self::spawn_failed(why, at_ms)
        }
    }

    pub fn read(dir: &JobDir, attempt: u32) -> Option<ExitRecord> {
        Self::load(dir, attempt).ok().flatten()
    }

    /// The record, `Ok(None)` when there is none (or it is not one), or the error
    /// that kept it from being looked at: out of descriptors or memory says nothing
    /// about how the attempt ended, and a caller should look again.
    pub fn load(dir: &JobDir, attempt: u32) -> std::io::Result<Option<ExitRecord>> {
        let transient = |e: &std::io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EINTR | libc::EAGAIN)
            )
        };
        let bytes = match Dir::open(dir.root())
            .and_then(|d| d.read_regular(&exit_record_name(attempt), MAX_RECORD_BYTES, None))
        {
            Ok(bytes) => bytes,
            Err(e) if transient(&e) => return Err(e),
            Err(_) => return Ok(None),
        };
        Ok(serde_json::from_slice(&bytes).ok())
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

/// An exit record is a few hundred bytes; a larger file is not one.
const MAX_RECORD_BYTES: u64 = 64 * 1024;
/// How long the supervisor waits between tries to write an exit record (a full disk).
const RECORD_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

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

/// Takes `c`'s ids for good: groups and gid first, while still allowed.
/// Async-signal-safe (plain syscalls on data captured earlier), so it may run
/// between fork and exec.
pub(crate) fn take_ids(c: &Credentials) -> std::io::Result<()> {
    // SAFETY: plain syscalls on owned data.
    unsafe {
        if libc::setgroups(c.groups.len(), c.groups.as_ptr()) != 0
            || libc::setgid(c.gid) != 0
            || libc::setuid(c.uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What one supervisor run needs (the command line of `gpuq __supervise`).
pub struct Supervision<'a> {
    pub dir: &'a JobDir,
    pub attempt: u32,
    pub argv: &'a [String],
    pub env_from_stdin: bool,
    /// The account the job runs as; `None`: the supervisor's own.
    pub credentials: Option<Credentials>,
    /// Entered by the job after it dropped to `credentials`, so a directory the
    /// job's user may not enter is never entered on its behalf.
    pub cwd: Option<&'a std::path::Path>,
    /// Run the job on a pseudo-terminal served on the attempt's terminal socket
    /// (`gpuq shell`), instead of with no input.
    pub terminal: bool,
    /// The job runs in this podman container (its argv is podman's, up to
    /// `run`): removed after the job ends, so nothing of it outlives a SIGKILL.
    pub container: Option<String>,
    /// The job's output goes through the supervisor, which keeps the log
    /// within these limits; `None`: the job writes the log itself.
    pub log: Option<crate::log_pipe::LogLimits>,
    /// The daemon made the attempt's cgroups (recorded in the job directory):
    /// the job enters them before its code runs, and the attempt ends only
    /// once they are empty.
    pub cgroups: bool,
}

pub fn supervise(s: Supervision<'_>) -> i32 {
    let attempt = s.attempt;
    let Some((program, args)) = s.argv.split_first() else {
        say!("gpuq supervisor: empty command");
        return 2;
    };
    // The job directory is opened once, before anything else: every record below is
    // written through this descriptor, whatever the job does to paths meanwhile.
    let dir = match Dir::open(s.dir.root()) {
        Ok(d) => d,
        Err(e) => {
            say!(
                "gpuq supervisor: cannot open the job directory {}: {e}",
                s.dir.root().display()
            );
            return 1;
        }
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    let mut terminal = None;
    let mut pump = None;
    if s.terminal {
        // The job leads a session of its own on the terminal: its process group is
        // its pid too, as the stop protocol expects.
        let socket = s.dir.terminal_socket(attempt);
        let opened = crate::terminal::open(&socket, s.credentials.as_ref().map(|c| c.uid))
            .and_then(|(pty, listener)| {
                crate::pty::attach(&mut cmd, &pty.slave)?;
                let log = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
                crate::terminal::Terminal::serve(pty.master, listener, log)
            });
        match opened {
            Ok(t) => terminal = Some(t),
            Err(e) => {
                let why = format!("cannot open the job's terminal: {e}");
                say!("gpuq: {why}");
                return finish(&dir, attempt, ExitRecord::spawn_failed(why, now_ms()));
            }
        }
    } else {
        // Its own process group (pgid = its pid), so the stop protocol can signal the
        // job and everything it started at once.
        cmd.stdin(Stdio::null()).process_group(0);
        if let Some(limits) = s.log {
            match pipe_output(&mut cmd, limits) {
                Ok(p) => pump = Some(p),
                Err(e) => say!("gpuq supervisor: the log is not limited: {e}"),
            }
        }
    }
    let mut job_env = None;
    if s.env_from_stdin {
        match read_environment() {
            Ok(env) => {
                cmd.env_clear().envs(&env);
                job_env = Some(env);
            }
            Err(e) => {
                say!("gpuq supervisor: cannot read the job's environment: {e}");
                return 1;
            }
        }
    }
    if let Some(cwd) = s.cwd {
        if let Err(e) = enter_as(cwd, s.credentials.as_ref()) {
            let why = format!("cannot enter the working directory {}: {e}", cwd.display());
            say!("gpuq: {why}");
            let record = if permanent(&e) {
                ExitRecord::cannot_start(why, now_ms())
            } else {
                ExitRecord::spawn_failed(why, now_ms())
            };
            return finish(&dir, attempt, record);
        }
    }
    // The job's groups: their cgroup.procs files are opened now, and written
    // by the child itself between fork and exec, so nothing of the job ever
    // runs outside them. The supervisor stays out: it must outlive an OOM kill.
    let groups = if s.cgroups {
        let entered = crate::cgroup::JobGroups::load(s.dir, attempt).and_then(|g| {
            let g =
                g.ok_or_else(|| std::io::Error::other("the attempt's cgroup record is missing"))?;
            let files = g
                .procs_files()
                .iter()
                .map(|p| std::fs::OpenOptions::new().write(true).open(p))
                .collect::<std::io::Result<Vec<_>>>();
            match files {
                Ok(files) => Ok((g, files)),
                Err(e) => {
                    // The job never runs: its groups go with the attempt.
                    let _ = g.remove();
                    Err(e)
                }
            }
        });
        match entered {
            Ok(g) => Some(g),
            Err(e) => {
                let why = format!("cannot enter the job's cgroup: {e}");
                say!("gpuq: {why}");
                return finish(&dir, attempt, ExitRecord::spawn_failed(why, now_ms()));
            }
        }
    } else {
        None
    };
    let procs_fds: Vec<i32> = groups
        .iter()
        .flat_map(|(_, files)| files.iter().map(std::os::fd::AsRawFd::as_raw_fd))
        .collect();
    let credentials = s.credentials.clone();
    // SAFETY: write/setgroups/setgid/setuid/close_range are async-signal-safe and use only
    // data captured before the fork. Groups and gid go first, while still root.
    unsafe {
        cmd.pre_exec(move || {
            // "0" is the writing process: the child moves itself, as root still.
            for &fd in &procs_fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(c) = &credentials {
                take_ids(c)?;
            }
            // A descriptor the daemon inherited without close-on-exec (a pipe of the
            // shell that started it) must not reach the job: mark every one above
            // stdio close-on-exec (not closed: the spawn's own error pipe is among them).
            // An old kernel without close_range leaves them as they are.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    if groups.is_some() {
        // Orphans of the job (a double fork) become the supervisor's children,
        // not init's: it reaps them, so when the attempt ends none is left even
        // as a zombie, and a zombie never holds one of the job's process slots.
        // SAFETY: plain prctl on this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    }
    let record = match cmd.spawn() {
        Err(e) => {
            // Reported as what it is, not as exit 127: the job never ran.
            let why = exec_error(program, &e, job_env.as_ref());
            say!("gpuq: cannot start: {why}");
            let mut record = if permanent(&e) {
                ExitRecord::cannot_start(why, now_ms())
            } else {
                ExitRecord::spawn_failed(why, now_ms())
            };
            // `gpuq run` and `wait` exit as a shell does for a command it cannot
            // run; the record still says it never started.
            record.exit_code = match e.raw_os_error() {
                Some(libc::ENOENT) => Some(127),
                Some(libc::EACCES | libc::ENOEXEC) => Some(126),
                _ => None,
            };
            record
        }
        Ok(mut child) => {
            // The terminal's job side lives on only in the job: its end is the
            // master's end of output.
            drop(cmd);
            if let Some(t) = &terminal {
                t.started(child.id() as i32);
            }
            // The job is its own process group leader: pgid == pid.
            if let Err(e) =
                dir.write_atomically(&pgid_file_name(attempt), child.id().to_string().as_bytes())
            {
                say!("gpuq supervisor: cannot record the job's process group: {e}");
            }
            let status = if groups.is_some() {
                wait_reaping(child.id() as i32)
            } else {
                loop {
                    match child.wait() {
                        Ok(s) => break Some(s),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            say!("gpuq supervisor: wait failed: {e}");
                            break None;
                        }
                    }
                }
            };
            // Leftover processes of the job (daemons it forked) would hold its GPUs:
            // end the whole group, then forget its id so no later signal can hit a reused pid.
            let pgid = child.id() as i32;
            // SAFETY: plain syscall on the job's own process group (pgid > 1, it was our child).
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            if let Some(t) = terminal.take() {
                // A shell's commands run in process groups of their own, in its session.
                crate::terminal::end_session(pgid);
                t.finish();
                let _ = std::fs::remove_file(s.dir.terminal_socket(attempt));
            }
            if let Some(name) = &s.container {
                remove_container(s.argv, name, job_env.as_ref(), s.credentials.as_ref());
            }
            let usage = groups.as_ref().map(|(g, _)| end_groups(g));
            let _ = dir.remove(&pgid_file_name(attempt));
            ExitRecord {
                exit_code: status.and_then(|s| s.code()),
                signal: status.and_then(|s| s.signal()),
                spawn_error: None,
                cannot_start: false,
                ended_at_ms: now_ms(),
                usage,
            }
        }
    };
    if record.spawn_error.is_some() {
        if let Some((g, _)) = &groups {
            end_groups(g);
        }
    }
    if groups.is_some() {
        let _ = dir.remove(&crate::cgroup::record_name(attempt));
    }
    if let Some(pump) = pump {
        // The whole log is written before the record says the attempt ended.
        let wait = if record.spawn_error.is_some() {
            std::time::Duration::ZERO
        } else {
            LOG_DRAIN
        };
        pump.finish(wait);
    }
    finish(&dir, attempt, record)
}

/// Ends what is left of the job in its groups (a daemon it started, a child
/// that left the process group), reads the groups' counters and removes them:
/// the exit record, written after this, frees the job's GPUs.
fn end_groups(g: &crate::cgroup::JobGroups) -> crate::CgroupUsage {
    match g.kill_all(crate::cgroup::EMPTY_WITHIN) {
        Ok(()) => reap_orphans(),
        Err(e) => say!("gpuq supervisor: {e}"),
    }
    let usage = crate::cgroup::usage::read_usage(g);
    if let Err(e) = g.remove() {
        say!("gpuq supervisor: cannot remove the job's cgroup: {e}");
    }
    usage
}

/// Waits for the job's main process, reaping the orphans handed to the
/// supervisor (a subreaper) meanwhile.
fn wait_reaping(pid: i32) -> Option<std::process::ExitStatus> {
    loop {
        let mut status = 0;
        // SAFETY: plain syscall with a valid pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == pid {
            return Some(std::process::ExitStatus::from_raw(status));
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                say!("gpuq supervisor: wait failed: {e}");
                return None;
            }
        }
    }
}

/// Reaps the job's last orphans: they were killed and are leaving (their
/// cgroup is empty), so this is short; bounded against one that left the
/// cgroup (a root job may move itself) and lives on.
fn reap_orphans() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let mut status = 0;
        // SAFETY: plain syscall with a valid pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r > 0 {
            continue;
        }
        if r < 0 || std::time::Instant::now() >= deadline {
            return; // ECHILD: none left.
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// How long the end of the job's output is waited for once its group is gone.
const LOG_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Makes the job's stdout and stderr one pipe into the supervisor, which
/// appends it to the log (its own stdout) within `limits`.
fn pipe_output(
    cmd: &mut Command,
    limits: crate::log_pipe::LogLimits,
) -> std::io::Result<crate::log_pipe::LogPump> {
    let log = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let (write, pump) = crate::log_pipe::start(log, limits)?;
    cmd.stdout(Stdio::from(write.try_clone()?))
        .stderr(Stdio::from(write));
    Ok(pump)
}

/// An error that starting again would meet again (as opposed to a lack of
/// memory or processes for the moment).
fn permanent(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOENT
                | libc::ENOTDIR
                | libc::EACCES
                | libc::EPERM
                | libc::ENOEXEC
                | libc::EISDIR
                | libc::ELOOP
                | libc::ENAMETOOLONG
        )
    )
}

/// Why `program` did not start, in words a user acts on.
fn exec_error(
    program: &str,
    e: &std::io::Error,
    env: Option<&std::collections::BTreeMap<String, String>>,
) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) if !program.contains('/') => {
            // `python` where only `python3` is installed: name the one that exists.
            let path = env
                .and_then(|env| env.get("PATH").cloned())
                .or_else(|| std::env::var("PATH").ok())
                .unwrap_or_default();
            let near = format!("{program}3");
            let exists = std::env::split_paths(&path).any(|d| d.join(&near).is_file());
            let hint = if exists && matches!(program, "python" | "pip") {
                format!("; did you mean `{near}`?")
            } else {
                String::new()
            };
            format!("`{program}`: command not found (no such file in PATH){hint}")
        }
        Some(libc::ENOENT) => {
            format!("`{program}`: no such file (or its `#!` interpreter is missing)")
        }
        Some(libc::EACCES) => {
            format!("`{program}`: permission denied (not executable? `chmod +x {program}`)")
        }
        Some(libc::ENOEXEC) => {
            format!("`{program}`: not an executable (a script needs a `#!` line)")
        }
        Some(libc::EISDIR) => format!("`{program}`: is a directory"),
        _ => format!("`{program}`: {e}"),
    }
}

/// Removes the attempt's container with the job's rights: SIGKILL reaches
/// podman's client, not the container (conmon keeps it), so it is removed here.
fn remove_container(
    argv: &[String],
    name: &str,
    env: Option<&std::collections::BTreeMap<String, String>>,
    credentials: Option<&Credentials>,
) {
    // The job's argv is `gpuq __container NAME -- PODMAN… run …`.
    let argv = match argv.iter().position(|a| a == "--") {
        Some(at) => &argv[at + 1..],
        None => argv,
    };
    let Some(run) = argv.iter().position(|a| a == "run") else {
        return;
    };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..run])
        .args(["rm", "--force", "--time", "0", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(env) = env {
        cmd.env_clear().envs(env);
    }
    let credentials = credentials.cloned();
    // SAFETY: as for the job: async-signal-safe calls on data captured before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(c) = &credentials {
                take_ids(c)?;
            }
            Ok(())
        });
    }
    if let Err(e) = cmd.status() {
        say!("gpuq supervisor: cannot remove the container {name}: {e}");
    }
}

/// Makes `cwd` the supervisor's working directory (the job inherits it), entered
/// with the job's rights: for a job of another account the supervisor takes that
/// account's effective ids for the `chdir`, then takes root's back.
fn enter_as(cwd: &std::path::Path, credentials: Option<&Credentials>) -> std::io::Result<()> {
    let Some(c) = credentials else {
        return std::env::set_current_dir(cwd);
    };
    // SAFETY: plain syscalls in this single-threaded process; every id is restored
    // (the saved set-user-ID stays 0, so seteuid(0) is allowed) before returning.
    unsafe {
        let last = || std::io::Error::last_os_error();
        if libc::setgroups(c.groups.len(), c.groups.as_ptr()) != 0 || libc::setegid(c.gid) != 0 {
            return Err(last());
        }
        if libc::seteuid(c.uid) != 0 {
            return Err(last());
        }
        let entered = std::env::set_current_dir(cwd);
        if libc::seteuid(0) != 0
            || libc::setegid(0) != 0
            || libc::setgroups(0, std::ptr::null()) != 0
        {
            // Cannot happen with a saved uid of 0; never go on half-dropped.
            say!("gpuq supervisor: cannot take back root's ids: {}", last());
            std::process::abort();
        }
        entered
    }
}

/// Writes the exit record and returns the supervisor's status. A full disk must
/// not lose the job's end: the write is retried until it lands (the daemon sees
/// the attempt running meanwhile, as nothing recorded says otherwise). A job
/// directory that was removed (its data directory deleted) can never hold the
/// record and nobody could read it: then the supervisor gives up rather than
/// retry for ever.
fn finish(dir: &Dir, attempt: u32, record: ExitRecord) -> i32 {
    let json = serde_json::to_vec(&record).expect("exit record serializes");
    let mut said = false;
    while let Err(e) = dir.write_atomically(&exit_record_name(attempt), &json) {
        if e.raw_os_error() == Some(libc::ENOENT) {
            say!(
                "gpuq supervisor: the job's directory is gone ({e}); no exit record can be written"
            );
            return 1;
        }
        if !said {
            say!("gpuq supervisor: cannot write the exit record ({e}); retrying every second");
            said = true;
        }
        std::thread::sleep(RECORD_RETRY);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_job_directory_ends_the_supervisor_instead_of_a_retry_loop() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("job");
        std::fs::create_dir(&path).unwrap();
        let dir = Dir::open(&path).unwrap();
        let record = ExitRecord::spawn_failed("test".into(), 0);
        assert_eq!(finish(&dir, 1, record.clone()), 0);
        assert!(path.join(exit_record_name(1)).exists());
        std::fs::remove_dir_all(&path).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(finish(&dir, 2, record), 1);
        assert!(started.elapsed() < RECORD_RETRY, "no retry");
    }
}
