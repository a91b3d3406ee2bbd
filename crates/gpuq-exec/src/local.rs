//! The local executor: prepares the supervisor command for an attempt, and
//! signals a running attempt's process group.

use crate::cgroup::{Confinement, GroupSpec, JobGroups};
use crate::layout::JobDir;
use crate::ExecError;
use gpuq_core::JobId;
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// The supervisor's own PATH: system directories only.
const SAFE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Opens (creating, mode 0600) a file the daemon writes, refusing to follow a symlink.
fn open_private(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = OpenOptions::new();
    o.create(true).mode(0o600).custom_flags(libc::O_NOFOLLOW);
    if append {
        o.append(true);
    } else {
        o.write(true);
    }
    o.open(path)
}

pub struct LocalExecutor {
    home: PathBuf,
    /// The gpuq binary, re-executed as the supervisor.
    self_exe: PathBuf,
    /// Address and token handed to jobs as GPUQ_URL / GPUQ_TOKEN.
    api_url: String,
    api_token: String,
    /// Limits the supervisors keep each attempt's log within; `None`: none.
    log_limits: Option<crate::log_pipe::LogLimits>,
    /// The cgroups jobs are confined by (or why none).
    confinement: Arc<Confinement>,
    /// This node's GPUs by index: what confinement needs of each.
    gpus: BTreeMap<u32, GpuDevice>,
    /// Names this daemon's groups apart from another daemon's in the same
    /// cgroup (another GPUQ_HOME): a hash of the home.
    tag: String,
}

/// One GPU as confinement sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuDevice {
    /// Its node is 195:minor (`None`: unknown, so it cannot be allowed).
    pub minor: Option<u32>,
    /// NVML's UUID (`GPU-…`), which CUDA accepts in CUDA_VISIBLE_DEVICES.
    pub uuid: String,
    /// The CPUs local to it (its NUMA node), when sysfs says.
    pub local_cpus: std::collections::BTreeSet<u32>,
}

/// What an attempt's groups hold besides its GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptLimits {
    /// Its CPUs (empty: no cpuset of its own).
    pub cpus: Vec<u32>,
    /// Its memory limit in MiB (0: the jobs' common limit only).
    pub memory_mib: u64,
    /// The CPUs are its own (it asked for cores), not shared.
    pub holds_cpus: bool,
}

/// Everything needed to start one attempt.
pub struct LaunchRequest<'a> {
    pub job: JobId,
    pub attempt: u32,
    pub gpus: &'a [u32],
    pub argv: &'a [String],
    pub cwd: &'a str,
    /// The submitter's environment with the spec's overrides.
    pub env: &'a BTreeMap<String, String>,
    /// Run the job as this account (the supervisor stays root); `None`: as the daemon's user.
    pub run_as: Option<&'a crate::RunAs>,
    /// A group that may read the job's checkpoints and outputs (its project's);
    /// `None`: only the job's user may.
    pub share_gid: Option<u32>,
    /// What kind of interactive session the job is, if it is one: a shell runs
    /// on a terminal; a notebook gets a private directory for its socket.
    pub session: Option<gpuq_core::session::SessionKind>,
    /// The job runs in this podman container (its argv is podman's): the
    /// supervisor removes it when the attempt ends.
    pub container: Option<String>,
}

impl LocalExecutor {
    pub fn new(home: &Path, self_exe: PathBuf, api_url: String, api_token: String) -> Self {
        Self {
            home: home.to_path_buf(),
            self_exe,
            api_url,
            api_token,
            log_limits: None,
            confinement: Arc::new(Confinement::off("not configured")),
            gpus: BTreeMap::new(),
            tag: home_tag(home),
        }
    }

    /// Jobs are confined by `confinement`, on GPUs described by `gpus`.
    pub fn with_confinement(
        mut self,
        confinement: Arc<Confinement>,
        gpus: BTreeMap<u32, GpuDevice>,
    ) -> Self {
        self.confinement = confinement;
        self.gpus = gpus;
        self
    }

    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    pub fn gpu(&self, index: u32) -> Option<&GpuDevice> {
        self.gpus.get(&index)
    }

    /// The name of an attempt's groups (this daemon's, see `tag`).
    pub fn group_name(&self, job: JobId, attempt: u32) -> String {
        format!("{}.{}", crate::cgroup::group_name(job, attempt), self.tag)
    }

    /// The job and attempt of one of this daemon's group names.
    pub fn parse_group_name(&self, name: &str) -> Option<(JobId, u32)> {
        let base = name.strip_suffix(&format!(".{}", self.tag))?;
        crate::cgroup::parse_group_name(base)
    }

