//! Jobs confined by cgroups: each attempt in groups of its own under the
//! daemon's subtree, where it can open only its GPUs' device nodes, use at
//! most its memory (no swap), run on its CPUs and at most a bounded number of
//! processes; every process of it is signalled and killed through the groups.
//!
//! `detect.rs` finds the hierarchies, `v1.rs` and `v2.rs` write them,
//! `devices.rs` is the allow-list, `bpf.rs` the v2 device program, `cpus.rs`
//! the choice of cores, `job.rs` one attempt's groups, `usage.rs` its counters.

pub mod bpf;
pub mod cpus;
pub mod detect;
pub mod devices;
mod job;
pub mod usage;
pub mod v1;
pub mod v2;

pub use cpus::CpuTopology;
pub use job::{record_name, remove_tree, JobGroups, EMPTY_WITHIN};

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The jobs' parent group, under the daemon's own group of each hierarchy.
pub const JOBS_DIR: &str = "gpuq-jobs";

/// `[confinement]` in the daemon's config.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ConfinementConfig {
    /// `auto`: confine where cgroups can be used; `off`: never.
    #[serde(default)]
    pub mode: ConfineMode,
    /// How devices are confined: `auto` (the v1 devices controller where it is
    /// mounted, else the v2 device program), `v1` or `bpf`.
    #[serde(default)]
    pub devices: DeviceChoice,
    /// At most this many processes (threads count too) per job.
    #[serde(default = "default_max_processes")]
    pub max_processes: u64,
    /// A site's own devices every job may open, as `devices.allow` lines
    /// (`"c 10:200 rw"`), beside the built-in list (see `devices.rs`).
    #[serde(default)]
    pub allow_devices: Vec<String>,
}

impl Default for ConfinementConfig {
    fn default() -> Self {
        Self {
            mode: ConfineMode::Auto,
            devices: DeviceChoice::Auto,
            max_processes: default_max_processes(),
            allow_devices: Vec::new(),
        }
    }
}

impl ConfinementConfig {
    /// Refuses a bound no job could start under, naming the key.
    pub fn check(&self) -> Result<(), String> {
        if self.max_processes < MIN_PROCESSES {
            return Err(format!(
                "confinement.max_processes: {} is too few for any job (a shell and its \
                 command already take several); give at least {MIN_PROCESSES}",
                self.max_processes
            ));
        }
        self.extra_devices().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// `allow_devices` as rules (Err names the key and the bad entry).
    pub fn extra_devices(&self) -> Result<Vec<devices::DeviceRule>, devices::BadDeviceRule> {
        self.allow_devices
            .iter()
            .map(|e| devices::parse_rule(e))
            .collect()
    }
}

/// Fewer processes than this cannot run a Python job with a thread pool.
const MIN_PROCESSES: u64 = 16;

fn default_max_processes() -> u64 {
    4096
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ConfineMode {
    #[default]
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    #[default]
    Auto,
    V1,
    Bpf,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the kernel refused the device program: {source}{}", if verifier.is_empty() { String::new() } else { format!(" ({verifier})") })]
    BpfLoad {
        source: std::io::Error,
        verifier: String,
    },
    #[error("cannot attach the device program to {}: {source}", path.display())]
    BpfAttach {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("[confinement] devices = \"{asked}\" cannot be used here: {why}; use devices = \"auto\" or mode = \"off\"")]
    DevicesUnavailable { asked: &'static str, why: String },
    #[error("the job's cgroup {} still has {left} processes after {waited:?}", path.display())]
    NotEmptied {
        path: PathBuf,
        left: usize,
        waited: std::time::Duration,
    },
}

impl CgroupError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Writes one value into a control file.
pub(crate) fn write(group: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = group.join(file);
    std::fs::write(&path, value).map_err(|e| CgroupError::io(&path, e))
}

/// How devices are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceVia {
    V1,
    Bpf,
}

/// The confinement in force on this daemon.
#[derive(Debug, Clone)]
pub struct Confinement {
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    Off(String),
    On(Active),
}

#[derive(Debug, Clone)]
struct Active {
    /// v1 controller → the jobs' parent group in it.
    v1: BTreeMap<String, PathBuf>,
    /// The jobs' parent group in cgroup2, and the controllers it hands down.
    v2: Option<(PathBuf, Vec<String>)>,
    devices: Option<DeviceVia>,
    /// v1 devices on a hybrid host: the device program is attached too, since
    /// v1 has no common-ancestor rule for moving a process between groups.
    bpf_too: bool,
    /// The site's own `allow_devices`.
    extra_devices: Vec<devices::DeviceRule>,
    max_processes: u64,
    /// The daemon's cgroup2 group is not delegated to it: its controllers
    /// were left alone.
    undelegated: bool,
}

/// What one attempt's groups enforce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSpec {
    /// Minor numbers of its GPUs' device nodes.
    pub gpu_minors: Vec<u32>,
    /// Its memory limit (0: the jobs' common limit only).
    pub memory_mib: u64,
    /// Its CPUs (empty: its parent's).
    pub cpus: Vec<u32>,
    /// The CPUs are its own (see [`JobGroups::holds_cpus`]).
    pub holds_cpus: bool,
}

impl Confinement {
    /// No confinement, for this reason.
    pub fn off(why: impl Into<String>) -> Self {
        Self {
            state: State::Off(why.into()),
        }
    }

