//! One attempt's groups: recorded in the job directory (`attempt-N.cgroup`,
//! the daemon's file) so the supervisor and a restarted daemon find them;
//! signalled as a whole, emptied, counted and removed.

use super::CgroupError;
use crate::layout::JobDir;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where one attempt's processes are confined.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGroups {
    /// v1 controller → the attempt's group in it.
    #[serde(default)]
    pub v1: BTreeMap<String, PathBuf>,
    /// The attempt's cgroup2 group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v2: Option<PathBuf>,
    /// The CPUs of its cpuset (what it holds while it runs).
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// Those CPUs are its own (it asked for cores); else they are what nobody
    /// held when it started, which it shares.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holds_cpus: bool,
    /// Its memory limit (none: the jobs' common limit only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
}

/// The record's name in the job directory.
pub fn record_name(attempt: u32) -> String {
    format!("attempt-{attempt}.cgroup")
}

/// A record is a few hundred bytes.
const MAX_RECORD: u64 = 64 * 1024;
/// How long emptying a group may take before it is reported stuck (a process
/// in uninterruptible sleep on a dead device can outlive SIGKILL a while).
pub const EMPTY_WITHIN: Duration = Duration::from_secs(30);

impl JobGroups {
    /// Every group directory, v1 ones first, each once.
    pub fn dirs(&self) -> Vec<&Path> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for p in self.v1.values().chain(self.v2.iter()) {
            if seen.insert(p.as_path()) {
                out.push(p.as_path());
            }
        }
        out
    }

    pub fn save(&self, dir: &JobDir, attempt: u32) -> std::io::Result<()> {
        let json = serde_json::to_vec(self).expect("groups serialize");
        crate::layout::write_atomically(&dir.root().join(record_name(attempt)), &json)
    }

    /// The attempt's record; `Ok(None)`: it has none (it ran unconfined).
    pub fn load(dir: &JobDir, attempt: u32) -> std::io::Result<Option<Self>> {
        let bytes = match crate::safe_fs::Dir::open(dir.root())
            .and_then(|d| d.read_regular(&record_name(attempt), MAX_RECORD, None))
        {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Every process in any of the groups.
    pub fn procs(&self) -> BTreeSet<i32> {
        let mut out = BTreeSet::new();
        for d in self.dirs() {
            if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
                out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        out.retain(|&p| p > 1);
        out
    }

    /// Sends `signal` to every process of the job; the number reached.
    pub fn signal(&self, signal: i32) -> usize {
        self.frozen(|| {
            let mut n = 0;
            for pid in self.procs() {
                // SAFETY: plain syscall; pid > 1 (never init, never "every process").
                if unsafe { libc::kill(pid, signal) } == 0 {
                    n += 1;
                }
            }
            n
        })
    }

    /// Sends `signal` to the job's processes that are not in process group
    /// `pgid` (which the caller signals as a whole); the number reached.
    pub fn signal_outside(&self, signal: i32, pgid: i32) -> usize {
        self.frozen(|| {
            let mut n = 0;
            for pid in self.procs() {
                // SAFETY: plain syscalls; pid > 1.
                unsafe {
                    if libc::getpgid(pid) != pgid && libc::kill(pid, signal) == 0 {
                        n += 1;
                    }
                }
            }
            n
        })
    }

    /// Runs `f` with the job frozen (the v1 freezer, else v2 `cgroup.freeze`)
    /// where it can be: a pid read from `cgroup.procs` then stays the job's
    /// until the signal is sent, never a process that took over a freed pid.
    /// Signals sent meanwhile are delivered once it is thawed.
    fn frozen<R>(&self, f: impl FnOnce() -> R) -> R {
        let done = match (self.v1.get("freezer"), &self.v2) {
            (Some(g), _) if freeze(g, true) => Some((g.as_path(), true)),
            (_, Some(g)) if freeze_v2(g, true) => Some((g.as_path(), false)),
            _ => None,
        };
        let out = f();
        match done {
            Some((g, true)) => {
                freeze(g, false);
            }
            Some((g, false)) => {
                freeze_v2(g, false);
            }
            None => {}
        }
        out
    }

    /// Kills every process of the job and waits until none is left (at most
    /// `within`): v2 `cgroup.kill` where the kernel has it; else frozen, each
    /// killed, thawed (a frozen group cannot fork past the kill), in rounds.
    pub fn kill_all(&self, within: Duration) -> Result<(), CgroupError> {
        let deadline = Instant::now() + within;
        let mut pause = Duration::from_millis(5);
        loop {
            let left = self.procs();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CgroupError::NotEmptied {
                    path: self
                        .dirs()
                        .first()
                        .map(|p| p.to_path_buf())
                        .unwrap_or_default(),
                    left: left.len(),
                    waited: within,
                });
            }
            let killed_by_kernel = self
                .v2
                .as_ref()
                .is_some_and(|g| std::fs::write(g.join("cgroup.kill"), "1").is_ok());
            if !killed_by_kernel {
                let freezer = self.v1.get("freezer");
                let frozen = freezer.is_some_and(|f| freeze(f, true));
                self.signal(libc::SIGKILL);
                if let (Some(f), true) = (freezer, frozen) {
                    // Killed processes die only once thawed.
                    freeze(f, false);
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Removes the groups (children first: a job may have made its own).
    pub fn remove(&self) -> Result<(), CgroupError> {
        let mut first = None;
        for d in self.dirs() {
            if let Err(e) = remove_tree(d) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// How long ago the youngest of the groups was made (`None`: none is there).
    pub fn age(&self) -> Option<Duration> {
        self.dirs()
            .iter()
            .filter_map(|d| std::fs::metadata(d).and_then(|m| m.modified()).ok())
            .map(|t| t.elapsed().unwrap_or_default())
            .min()
    }

    /// The controller files the supervisor writes a job into, one per group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().iter().map(|d| d.join("cgroup.procs")).collect()
    }
}

/// Freezes (or thaws) a cgroup2 group; true once it is in that state.
fn freeze_v2(group: &Path, on: bool) -> bool {
    if std::fs::write(group.join("cgroup.freeze"), if on { "1" } else { "0" }).is_err() {
        return false;
    }
    let want = if on { "frozen 1" } else { "frozen 0" };
    for _ in 0..100 {
        match std::fs::read_to_string(group.join("cgroup.events")) {
            Ok(s) if s.lines().any(|l| l.trim() == want) => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => return false,
        }
    }
    false
}

/// Freezes (or thaws) a v1 freezer group; true once it is in that state.
fn freeze(group: &Path, on: bool) -> bool {
    let want = if on { "FROZEN" } else { "THAWED" };
    if std::fs::write(group.join("freezer.state"), want).is_err() {
        return false;
    }
    for _ in 0..100 {
        match std::fs::read_to_string(group.join("freezer.state")) {
            Ok(s) if s.trim() == want => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => return false,
        }
    }
    false
}

/// rmdir of a group and the groups under it, deepest first; a group already
/// gone is no error.
pub fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path())?;
            }
        }
    }
    // A group that was just emptied may be busy a moment longer.
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(CgroupError::io(dir, last.expect("tried")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_a_missing_one_is_none() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = JobDir::from_root(tmp.path().to_path_buf());
        assert_eq!(JobGroups::load(&dir, 1).unwrap(), None);
        let g = JobGroups {
            v1: [(
                "memory".to_string(),
                PathBuf::from("/sys/fs/cgroup/memory/gpuq-jobs/job-1-1"),
            )]
            .into(),
            v2: Some("/sys/fs/cgroup/unified/gpuq-jobs/job-1-1".into()),
            cpus: vec![0, 1],
            holds_cpus: true,
            memory_limit_bytes: Some(1 << 30),
        };
        g.save(&dir, 1).unwrap();
        assert_eq!(JobGroups::load(&dir, 1).unwrap(), Some(g.clone()));
        assert_eq!(g.dirs().len(), 2);
        // A group that does not exist has no processes, and removing it is no error.
        assert!(g.procs().is_empty());
        let gone = JobGroups {
            v2: Some(tmp.path().join("no-such-group")),
            ..Default::default()
        };
        assert!(gone.remove().is_ok());
    }
}
