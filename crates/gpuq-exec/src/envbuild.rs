//! Building a cached Python environment with uv, as the job's user.
//!
//! The daemon prepares a build (`EnvCache::prepare`): a fresh directory
//! `envs/<key>/` owned by the user, a private ticket file `envs/<key>.build`
//! holding the request, and the build's log; it spawns `gpuq __env-build`
//! with the ticket as its stdin, locked. The builder reads the ticket, drops
//! to the user's ids before anything else, runs uv, and writes its result back
//! into the ticket. The lock lives as long as the builder: after a daemon
//! restart a held lock means "still building", a free one with a result means
//! "finished while no daemon ran", and a free one without means "cut short"
//! (that directory is never used: only a recorded success makes an
//! environment ready).

/// A line to the log (stdout and stderr are the build's or job's log): never
/// panics on a failed write, as println! would on a closed pipe.
macro_rules! logln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use crate::RunAs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The supervisor's PATH, for the builder before it takes the user's.
const SAFE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// A ticket (request or result) is at most this large.
const MAX_TICKET_BYTES: u64 = 32 << 20;
/// How much of a failed step's output goes into the cause.
const MAX_CAUSE_CHARS: usize = 2000;

/// What the builder is asked to do (written into the ticket by the daemon).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildRequest {
    pub key: String,
    /// The environment's directory (created by the daemon, owned by the user).
    pub dir: PathBuf,
    /// `requirements` or `project`.
    pub kind: String,
    pub requirements_txt: Option<String>,
    pub pyproject_toml: Option<String>,
    pub uv_lock: Option<String>,
    pub version: Option<String>,
    pub setup: Option<String>,
    /// The job's directory: the setup script runs there.
    pub cwd: String,
    /// The uv executable.
    pub uv: PathBuf,
    /// The build's environment (the user's PATH, HOME, proxies, uv's and pip's settings).
    pub env: BTreeMap<String, String>,
    /// Ids the builder drops to; `None`: it runs as the daemon's user.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    #[serde(default)]
    pub groups: Vec<u32>,
    /// Others may read the environment (a lab-wide cache).
    #[serde(default)]
    pub shared: bool,
    /// A lab-wide environment keyed without its builder: nothing of the
    /// builder's may decide what it holds (`env` is the daemon's, HOME a
    /// fresh empty directory, uv reads no configuration file).
    #[serde(default)]
    pub hermetic: bool,
}

/// What the builder reports, in the ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum BuildResult {
    Ready {
        python: String,
        packages: Vec<String>,
        size_bytes: u64,
    },
    Failed {
        cause: String,
    },
}

/// Where a build stands, as the files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildState {
    /// A builder holds the ticket.
    Running,
    /// The builder finished and left this.
    Finished(BuildResult),
    /// No builder and no result: it was cut short.
    Interrupted,
}

/// The cache's directory: `$GPUQ_HOME/envs` or a configured one.
#[derive(Debug, Clone)]
pub struct EnvCache {
    root: PathBuf,
    self_exe: PathBuf,
}

impl EnvCache {
    pub fn new(root: PathBuf, self_exe: PathBuf) -> Self {
        Self { root, self_exe }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The gpuq executable its helpers (`__env-build`, `__container`) run from.
    pub fn gpuq(&self) -> &Path {
        &self.self_exe
    }
    /// The environment of `key` (used only once the store says it is ready).
    pub fn dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }
    fn ticket(&self, key: &str) -> PathBuf {
        self.root.join(format!("{key}.build"))
    }
    pub fn log(&self, key: &str) -> PathBuf {
        self.root.join("logs").join(format!("{key}.log"))
    }
    pub(crate) fn trash(&self) -> PathBuf {
        self.root.join(".trash")
    }