    /// Finds what this process may use (and sets its subtree up for jobs).
    /// Err: the config asks for a device path this host does not have.
    pub fn detect(cfg: &ConfinementConfig) -> Result<Self, CgroupError> {
        if cfg.mode == ConfineMode::Off {
            return Ok(Self::off("[confinement] mode = \"off\""));
        }
        let mounts = match detect::mounts() {
            Ok(m) => m,
            Err(e) => return Ok(Self::off(format!("cannot read /proc/self/cgroup: {e}"))),
        };
        Self::from_mounts(cfg, &mounts)
    }

    fn from_mounts(cfg: &ConfinementConfig, mounts: &detect::Mounts) -> Result<Self, CgroupError> {
        if mounts.v1.is_empty() && mounts.v2.is_none() {
            return Ok(Self::off("no cgroup filesystem is mounted"));
        }
        let mut refused = Vec::new();
        let mut v1 = BTreeMap::new();
        for (ctrl, own) in &mounts.v1 {
            let jobs = own.join(JOBS_DIR);
            match v2::mkdir(&jobs)
                .and_then(|()| can_make_groups_in(&jobs))
                .and_then(|()| v1::prepare_parent(ctrl, &jobs))
            {
                Ok(()) => {
                    v1.insert(ctrl.clone(), jobs);
                }
                Err(e) => refused.push(e.to_string()),
            }
        }
        let mut v2_jobs = None;
        let mut undelegated = false;
        if let Some((own, own_path)) = &mounts.v2 {
            let base = v2::base_of(own);
            let jobs = base.join(JOBS_DIR);
            match v2::mkdir(&jobs).and_then(|()| can_make_groups_in(&jobs)) {
                Ok(()) => {
                    // Controllers bound to v1 are not offered here anyway.
                    let ctrls: Vec<String> = v2::offered(&base)
                        .into_iter()
                        .filter(|c| {
                            !(v1.contains_key(c.as_str())
                                || c == "cpu" && v1.contains_key("cpuacct"))
                        })
                        .collect();
                    // SAFETY: plain syscall.
                    let root_user = unsafe { libc::geteuid() } == 0;
                    let delegated = ctrls.is_empty()
                        || v2::is_delegated(
                            own_path == "/" && root_user,
                            &v2::delegate_xattrs(&base),
                            &v2::procs(&base),
                            std::process::id(),
                        );
                    if !delegated {
                        // Not ours to rearrange (an SSH session's scope, a
                        // unit without Delegate=yes): devices only, which the
                        // device program confines without any controller.
                        undelegated = true;
                        v2_jobs = Some((jobs, vec![]));
                    } else {
                        match v2::delegate(&base, &jobs, &ctrls, own_path == "/") {
                            Ok(()) => v2_jobs = Some((jobs, ctrls)),
                            Err(e) => {
                                refused.push(e.to_string());
                                v2_jobs = Some((jobs, vec![]));
                            }
                        }
                    }
                }
                Err(e) => refused.push(e.to_string()),
            }
        }
        if v1.is_empty() && v2_jobs.is_none() {
            let why = refused.first().cloned().unwrap_or_default();
            return Ok(Self::off(format!(
                "cannot create the jobs' cgroups (not root and nothing delegated?): {why}"
            )));
        }
        let devices = match cfg.devices {
            DeviceChoice::V1 if v1.contains_key("devices") => Some(DeviceVia::V1),
            DeviceChoice::V1 => {
                return Err(CgroupError::DevicesUnavailable {
                    asked: "v1",
                    why: "the v1 devices controller is not mounted (or not writable)".into(),
                })
            }
            DeviceChoice::Bpf => match &v2_jobs {
                Some((jobs, _)) => {
                    probe_bpf(jobs).map_err(|e| CgroupError::DevicesUnavailable {
                        asked: "bpf",
                        why: e.to_string(),
                    })?;
                    Some(DeviceVia::Bpf)
                }
                None => {
                    return Err(CgroupError::DevicesUnavailable {
                        asked: "bpf",
                        why: "no writable cgroup2 group".into(),
                    })
                }
            },
            DeviceChoice::Auto if v1.contains_key("devices") => Some(DeviceVia::V1),
            DeviceChoice::Auto => v2_jobs
                .as_ref()
                .and_then(|(jobs, _)| probe_bpf(jobs).ok())
                .map(|()| DeviceVia::Bpf),
        };
        // Hybrid: a process that moves itself into another v1 group escapes
        // the v1 rules, not a program on its cgroup2 group (its v2 group
        // cannot be left for one outside the daemon's subtree).
        let bpf_too = cfg.devices == DeviceChoice::Auto
            && devices == Some(DeviceVia::V1)
            && v2_jobs
                .as_ref()
                .is_some_and(|(jobs, _)| probe_bpf(jobs).is_ok());
        Ok(Self {
            state: State::On(Active {
                v1,
                v2: v2_jobs,
                devices,
                bpf_too,
                extra_devices: cfg.extra_devices().unwrap_or_default(),
                max_processes: cfg.max_processes,
                undelegated,
            }),
        })
    }