    /// The attempt's groups as recorded (`None`: it ran unconfined).
    pub fn job_groups(&self, job: JobId, attempt: u32) -> Option<JobGroups> {
        JobGroups::load(&self.job_dir(job), attempt).ok().flatten()
    }

    /// Attempts' logs are kept within `limits` by their supervisors.
    pub fn with_log_limits(mut self, limits: crate::log_pipe::LogLimits) -> Self {
        self.log_limits = Some(limits);
        self
    }

    pub fn job_dir(&self, job: JobId) -> JobDir {
        JobDir::new(&self.home, job)
    }

    /// The job contract's environment (docs: "What a job sees").
    pub fn job_env(&self, req: &LaunchRequest<'_>) -> BTreeMap<String, String> {
        let dir = self.job_dir(req.job);
        let mut env = req.env.clone();
        let indices: Vec<String> = req.gpus.iter().map(u32::to_string).collect();
        // Under device confinement CUDA sees only the job's GPUs, renumbered
        // from 0: their UUIDs name them whatever the numbering.
        let uuids: Option<Vec<String>> = self
            .confinement
            .confines_devices()
            .then(|| {
                req.gpus
                    .iter()
                    .map(|i| self.gpus.get(i).map(|g| g.uuid.clone()))
                    .collect()
            })
            .flatten();
        let visible = uuids.unwrap_or_else(|| indices.clone());
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        env.insert("CUDA_VISIBLE_DEVICES".into(), visible.join(","));
        env.insert("GPUQ_GPUS".into(), indices.join(","));
        env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        env.insert("GPUQ_JOB_ID".into(), req.job.to_string());
        env.insert("GPUQ_ATTEMPT".into(), req.attempt.to_string());
        env.insert("GPUQ_CHECKPOINT_DIR".into(), path(dir.checkpoints()));
        env.insert("GPUQ_OUTPUT_DIR".into(), path(dir.outputs()));
        env.insert("GPUQ_METRICS_FILE".into(), path(dir.metrics()));
        env.insert("GPUQ_CONTROL_DIR".into(), path(dir.control_dir()));
        env.insert("GPUQ_URL".into(), self.api_url.clone());
        if let Some(account) = req.run_as {
            env.insert("HOME".into(), account.home.clone());
            env.insert("USER".into(), account.name.clone());
            env.insert("LOGNAME".into(), account.name.clone());
        } else {
            // The daemon's own token would make the job an admin of everyone's jobs.
            env.insert("GPUQ_TOKEN".into(), self.api_token.clone());
        }
        env
    }

    /// Creates the job's directories, metrics file and log for a job that another
    /// program starts (Slurm's slurmstepd opens the log as the job's user).
    pub fn prepare_files(&self, req: &LaunchRequest<'_>) -> Result<(), ExecError> {
        self.prepare_dirs(req)?;
        let log_path = self.job_dir(req.job).log(req.attempt);
        let io_err = |source| ExecError::JobDir {
            path: log_path.display().to_string(),
            source,
        };
        open_private(&log_path, true).map_err(io_err)?;
        if let Some(account) = req.run_as {
            std::os::unix::fs::lchown(&log_path, Some(account.uid), Some(account.gid))
                .map_err(io_err)?;
        }
        Ok(())
    }

