//! Reads a job's counters from its groups before they are removed: OOM kills,
//! peak memory and CPU time, into the exit record's [`crate::CgroupUsage`].

use super::JobGroups;
use crate::CgroupUsage;
use std::path::Path;

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

fn number(dir: &Path, file: &str) -> Option<u64> {
    read(dir, file)?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed file (`oom_kill 1`, `usage_usec 42`).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// What the groups counted. The v1 controllers win where both exist (on a
/// hybrid host the v2 group holds no memory controller).
pub fn read_usage(groups: &JobGroups) -> CgroupUsage {
    let mut u = CgroupUsage {
        memory_limit_bytes: groups.memory_limit_bytes,
        // Only cores of its own count: a job without any shared what was free.
        cpus: (groups.holds_cpus && !groups.cpus.is_empty()).then_some(groups.cpus.len() as u32),
        ..Default::default()
    };
    if let Some(mem) = groups.v1.get("memory") {
        u.oom_killed = read(mem, "memory.oom_control")
            .and_then(|t| keyed(&t, "oom_kill"))
            .is_some_and(|n| n > 0);
        u.memory_peak_bytes = number(mem, "memory.max_usage_in_bytes");
    } else if let Some(v2) = &groups.v2 {
        u.oom_killed = read(v2, "memory.events")
            .and_then(|t| keyed(&t, "oom_kill"))
            .is_some_and(|n| n > 0);
        u.memory_peak_bytes = number(v2, "memory.peak");
    }
    if let Some(acct) = groups.v1.get("cpuacct") {
        u.cpu_seconds = number(acct, "cpuacct.usage").map(|ns| ns as f64 / 1e9);
    } else if let Some(v2) = &groups.v2 {
        // cpu.stat is there without the cpu controller too.
        u.cpu_seconds = read(v2, "cpu.stat")
            .and_then(|t| keyed(&t, "usage_usec"))
            .map(|us| us as f64 / 1e6);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keyed_counters() {
        let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "oom"), Some(1));
        assert_eq!(keyed("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), None);
    }

    #[test]
    fn v2_counters_of_a_group() {
        let tmp = tempfile::tempdir().unwrap();
        let g = tmp.path();
        std::fs::write(g.join("memory.events"), "oom 1\noom_kill 2\n").unwrap();
        std::fs::write(g.join("memory.peak"), "1048576\n").unwrap();
        std::fs::write(g.join("cpu.stat"), "usage_usec 1500000\nuser_usec 1\n").unwrap();
        let groups = JobGroups {
            v2: Some(g.to_path_buf()),
            memory_limit_bytes: Some(64 << 20),
            ..Default::default()
        };
        let u = read_usage(&groups);
        assert!(u.oom_killed);
        assert_eq!(u.memory_peak_bytes, Some(1 << 20));
        assert_eq!(u.memory_limit_bytes, Some(64 << 20));
        assert_eq!(u.cpu_seconds, Some(1.5));
    }
}