    pub fn is_on(&self) -> bool {
        matches!(self.state, State::On(_))
    }

    /// Devices are confined: a job reaches only its own GPUs.
    pub fn confines_devices(&self) -> bool {
        matches!(&self.state, State::On(a) if a.devices.is_some())
    }

    /// One line for the daemon's log and `gpuq doctor`: which isolation is in
    /// force, or "none: <why>".
    pub fn describe(&self) -> String {
        let a = match &self.state {
            State::Off(why) => return format!("none: {why}"),
            State::On(a) => a,
        };
        let v2_ctrls: Vec<&str> =
            a.v2.iter()
                .flat_map(|(_, c)| c.iter().map(String::as_str))
                .collect();
        // In the order people read them: devices, memory, pids, cpuset, …
        let v1_ctrls: Vec<&str> = detect::V1_CONTROLLERS
            .into_iter()
            .filter(|c| a.v1.contains_key(*c))
            .filter(|c| *c != "devices" || a.devices == Some(DeviceVia::V1))
            .collect();
        let mut out = match a.devices {
            Some(DeviceVia::Bpf) if v1_ctrls.is_empty() => {
                let mut parts = vec!["device program"];
                parts.extend(&v2_ctrls);
                format!("cgroup v2 ({})", parts.join(", "))
            }
            Some(DeviceVia::Bpf) => {
                let mut s = format!("cgroup v2 device program + v1 {}", v1_ctrls.join("/"));
                if !v2_ctrls.is_empty() {
                    s.push_str(&format!(" + v2 {}", v2_ctrls.join("/")));
                }
                s
            }
            _ if v1_ctrls.is_empty() => format!("cgroup v2 ({})", v2_ctrls.join(", ")),
            _ => {
                let mut s = format!("cgroup v1 ({})", v1_ctrls.join(", "));
                if !v2_ctrls.is_empty() {
                    s.push_str(&format!(" + v2 {}", v2_ctrls.join("/")));
                }
                s
            }
        };
        if a.bpf_too {
            out.push_str(" + v2 device program");
        }
        if a.devices.is_none() {
            out.push_str("; devices NOT confined (no devices controller, no device program)");
        }
        if a.undelegated && !self.limits("memory") {
            out.push_str(
                "; memory, cores and processes are not confined: run under the systemd unit \
                 (Delegate=yes), docs/systemd/gpuq.service",
            );
        } else if !self.limits("memory") {
            out.push_str("; memory NOT limited");
        }
        out
    }