    fn prepare_dirs(&self, req: &LaunchRequest<'_>) -> Result<(), ExecError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.job_dir(req.job);
        let io_err = |p: &Path| {
            let path = p.display().to_string();
            move |source| ExecError::JobDir { path, source }
        };
        // Weights and artifacts are private: the user's alone, or shared with the
        // project's group when the config names one.
        let mode = if req.share_gid.is_some() {
            0o750
        } else {
            0o700
        };
        for d in [dir.checkpoints(), dir.outputs()] {
            std::fs::create_dir_all(&d).map_err(io_err(&d))?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
                .map_err(io_err(&d))?;
        }
        // The daemon's own, which the job may read (not write): `gpuq profile`'s requests.
        let control = dir.control_dir();
        std::fs::create_dir_all(&control).map_err(io_err(&control))?;
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err(&control))?;
        if req.session == Some(gpuq_core::session::SessionKind::Notebook) {
            // JupyterLab's socket: in a directory of the job's user alone, which
            // the daemon never follows a link in (see the proxy).
            let d = dir.session_dir();
            std::fs::create_dir_all(&d).map_err(io_err(&d))?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
                .map_err(io_err(&d))?;
            if let Some(account) = req.run_as {
                std::os::unix::fs::lchown(&d, Some(account.uid), Some(account.gid))
                    .map_err(io_err(&d))?;
            }
            // Where JupyterLab reads its base URL from the environment (see
            // `NOTEBOOK_BASE_URL_ENV`): the daemon's directory, the job reads it.
            let d = dir.jupyter_config_dir();
            std::fs::create_dir_all(&d).map_err(io_err(&d))?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))
                .map_err(io_err(&d))?;
            let file = d.join(crate::layout::JUPYTER_CONFIG_FILE);
            crate::layout::write_atomically(&file, crate::layout::JUPYTER_CONFIG.as_bytes())
                .map_err(io_err(&file))?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                .map_err(io_err(&file))?;
        }
        // The metrics file exists before the job starts: a container mounts it.
        let metrics = dir.metrics();
        if std::fs::symlink_metadata(&metrics).is_err() {
            open_private(&metrics, true).map_err(io_err(&metrics))?;
        }
        let gid = req.share_gid.or(req.run_as.map(|a| a.gid));
        if let Some(account) = req.run_as {
            // The job directory stays the daemon's (records, lock, log live there and
            // are trusted); the job's user owns only what it writes: checkpoints,
            // outputs and the metrics file. Nothing the user controls is followed.
            let root = dir.root().to_path_buf();
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
                .map_err(io_err(&root))?;
            let metrics = dir.metrics();
            open_private(&metrics, false).map_err(io_err(&metrics))?;
            std::os::unix::fs::lchown(&metrics, Some(account.uid), Some(account.gid))
                .map_err(io_err(&metrics))?;
            for p in [dir.checkpoints(), dir.outputs()] {
                std::os::unix::fs::lchown(&p, Some(account.uid), gid).map_err(io_err(&p))?;
            }
        } else if let Some(gid) = req.share_gid {
            for p in [dir.checkpoints(), dir.outputs()] {
                std::os::unix::fs::lchown(&p, None, Some(gid)).map_err(io_err(&p))?;
            }
        }
        Ok(())
    }

    /// Creates the job's directories and log, and returns the supervisor command,
    /// ready to spawn (the caller chooses sync or async spawning).
    pub fn prepare(&self, req: &LaunchRequest<'_>) -> Result<Command, ExecError> {
        self.prepare_with(req, &AttemptLimits::default())
    }

    /// `prepare`, and under confinement the attempt's groups made and recorded
    /// (the supervisor puts the job in them before its code runs). A group
    /// that cannot be made fails the launch: a job never runs unconfined
    /// where confinement is in force.
    pub fn prepare_with(
        &self,
        req: &LaunchRequest<'_>,
        limits: &AttemptLimits,
    ) -> Result<Command, ExecError> {
        let groups = self.make_groups(req, limits)?;
        let made = self.prepare_supervisor(req, groups.is_some());
        if made.is_err() {
            if let Some(g) = &groups {
                let _ = g.remove();
            }
        }
        made
    }

    fn make_groups(
        &self,
        req: &LaunchRequest<'_>,
        limits: &AttemptLimits,
    ) -> Result<Option<JobGroups>, ExecError> {
        if !self.confinement.is_on() {
            return Ok(None);
        }
        let mut gpu_minors = Vec::new();
        for i in req.gpus {
            match self.gpus.get(i).and_then(|g| g.minor) {
                Some(m) => gpu_minors.push(m),
                None if self.confinement.confines_devices() => return Err(ExecError::NoMinor(*i)),
                None => {}
            }
        }
        let spec = GroupSpec {
            gpu_minors,
            memory_mib: limits.memory_mib,
            cpus: limits.cpus.clone(),
            holds_cpus: limits.holds_cpus,
        };
        let name = self.group_name(req.job, req.attempt);
        let groups = self.confinement.create(&name, &spec)?;
        let Some(groups) = groups else {
            return Ok(None);
        };
        // The directories must exist for the record; prepare_dirs is idempotent.
        self.prepare_dirs(req)?;
        let dir = self.job_dir(req.job);
        if let Err(source) = groups.save(&dir, req.attempt) {
            let _ = groups.remove();
            return Err(ExecError::JobDir {
                path: dir
                    .root()
                    .join(crate::cgroup::record_name(req.attempt))
                    .display()
                    .to_string(),
                source,
            });
        }
        Ok(Some(groups))
    }

    fn prepare_supervisor(
        &self,
        req: &LaunchRequest<'_>,
        confined: bool,
    ) -> Result<Command, ExecError> {
        self.prepare_dirs(req)?;
        let dir = self.job_dir(req.job);
        let io_err = |p: &Path| {
            let path = p.display().to_string();
            move |source| ExecError::JobDir { path, source }
        };
        let log_path = dir.log(req.attempt);
        let log = open_private(&log_path, true).map_err(io_err(&log_path))?;
        let log_err = log.try_clone().map_err(io_err(&log_path))?;
        // The supervisor's stdin is a file locked before the spawn: the lock lives as
        // long as the supervisor holds the descriptor, so after a daemon crash a free
        // lock means "no supervisor", with no window in which it is not yet taken.
        // The same private file carries the job's environment to the supervisor (which
        // reads it, then empties the file): the supervisor may run as root, and a
        // user's LD_PRELOAD or LD_LIBRARY_PATH must never be in a root process's
        // own environment.
        let lock_path = dir.lock_file(req.attempt);
        let mut lock = open_locked(&lock_path, "a supervisor for this attempt is running")
            .map_err(io_err(&lock_path))?;
        {
            use std::io::Write;
            let env_json = serde_json::to_vec(&self.job_env(req)).expect("environment serializes");
            lock.set_len(0)
                .and_then(|_| lock.write_all(&env_json))
                .map_err(io_err(&lock_path))?;
        }
        let mut cmd = Command::new(&self.self_exe);
        cmd.arg("__supervise")
            .arg("--job-dir")
            .arg(dir.root())
            .arg("--attempt")
            .arg(req.attempt.to_string());
        if let Some(account) = req.run_as {
            let groups: Vec<String> = account.groups.iter().map(u32::to_string).collect();
            cmd.arg("--uid")
                .arg(account.uid.to_string())
                .arg("--gid")
                .arg(account.gid.to_string());
            cmd.arg("--groups").arg(groups.join(","));
        }
        cmd.arg("--env-from-stdin");
        if confined {
            cmd.arg("--cgroups");
        }
        if req.session == Some(gpuq_core::session::SessionKind::Shell) {
            cmd.arg("--terminal");
        }
        if let Some(name) = &req.container {
            cmd.arg("--container").arg(name);
        }
        if let Some(l) = self.log_limits {
            cmd.arg("--log-max")
                .arg(l.max_bytes.to_string())
                .arg("--log-reserve")
                .arg(l.reserve_bytes.to_string());
        }
        // The supervisor enters the job's directory itself, with the job's rights:
        // root never enters a directory on a user's behalf.
        cmd.arg("--cwd").arg(req.cwd);
        cmd.arg("--")
            .args(req.argv)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .current_dir("/")
            .stdin(Stdio::from(lock))
            .stdout(log)
            .stderr(log_err);
        // Its own process group keeps the supervisor out of signals aimed at the
        // daemon's group (a Ctrl-C in the daemon's terminal). No pre_exec hook, so
        // the spawn can use posix_spawn instead of forking the daemon.
        cmd.process_group(0);
        Ok(cmd)
    }

    /// True while the attempt's supervisor runs (it holds the attempt's lock).
    pub fn supervisor_alive(&self, job: JobId, attempt: u32) -> bool {
        lock_held(&self.job_dir(job).lock_file(attempt))
    }
    /// Sends `signal` to the whole process group of a running attempt, and
    /// to every process in its cgroup (a process that left the group with
    /// `setsid` or a double fork is still in the cgroup).
    /// Returns false when the attempt has not started (or has ended).
    pub fn signal(&self, job: JobId, attempt: u32, signal: i32) -> Result<bool, ExecError> {
        let dir = self.job_dir(job);
        let Some(pgid) = std::fs::read_to_string(dir.pgid_file(attempt))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            return Ok(false);
        };
        if pgid <= 1 {
            return Ok(false);
        }
        // SAFETY: plain syscall; pgid > 1 so it never targets init or every process.
        let rc = unsafe { libc::killpg(pgid, signal) };
        let group_err = (rc != 0).then(std::io::Error::last_os_error);
        // Those outside the process group only: one signal per process (a
        // job that counts its SIGTERMs sees one).
        let in_cgroup = self
            .job_groups(job, attempt)
            .map_or(0, |g| g.signal_outside(signal, pgid));
        match group_err {
            None => Ok(true),
            Some(_) if in_cgroup > 0 => Ok(true),
            Some(err) if err.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Some(err) => Err(ExecError::Signal(err)),
        }
    }
}

/// A short stable name for a daemon's home (FNV-1a of its path): jobs' groups
/// of daemons sharing a cgroup never collide.
pub fn home_tag(home: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut h: u64 = 0xcbf29ce484222325;
    for b in home.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{:08x}", h as u32)
}

/// Opens (creating, mode 0600, never through a link) and locks a file that a
/// process holds for its whole life (its lock ends with it); `busy` is the
/// error when another holds it.
pub(crate) fn open_locked(path: &Path, busy: &str) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            busy.to_string(),
        ));
    }
    Ok(file)
}

/// True while a supervisor holds this attempt lock.
pub(crate) fn lock_held(path: &Path) -> bool {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        // Out of descriptors (or any other failure to look) is no sign of death:
        // an attempt is never ended on a guess.
        Err(_) => return true,
    };
    // SAFETY: flock on a descriptor we own; a successful probe is released when `file` drops.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}