    fn ensure_dirs(&self) -> std::io::Result<()> {
        for (d, mode) in [
            (self.root.clone(), 0o755),
            (self.root.join("logs"), 0o700),
            // Entered by each owner's remover to reach its own directory.
            (self.trash(), 0o711),
        ] {
            std::fs::create_dir_all(&d)?;
            let meta = std::fs::symlink_metadata(&d)?;
            if !meta.is_dir() {
                return Err(std::io::Error::other(format!(
                    "{} is not a directory",
                    d.display()
                )));
            }
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    }

    /// Moves whatever is at `key`'s directory out of the way (a build cut
    /// short, or an evicted environment): a rename inside the daemon's own
    /// directory, which follows nothing. Returns where it went, for removal
    /// by its owner.
    pub fn retire(&self, key: &str, now_ms: i64) -> std::io::Result<Option<PathBuf>> {
        self.ensure_dirs()?;
        let from = self.dir(key);
        if std::fs::symlink_metadata(&from).is_err() {
            return Ok(None);
        }
        let to = self.trash().join(format!("{key}.{now_ms}"));
        std::fs::rename(&from, &to)?;
        Ok(Some(to))
    }

    /// Prepares a build and returns the builder's command, ready to spawn.
    pub fn prepare(
        &self,
        mut req: BuildRequest,
        run_as: Option<&RunAs>,
        now_ms: i64,
    ) -> std::io::Result<Command> {
        self.ensure_dirs()?;
        let key = req.key.clone();
        let _ = self.retire(&key, now_ms)?;
        let dir = self.dir(&key);
        std::fs::create_dir(&dir)?;
        let mode = if req.shared { 0o755 } else { 0o700 };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
        if let Some(a) = run_as {
            std::os::unix::fs::lchown(&dir, Some(a.uid), Some(a.gid))?;
            req.uid = Some(a.uid);
            req.gid = Some(a.gid);
            req.groups = a.groups.clone();
        }
        req.dir = dir;
        let mut ticket = crate::local::open_locked(
            &self.ticket(&key),
            "a build of this environment is running",
        )?;
        ticket.set_len(0)?;
        ticket.write_all(&serde_json::to_vec(&req).map_err(std::io::Error::other)?)?;
        let log = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.log(&key))?;
        let log_err = log.try_clone()?;
        let mut cmd = Command::new(&self.self_exe);
        cmd.arg("__env-build")
            .env_clear()
            .env("PATH", SAFE_PATH)
            .current_dir("/")
            .stdin(Stdio::from(ticket))
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        Ok(cmd)
    }

    /// Where the build of `key` stands.
    pub fn state(&self, key: &str) -> BuildState {
        let path = self.ticket(key);
        if crate::local::lock_held(&path) {
            return BuildState::Running;
        }
        let bytes = crate::safe_fs::Dir::open(&self.root)
            .and_then(|d| d.read_regular(&format!("{key}.build"), MAX_TICKET_BYTES, None));
        match bytes
            .ok()
            .and_then(|b| serde_json::from_slice::<BuildResult>(&b).ok())
        {
            Some(r) => BuildState::Finished(r),
            None => BuildState::Interrupted,
        }
    }

    /// Forgets a finished build's ticket.
    pub fn clear_ticket(&self, key: &str) {
        let _ = std::fs::remove_file(self.ticket(key));
    }

    /// The command that removes a retired directory as its owner.
    pub fn remover(&self, path: &Path, run_as: Option<&RunAs>) -> Command {
        let mut cmd = Command::new(&self.self_exe);
        cmd.arg("__env-remove").arg(path);
        if let Some(a) = run_as {
            cmd.arg("--uid")
                .arg(a.uid.to_string())
                .arg("--gid")
                .arg(a.gid.to_string());
        }
        cmd.env_clear()
            .env("PATH", SAFE_PATH)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        cmd
    }
}