    /// A controller is in force for jobs, through v1 or v2.
    fn limits(&self, ctrl: &str) -> bool {
        match &self.state {
            State::Off(_) => false,
            State::On(a) => {
                a.v1.contains_key(ctrl)
                    || a.v2
                        .as_ref()
                        .is_some_and(|(_, c)| c.iter().any(|x| x == ctrl))
            }
        }
    }

    /// The CPUs jobs may be given (the jobs' cpuset, or this process's affinity).
    pub fn cpus(&self) -> BTreeSet<u32> {
        if let State::On(a) = &self.state {
            let group = a.v1.get("cpuset").cloned().or_else(|| {
                a.v2.as_ref()
                    .filter(|(_, c)| c.iter().any(|x| x == "cpuset"))
                    .map(|(p, _)| p.clone())
            });
            if let Some(g) = group {
                let file = if a.v1.contains_key("cpuset") {
                    "cpuset.cpus"
                } else {
                    "cpuset.cpus.effective"
                };
                let set =
                    cpus::parse_list(&std::fs::read_to_string(g.join(file)).unwrap_or_default());
                if !set.is_empty() {
                    return set;
                }
            }
        }
        affinity()
    }

    /// Cores are confined (a cpuset per job).
    pub fn confines_cpus(&self) -> bool {
        self.limits("cpuset")
    }

    /// Limits all jobs together to `mib` (the node's allocatable memory), so
    /// they cannot take the daemon's share.
    pub fn limit_all_jobs_memory(&self, mib: u64) -> Result<(), CgroupError> {
        let State::On(a) = &self.state else {
            return Ok(());
        };
        if mib == 0 {
            return Ok(());
        }
        let bytes = mib.saturating_mul(1024 * 1024);
        if let Some(g) = a.v1.get("memory") {
            v1::memory_limit(g, bytes)
        } else if let Some((g, c)) = &a.v2 {
            if c.iter().any(|x| x == "memory") {
                write(g, "memory.max", &bytes.to_string())
            } else {
                Ok(())
            }
        } else {
            Ok(())
        }
    }

    /// Creates and configures an attempt's groups; on error nothing is left.
    pub fn create(&self, name: &str, spec: &GroupSpec) -> Result<Option<JobGroups>, CgroupError> {
        let State::On(a) = &self.state else {
            return Ok(None);
        };
        let mut groups = JobGroups {
            cpus: spec.cpus.clone(),
            holds_cpus: spec.holds_cpus,
            ..Default::default()
        };
        for (ctrl, parent) in &a.v1 {
            groups.v1.insert(ctrl.clone(), parent.join(name));
        }
        groups.v2 = a.v2.as_ref().map(|(p, _)| p.join(name));
        if groups.dirs().iter().any(|d| d.exists()) {
            // A group of this name from an earlier life (a daemon killed before
            // it could remove it): never reused with what it holds, whether
            // processes or limits; emptied, removed and made anew.
            groups.kill_all(EMPTY_WITHIN)?;
            groups.remove()?;
        }
        match self.configure(a, &mut groups, spec) {
            Ok(()) => Ok(Some(groups)),
            Err(e) => {
                let _ = groups.remove();
                Err(e)
            }
        }
    }

