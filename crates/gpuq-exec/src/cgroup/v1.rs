//! cgroup v1: one group per controller, each under the daemon's own group of
//! that controller (`<own>/gpuq-jobs/job-ID-ATTEMPT`).

use super::devices::DeviceRule;
use super::{write, CgroupError};
use std::path::Path;

/// Prepares the jobs' parent group of a controller: a cpuset group takes no
/// process before it has CPUs and memory nodes, so they are copied down.
pub fn prepare_parent(controller: &str, parent: &Path) -> Result<(), CgroupError> {
    if controller == "cpuset" {
        copy_from_parent(parent, "cpuset.cpus")?;
        copy_from_parent(parent, "cpuset.mems")?;
    }
    Ok(())
}

/// Copies a file's value from the group above when this group's is empty.
pub fn copy_from_parent(group: &Path, file: &str) -> Result<(), CgroupError> {
    let mine = std::fs::read_to_string(group.join(file)).unwrap_or_default();
    if !mine.trim().is_empty() {
        return Ok(());
    }
    let Some(up) = group.parent() else {
        return Ok(());
    };
    let theirs =
        std::fs::read_to_string(up.join(file)).map_err(|e| CgroupError::io(&up.join(file), e))?;
    write(group, file, theirs.trim())
}

/// Denies every device, then allows the list (`devices.deny a` first: the
/// group starts with its parent's rights, usually all).
pub fn devices(group: &Path, rules: &[DeviceRule]) -> Result<(), CgroupError> {
    write(group, "devices.deny", "a")?;
    for r in rules {
        write(group, "devices.allow", &r.v1_line())?;
    }
    Ok(())
}

/// The memory limit without swap: the swap-inclusive limit is set too where
/// the kernel accounts swap, and the group does not swap.
pub fn memory_limit(group: &Path, bytes: u64) -> Result<(), CgroupError> {
    write(group, "memory.limit_in_bytes", &bytes.to_string())?;
    if group.join("memory.memsw.limit_in_bytes").exists() {
        write(group, "memory.memsw.limit_in_bytes", &bytes.to_string())?;
    }
    // Refused by some kernels for a group under a hierarchy root that swaps:
    // the memsw limit above already keeps the job out of swap.
    let _ = write(group, "memory.swappiness", "0");
    Ok(())
}