/// Drops to `uid`/`gid` (and `groups`) for good, in this process.
fn drop_privileges(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<()> {
    crate::supervisor::take_ids(&crate::Credentials {
        uid,
        gid,
        groups: groups.to_vec(),
    })?;
    // No way back: a setuid(0) must fail now.
    // SAFETY: plain syscall.
    if uid != 0 && unsafe { libc::setuid(0) } == 0 {
        return Err(std::io::Error::other(
            "the ids could not be dropped for good",
        ));
    }
    Ok(())
}

/// Body of `gpuq __env-remove PATH [--uid U --gid G]`: removes a retired
/// environment with its owner's rights.
pub fn remove_main(path: &Path, uid: Option<u32>, gid: Option<u32>) -> i32 {
    if let (Some(u), Some(g)) = (uid, gid) {
        if let Err(e) = drop_privileges(u, g, &[]) {
            logln!("gpuq __env-remove: {e}");
            return 1;
        }
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => 0,
        Err(e) => {
            logln!("gpuq __env-remove {}: {e}", path.display());
            1
        }
    }
}

/// Body of `gpuq __env-build`: stdin is the ticket; stdout and stderr the log.
pub fn build_main() -> i32 {
    // SAFETY: fd 0 is the ticket the daemon handed over; ManuallyDrop keeps it
    // open (closing it would release the lock before the result is written).
    let ticket = std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(0)
    });
    let req: BuildRequest = match read_all(&ticket)
        .and_then(|b| serde_json::from_slice(&b).map_err(std::io::Error::other))
    {
        Ok(r) => r,
        Err(e) => {
            logln!("gpuq __env-build is internal: it is started by the daemon ({e})");
            return 2;
        }
    };
    // Whatever the build leaves running (a `setsid` child of `setup`) stays
    // ours, to be ended before the result: nothing writes into a lab-wide
    // environment while it is sealed.
    if req.shared {
        // SAFETY: plain prctl on this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    }
    let result = match (req.uid, req.gid) {
        (Some(u), Some(g)) => drop_privileges(u, g, &req.groups)
            .map_err(|e| format!("cannot take the user's ids: {e}")),
        _ => Ok(()),
    }
    .and_then(|()| build(&req));
    if req.shared {
        end_leftovers();
    }
    let result = match result {
        Ok(r) => r,
        Err(cause) => BuildResult::Failed { cause },
    };
    match &result {
        BuildResult::Ready { packages, .. } => {
            logln!(
                "gpuq: environment {} is ready ({} packages)",
                req.key,
                packages.len()
            )
        }
        BuildResult::Failed { cause } => logln!("gpuq: the build failed: {cause}"),
    }
    let json = serde_json::to_vec(&result).unwrap_or_default();
    let written = ticket
        .set_len(0)
        .and_then(|()| ticket.write_all_at(&json, 0))
        .and_then(|()| ticket.sync_data());
    if let Err(e) = written {
        logln!("gpuq: cannot record the build's result: {e}");
        return 1;
    }
    0
}

/// Kills every process left under this one (orphans come to it: it is
/// their subreaper) and reaps them, until none is left.
fn end_leftovers() {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    loop {
        for pid in children_of(me) {
            // SAFETY: a child of ours, not yet reaped (its pid is not reused).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: plain waitpid; ECHILD once no child is left.
        if unsafe { libc::waitpid(-1, &mut status, 0) } < 0 {
            return;
        }
    }
}

/// The processes whose parent is `parent` (from /proc).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold anything, so after its last `)`.
            let ppid: i32 = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

fn read_all(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = file.read_at(&mut chunk, buf.len() as u64)?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() as u64 > MAX_TICKET_BYTES {
            return Err(std::io::Error::other("the ticket is too large"));
        }
    }
}

/// Runs one step, its output going to the log; a failure's cause is the
/// step's own message (uv's resolver error), trimmed.
fn step(what: &str, cmd: &mut Command) -> Result<String, String> {
    logln!("gpuq: {what}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    let _ = std::io::stdout().write_all(&out.stdout);
    let _ = std::io::stderr().write_all(&out.stderr);
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let text = match text.find("error:") {
        Some(at) => text[at..].trim().to_string(),
        None => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        }
    };
    let mut cause: String = text.chars().take(MAX_CAUSE_CHARS).collect();
    if cause.is_empty() {
        cause = format!("exit status {}", out.status);
    }
    Err(format!("{what}: {cause}"))
}