    fn configure(
        &self,
        a: &Active,
        g: &mut JobGroups,
        spec: &GroupSpec,
    ) -> Result<(), CgroupError> {
        let rules = devices::allow_list(
            &spec.gpu_minors,
            &devices::HostDevices::read(),
            &a.extra_devices,
        );
        let limit = (spec.memory_mib > 0).then(|| spec.memory_mib.saturating_mul(1024 * 1024));
        g.memory_limit_bytes = limit;
        for (ctrl, dir) in &g.v1 {
            v2::mkdir(dir)?;
            match ctrl.as_str() {
                "devices" if a.devices == Some(DeviceVia::V1) => v1::devices(dir, &rules)?,
                "memory" => {
                    if let Some(bytes) = limit {
                        v1::memory_limit(dir, bytes)?;
                    }
                }
                "pids" => write(dir, "pids.max", &a.max_processes.to_string())?,
                "cpuset" => {
                    if spec.cpus.is_empty() {
                        v1::copy_from_parent(dir, "cpuset.cpus")?;
                    } else {
                        write(dir, "cpuset.cpus", &cpus::format_list(&spec.cpus))?;
                    }
                    v1::copy_from_parent(dir, "cpuset.mems")?;
                }
                _ => {}
            }
        }
        if let (Some(dir), Some((_, ctrls))) = (&g.v2, &a.v2) {
            v2::mkdir(dir)?;
            if a.devices == Some(DeviceVia::Bpf) || a.bpf_too {
                bpf::attach(dir, &rules)?;
            }
            let has = |c: &str| ctrls.iter().any(|x| x == c);
            if has("memory") {
                if let Some(bytes) = limit {
                    v2::memory_limit(dir, bytes)?;
                }
            }
            if has("pids") {
                write(dir, "pids.max", &a.max_processes.to_string())?;
            }
            if has("cpuset") && !spec.cpus.is_empty() {
                write(dir, "cpuset.cpus", &cpus::format_list(&spec.cpus))?;
            }
        }
        Ok(())
    }

    /// The groups under the jobs' parents (name → one group per hierarchy),
    /// for the sweep of orphans at start.
    pub fn existing(&self) -> BTreeMap<String, JobGroups> {
        let mut out: BTreeMap<String, JobGroups> = BTreeMap::new();
        let State::On(a) = &self.state else {
            return out;
        };
        let names = |p: &Path| -> Vec<String> {
            std::fs::read_dir(p)
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| n.starts_with("job-"))
                        .collect()
                })
                .unwrap_or_default()
        };
        for (ctrl, parent) in &a.v1 {
            for n in names(parent) {
                out.entry(n.clone())
                    .or_default()
                    .v1
                    .insert(ctrl.clone(), parent.join(&n));
            }
        }
        if let Some((parent, _)) = &a.v2 {
            for n in names(parent) {
                out.entry(n.clone()).or_default().v2 = Some(parent.join(&n));
            }
        }
        out
    }
}

/// This process may make (and so configure) groups in `parent`: the parent
/// may exist already, made by another account's daemon.
fn can_make_groups_in(parent: &Path) -> Result<(), CgroupError> {
    let probe = parent.join(format!(".probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| CgroupError::io(&probe, e))?;
    let _ = std::fs::remove_dir(&probe);
    Ok(())
}

/// The name of an attempt's groups.
pub fn group_name(job: gpuq_core::JobId, attempt: u32) -> String {
    format!("job-{job}-{attempt}")
}

/// The job and attempt a group's name stands for.
pub fn parse_group_name(name: &str) -> Option<(gpuq_core::JobId, u32)> {
    let (job, attempt) = name.strip_prefix("job-")?.rsplit_once('-')?;
    Some((job.parse().ok()?, attempt.parse().ok()?))
}

/// Loads (and drops) a deny-all program: the kernel lets this process load
/// and attach device programs.
fn probe_bpf(jobs: &Path) -> Result<(), CgroupError> {
    let probe = jobs.join(format!(".probe-bpf-{}", std::process::id()));
    v2::mkdir(&probe)?;
    let r = bpf::attach(&probe, &[]);
    let _ = std::fs::remove_dir(&probe);
    r
}

/// The CPUs this process may run on.
fn affinity() -> BTreeSet<u32> {
    // SAFETY: a zeroed cpu_set_t filled by the kernel for this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return BTreeSet::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c as u32)
            .collect()
    }
}

#[cfg(test)]
mod hybrid_tests;
#[cfg(test)]
mod tests;
