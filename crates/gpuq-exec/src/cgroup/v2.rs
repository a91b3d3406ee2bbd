//! cgroup v2: the daemon's (delegated) group holds the daemon in a leaf
//! (`daemon/`) beside `gpuq-jobs/`, because a group that hands controllers to
//! its children may hold no process itself.

use super::detect::V2_CONTROLLERS;
use super::{write, CgroupError};
use std::path::{Path, PathBuf};

/// The leaf the daemon moves into.
pub const DAEMON_LEAF: &str = "daemon";

/// The controllers `group` offers that jobs use.
pub fn offered(group: &Path) -> Vec<String> {
    std::fs::read_to_string(group.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .filter(|c| V2_CONTROLLERS.contains(c))
        .map(str::to_string)
        .collect()
}

/// The group whose subtree is the daemon's: its own, or (a daemon restarted
/// from the leaf it moved into) the one above its leaf.
pub fn base_of(own: &Path) -> PathBuf {
    match (own.file_name(), own.parent()) {
        (Some(name), Some(up)) if name == DAEMON_LEAF && up.join(super::JOBS_DIR).is_dir() => {
            up.to_path_buf()
        }
        _ => own.to_path_buf(),
    }
}

/// Makes `base` hand `controllers` to `base/gpuq-jobs` and on to each job:
/// every process of `base` (the daemon, and anything started with it) moves
/// into the leaf first. `is_root`: the hierarchy's root group, which may hold
/// processes and delegate at once.
pub fn delegate(
    base: &Path,
    jobs: &Path,
    controllers: &[String],
    is_root: bool,
) -> Result<(), CgroupError> {
    if controllers.is_empty() {
        return Ok(());
    }
    if !is_root {
        let leaf = base.join(DAEMON_LEAF);
        mkdir(&leaf)?;
        let procs = std::fs::read_to_string(base.join("cgroup.procs"))
            .map_err(|e| CgroupError::io(&base.join("cgroup.procs"), e))?;
        for pid in procs.lines().filter(|l| !l.trim().is_empty()) {
            // A process that ended meanwhile cannot be moved: no matter.
            match write(&leaf, "cgroup.procs", pid.trim()) {
                Err(CgroupError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::ESRCH) => {}
                other => other?,
            }
        }
    }
    let enable: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
    write(base, "cgroup.subtree_control", &enable.join(" "))?;
    write(jobs, "cgroup.subtree_control", &enable.join(" "))
}

pub fn mkdir(p: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(CgroupError::io(p, e)),
    }
}

/// The job's memory limit, no swap, and the whole job killed together on OOM.
pub fn memory_limit(group: &Path, bytes: u64) -> Result<(), CgroupError> {
    write(group, "memory.max", &bytes.to_string())?;
    if group.join("memory.swap.max").exists() {
        write(group, "memory.swap.max", "0")?;
    }
    write(group, "memory.oom.group", "1")
}