fn build(req: &BuildRequest) -> Result<BuildResult, String> {
    let dir = &req.dir;
    let dir_s = dir.to_string_lossy().into_owned();
    // A lab-wide build: a fresh, empty HOME (no uv.toml, no pip.conf, no
    // cache the builder filled), removed before the result is recorded.
    let home = dir.join(".gpuq").join("home");
    if req.hermetic {
        std::fs::create_dir_all(&home)
            .and_then(|()| std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| format!("{}: {e}", home.display()))?;
    }
    let uv = |args: &[&str]| {
        let mut c = Command::new(&req.uv);
        c.args(args).env_clear().envs(&req.env).current_dir(dir);
        if req.hermetic {
            if !args.contains(&"--no-config") {
                c.arg("--no-config");
            }
            c.env("HOME", &home);
            // A Python uv would fetch would live in HOME, removed below.
            if !req.env.contains_key("UV_PYTHON_DOWNLOADS") {
                c.env("UV_PYTHON_DOWNLOADS", "never");
            }
        }
        c
    };
    let mut venv = vec!["venv", "--allow-existing", "--no-config"];
    if let Some(v) = &req.version {
        venv.extend(["--python", v]);
    }
    venv.push(&dir_s);
    step("creating the virtual environment", &mut uv(&venv))?;
    let meta = dir.join(".gpuq");
    std::fs::create_dir_all(&meta).map_err(|e| format!("{}: {e}", meta.display()))?;
    let write = |name: &str, text: &Option<String>| -> Result<PathBuf, String> {
        let p = meta.join(name);
        std::fs::write(&p, text.as_deref().unwrap_or(""))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    };
    let python = dir.join("bin/python");
    let python_s = python.to_string_lossy().into_owned();
    if req.kind == "project" {
        let project = meta.join("project");
        std::fs::create_dir_all(&project).map_err(|e| format!("{}: {e}", project.display()))?;
        std::fs::write(
            project.join("pyproject.toml"),
            req.pyproject_toml.as_deref().unwrap_or(""),
        )
        .and_then(|()| {
            std::fs::write(
                project.join("uv.lock"),
                req.uv_lock.as_deref().unwrap_or(""),
            )
        })
        .map_err(|e| format!("{}: {e}", project.display()))?;
        let project_s = project.to_string_lossy().into_owned();
        let mut c = uv(&[
            "sync",
            "--frozen",
            "--no-install-project",
            "--project",
            &project_s,
            "--python",
            &python_s,
        ]);
        c.env("UV_PROJECT_ENVIRONMENT", dir);
        step("installing the locked project (uv sync --frozen)", &mut c)?;
    } else {
        let reqs = write("requirements.txt", &req.requirements_txt)?;
        let reqs_s = reqs.to_string_lossy().into_owned();
        step(
            "installing the requirements (uv pip install -r)",
            &mut uv(&["pip", "install", "--python", &python_s, "-r", &reqs_s]),
        )?;
    }
    if let Some(script) = &req.setup {
        // `pip` in the setup script is uv's, into this environment.
        let shim = meta.join("shim");
        std::fs::create_dir_all(&shim).map_err(|e| format!("{}: {e}", shim.display()))?;
        let body = format!("#!/bin/sh\nexec '{}' pip \"$@\"\n", req.uv.display());
        for name in ["pip", "pip3"] {
            let p = shim.join(name);
            std::fs::write(&p, &body)
                .and_then(|()| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)))
                .map_err(|e| format!("{}: {e}", p.display()))?;
        }
        let path = format!(
            "{}:{}/bin:{}",
            shim.display(),
            dir.display(),
            req.env.get("PATH").map(String::as_str).unwrap_or(SAFE_PATH)
        );
        let mut c = Command::new("bash");
        c.args(["-e", "-c", script])
            .env_clear()
            .envs(&req.env)
            .env("PATH", path)
            .env("VIRTUAL_ENV", dir)
            .current_dir(&req.cwd);
        step("running setup", &mut c)?;
    }
    let version = step(
        "reading the interpreter's version",
        Command::new(&python)
            .args(["-c", "import platform; print(platform.python_version())"])
            .env_clear()
            .current_dir(dir),
    )?;
    let freeze = step(
        "listing the installed packages",
        &mut uv(&["pip", "freeze", "--python", &python_s]),
    )?;
    if req.hermetic {
        std::fs::remove_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    }
    Ok(BuildResult::Ready {
        python: version.trim().to_string(),
        packages: freeze
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
        size_bytes: disk_usage(dir),
    })
}

/// Bytes on disk under `dir`, links not followed.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}
