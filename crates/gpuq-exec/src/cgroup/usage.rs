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
    // `oom_kill` counts every kill of the group's processes, also those the
    // kernel made because a parent's limit (all jobs together) or the host ran
    // out; only a hit of the group's own limit makes the kill the job's own.
    let (kills, limit_hit) = if let Some(mem) = groups.v1.get("memory") {
        u.memory_peak_bytes = number(mem, "memory.max_usage_in_bytes");
        (
            read(mem, "memory.oom_control").and_then(|t| keyed(&t, "oom_kill")),
            v1_limit_hit(mem),
        )
    } else if let Some(v2) = &groups.v2 {
        u.memory_peak_bytes = number(v2, "memory.peak");
        let events = read(v2, "memory.events").unwrap_or_default();
        // `max` and `oom` are raised at the group whose own limit was reached
        // (and its ancestors), never at the groups under it.
        let own = |k| keyed(&events, k).is_some_and(|n| n > 0);
        (keyed(&events, "oom_kill"), own("max") || own("oom"))
    } else {
        (None, false)
    };
    if kills.is_some_and(|n| n > 0) {
        u.oom_killed = limit_hit;
        u.node_oom_killed = !limit_hit;
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

/// Whether a v1 memory group's own limit was reached. v1 counts a failed
/// charge (`failcnt`) only at the group whose limit it hit, but recent kernels
/// keep no count for the swap-inclusive limit, which fails first where swap
/// is accounted (and is set with the limit): so a peak that reached a limit
/// of the group's own, but for what one failed charge could not add, counts too.
fn v1_limit_hit(mem: &Path) -> bool {
    if number(mem, "memory.failcnt").is_some_and(|n| n > 0)
        || number(mem, "memory.memsw.failcnt").is_some_and(|n| n > 0)
    {
        return true;
    }
    [
        ("memory.limit_in_bytes", "memory.max_usage_in_bytes"),
        (
            "memory.memsw.limit_in_bytes",
            "memory.memsw.max_usage_in_bytes",
        ),
    ]
    .iter()
    .any(
        |(limit, peak)| match (number(mem, limit), number(mem, peak)) {
            // "No limit" reads as a number near i64::MAX, which no peak reaches.
            (Some(limit), Some(peak)) => peak.saturating_add(CHARGE_SLACK.min(limit / 8)) >= limit,
            _ => false,
        },
    )
}

/// The most a failed charge leaves a group short of its limit (a huge page).
const CHARGE_SLACK: u64 = 4 << 20;

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
        assert!(u.oom_killed && !u.node_oom_killed);
        assert_eq!(u.memory_peak_bytes, Some(1 << 20));
        assert_eq!(u.memory_limit_bytes, Some(64 << 20));
        assert_eq!(u.cpu_seconds, Some(1.5));
        // Killed although its own limit was never reached: the node's fault.
        std::fs::write(g.join("memory.events"), "max 0\noom 0\noom_kill 1\n").unwrap();
        let u = read_usage(&groups);
        assert!(!u.oom_killed && u.node_oom_killed, "{u:?}");
        std::fs::write(g.join("memory.events"), "max 3\noom 0\noom_kill 1\n").unwrap();
        assert!(read_usage(&groups).oom_killed);
        std::fs::write(g.join("memory.events"), "max 3\noom 0\noom_kill 0\n").unwrap();
        let u = read_usage(&groups);
        assert!(!u.oom_killed && !u.node_oom_killed);
    }

    #[test]
    fn v1_an_oom_kill_is_the_jobs_own_only_when_its_own_limit_failed_a_charge() {
        let tmp = tempfile::tempdir().unwrap();
        let g = tmp.path();
        std::fs::write(
            g.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(g.join("memory.failcnt"), "0\n").unwrap();
        std::fs::write(g.join("memory.limit_in_bytes"), "1073741824\n").unwrap();
        std::fs::write(g.join("memory.max_usage_in_bytes"), "104857600\n").unwrap();
        let groups = JobGroups {
            v1: [("memory".to_string(), g.to_path_buf())].into(),
            ..Default::default()
        };
        let u = read_usage(&groups);
        assert!(!u.oom_killed && u.node_oom_killed, "{u:?}");
        std::fs::write(g.join("memory.failcnt"), "4\n").unwrap();
        let u = read_usage(&groups);
        assert!(u.oom_killed && !u.node_oom_killed, "{u:?}");
        // No count kept (the swap-inclusive limit failed first), but the peak
        // reached the limit: its own.
        std::fs::write(g.join("memory.failcnt"), "0\n").unwrap();
        std::fs::write(g.join("memory.memsw.failcnt"), "0\n").unwrap();
        std::fs::write(g.join("memory.memsw.limit_in_bytes"), "1073741824\n").unwrap();
        std::fs::write(g.join("memory.memsw.max_usage_in_bytes"), "1073741824\n").unwrap();
        assert!(read_usage(&groups).oom_killed);
    }
}
