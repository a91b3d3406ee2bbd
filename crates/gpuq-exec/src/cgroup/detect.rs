//! Where this process's cgroups are: `/proc/self/cgroup` names its group in
//! each hierarchy, `/proc/self/mountinfo` where each hierarchy is mounted.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The controllers a job's v1 groups use.
pub const V1_CONTROLLERS: [&str; 6] = ["devices", "memory", "pids", "cpuset", "cpuacct", "freezer"];
/// The v2 controllers delegated to jobs (when the subtree offers them).
pub const V2_CONTROLLERS: [&str; 4] = ["memory", "pids", "cpuset", "cpu"];

/// The hierarchies this process belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// v1 controller → this process's group in it (mount point + own path).
    pub v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount and this process's group in it.
    pub v2: Option<(PathBuf, String)>,
}

/// Parses `/proc/self/cgroup` into (controllers, path) lines: `4:memory:/a`
/// gives `(["memory"], "/a")`, `0::/b` gives `([], "/b")`.
pub fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            let ctrls = ctrls
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some((ctrls, path.to_string()))
        })
        .collect()
}

/// One cgroup mount of `/proc/self/mountinfo`: its root within the hierarchy,
/// its mount point, whether it is cgroup2, and its v1 controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub root: String,
    pub point: PathBuf,
    pub v2: bool,
    pub controllers: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        // ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL…] - FSTYPE SOURCE SUPEROPTS
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        if left.len() < 5 || right.len() < 3 {
            continue;
        }
        let (root, point) = (unescape(left[3]), PathBuf::from(unescape(left[4])));
        match right[0] {
            "cgroup2" => out.push(CgroupMount {
                root,
                point,
                v2: true,
                controllers: vec![],
            }),
            "cgroup" => out.push(CgroupMount {
                root,
                point,
                v2: false,
                controllers: right[2]
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(str::to_string)
                    .collect(),
            }),
            _ => {}
        }
    }
    out
}

/// Joins a mount point with this process's path in the hierarchy, relative to
/// the mount's root (a container sees its own group as `/`).
fn join(mount: &CgroupMount, own: &str) -> Option<PathBuf> {
    let rel = if mount.root == "/" {
        own
    } else {
        // A path outside the mount's root is not reachable through it (by
        // whole components: root /foo does not hold /foobar).
        std::path::Path::new(own)
            .strip_prefix(&mount.root)
            .ok()?
            .to_str()?
    };
    let rel = rel.trim_start_matches('/');
    // A process moved out of reach shows "(deleted)" or `..` paths: refuse them.
    if rel
        .split('/')
        .any(|c| c == ".." || c.ends_with("(deleted)"))
    {
        return None;
    }
    Some(if rel.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rel)
    })
}

/// This process's groups, from the two files' texts.
pub fn mounts_from(proc_cgroup: &str, mountinfo: &str) -> Mounts {
    let lines = parse_proc_cgroup(proc_cgroup);
    let mounts = parse_mountinfo(mountinfo);
    let mut out = Mounts::default();
    for (ctrls, own) in &lines {
        if ctrls.is_empty() {
            if let Some(m) = mounts.iter().find(|m| m.v2) {
                if let Some(p) = join(m, own) {
                    out.v2 = Some((p, own.clone()));
                }
            }
            continue;
        }
        for c in ctrls {
            if !V1_CONTROLLERS.contains(&c.as_str()) {
                continue;
            }
            if let Some(m) = mounts.iter().find(|m| !m.v2 && m.controllers.contains(c)) {
                if let Some(p) = join(m, own) {
                    out.v1.insert(c.clone(), p);
                }
            }
        }
    }
    out
}

/// This process's groups, read now.
pub fn mounts() -> std::io::Result<Mounts> {
    let cg = std::fs::read_to_string("/proc/self/cgroup")?;
    let mi = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(mounts_from(&cg, &mi))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n5:devices:/\n4:memory:/api/16c6\n2:cpuacct:/\n1:cpu:/\n8:pids:/\n0::/\n";
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_each_controllers_own_group_on_a_hybrid_host() {
        let m = mounts_from(HYBRID_CGROUP, HYBRID_MOUNTS);
        assert_eq!(
            m.v1["memory"],
            PathBuf::from("/sys/fs/cgroup/memory/api/16c6")
        );
        assert_eq!(m.v1["devices"], PathBuf::from("/sys/fs/cgroup/devices"));
        assert_eq!(m.v1["cpuacct"], PathBuf::from("/sys/fs/cgroup/cpuacct"));
        assert!(!m.v1.contains_key("cpu"), "cpu is not used");
        assert!(!m.v1.contains_key("cpuset"), "not mounted");
        assert_eq!(
            m.v2,
            Some((PathBuf::from("/sys/fs/cgroup/unified"), "/".into()))
        );
    }

    #[test]
    fn a_pure_v2_host_under_a_service_manager() {
        let cg = "0::/system.slice/gpuq.service\n";
        let mi = "30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let m = mounts_from(cg, mi);
        assert!(m.v1.is_empty());
        assert_eq!(
            m.v2,
            Some((
                PathBuf::from("/sys/fs/cgroup/system.slice/gpuq.service"),
                "/system.slice/gpuq.service".into()
            ))
        );
    }

    #[test]
    fn a_container_sees_its_group_as_the_root_of_the_mount() {
        let cg = "0::/\n";
        let mi = "30 24 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mounts_from(cg, mi).v2.unwrap().0,
            PathBuf::from("/sys/fs/cgroup")
        );
        // A group outside the mount's root cannot be reached through it.
        let mi = "30 24 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(mounts_from("0::/other\n", mi).v2, None);
        assert_eq!(
            mounts_from("0::/docker/abcdef\n", mi).v2,
            None,
            "not by prefix"
        );
        assert_eq!(
            mounts_from("0::/docker/abc/x\n", mi).v2.unwrap().0,
            PathBuf::from("/sys/fs/cgroup/x")
        );
        // No cgroup filesystem at all: nothing found.
        assert_eq!(mounts_from(cg, ""), Mounts::default());
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
