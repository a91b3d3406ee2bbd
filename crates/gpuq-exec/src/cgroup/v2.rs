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

/// Whether the daemon's cgroup2 group is its own to rearrange (processes
/// moved into a leaf, controllers handed down): the hierarchy's root when the
/// daemon runs as root (`root_as_root`); a group its service manager
/// delegated (systemd's `Delegate=yes` sets the `trusted.delegate` or
/// `user.delegate` xattr: `xattrs` are those present); or one that holds no
/// process but the daemon itself (`procs`, `own` its pid). Anything else (an
/// SSH session's scope with the admin's shell in it) belongs to someone else.
pub fn is_delegated(root_as_root: bool, xattrs: &[String], procs: &[u32], own: u32) -> bool {
    root_as_root
        || xattrs
            .iter()
            .any(|x| x == "trusted.delegate" || x == "user.delegate")
        || procs.iter().all(|&p| p == own)
}

/// The delegation xattrs set on `group` (those of the two it has).
pub fn delegate_xattrs(group: &Path) -> Vec<String> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(group.as_os_str().as_bytes()) else {
        return vec![];
    };
    ["trusted.delegate", "user.delegate"]
        .into_iter()
        .filter(|name| {
            let name = std::ffi::CString::new(*name).expect("no NUL");
            let mut buf = [0u8; 16];
            // SAFETY: valid C strings and a buffer of the length given.
            let n = unsafe {
                libc::getxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            n >= 0
        })
        .map(str::to_string)
        .collect()
}

/// The processes of `group` itself (not of the groups under it).
pub fn procs(group: &Path) -> Vec<u32> {
    std::fs::read_to_string(group.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Makes `base` hand `controllers` to `base/gpuq-jobs` and on to each job:
/// the daemon moves into the leaf first (only itself: see [`is_delegated`]). `is_root`: the hierarchy's root group, which may hold
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
        write(&leaf, "cgroup.procs", &std::process::id().to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_delegated_group_is_taken_over() {
        let own = 4242;
        let none: Vec<String> = vec![];
        // An admin's SSH session: its shell and sshd share the scope.
        assert!(!is_delegated(false, &none, &[own, 1000, 1001], own));
        // A unit with Delegate=yes, whatever else runs in it.
        let trusted = vec!["trusted.delegate".to_string()];
        assert!(is_delegated(false, &trusted, &[own, 1000], own));
        let user = vec!["user.delegate".to_string()];
        assert!(is_delegated(false, &user, &[own, 1000], own));
        // A group of the daemon's own (alone in it, or already in its leaf).
        assert!(is_delegated(false, &none, &[own], own));
        assert!(is_delegated(false, &none, &[], own));
        // The root of the hierarchy, as root.
        assert!(is_delegated(true, &none, &[own, 1, 77], own));
    }
}
