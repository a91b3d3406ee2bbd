//! The local backend: each attempt runs on this machine under its own
//! supervisor (`gpuq __supervise`), which records the exit status on disk. A
//! thread per attempt waits for the supervisor and reports the end.

use crate::backend::{AttemptEvent, Backend, BackendInfo, EventSink, Launch, Reattached, Recorded};
use crate::cgroup::CpuTopology;
use crate::{AttemptLimits, ExitRecord, JobDir, LaunchRequest, LocalExecutor};
use gpuq_core::{JobId, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The CPUs each running attempt holds (its cpuset).
type Reserved = Arc<Mutex<BTreeMap<(JobId, u32), Vec<u32>>>>;

/// Another daemon's empty group younger than this may be one it is about to
/// enter a job into: left alone.
const FOREIGN_GROUP_AGE: Duration = Duration::from_secs(60);

/// How long the daemon's start waits for an orphaned attempt's processes to
/// die before it leaves the rest to a thread.
const REATTACH_KILL_WITHIN: Duration = Duration::from_secs(1);

/// How often an adopted attempt (not the daemon's child) is checked for its end.
const ADOPTED_CHECK: Duration = Duration::from_millis(100);

pub struct LocalBackend {
    executor: LocalExecutor,
    info: BackendInfo,
    events: OnceLock<EventSink>,
    /// The cores jobs' cpusets are chosen from (`None`: cores not confined).
    topology: Option<CpuTopology>,
    reserved: Reserved,
}

impl LocalBackend {
    /// A backend of one node: this machine.
    pub fn new(executor: LocalExecutor, node: Node, summary: String) -> Self {
        let topology = executor
            .confinement()
            .confines_cpus()
            .then(|| CpuTopology::read(&executor.confinement().cpus()));
        Self {
            topology,
            reserved: Arc::default(),
            executor,
            info: BackendInfo {
                name: "this machine".into(),
                nodes: vec![node],
                queues_launches: false,
                interactive: true,
                summary,
            },
            events: OnceLock::new(),
        }
    }

    /// The CPUs for an attempt asking `want`: exactly that many free ones,
    /// whole cores near its GPUs first. Err: not that many are free.
    fn choose_cpus(&self, want: u32, gpus: &[u32]) -> Result<Vec<u32>, String> {
        let Some(topology) = &self.topology else {
            return Ok(vec![]);
        };
        let reserved: BTreeSet<u32> = self
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flatten()
            .copied()
            .collect();
        let near: BTreeSet<u32> = gpus
            .iter()
            .filter_map(|i| self.executor.gpu(*i))
            .flat_map(|g| g.local_cpus.iter().copied())
            .collect();
        topology.choose(want, &reserved, &near).ok_or_else(|| {
            let all = topology.cpus();
            let free = all.difference(&reserved).count();
            format!(
                "not started: it holds {} and only {free} of this node's {} are free (running jobs \
                 hold the others)",
                gpuq_core::plural(want.into(), "CPU"),
                all.len()
            )
        })
    }

    fn sink(&self) -> EventSink {
        self.events
            .get()
            .cloned()
            .unwrap_or_else(|| std::sync::Arc::new(|_| {}))
    }
}

/// Reads an attempt's exit record, retrying while the daemon cannot open it
/// (short of descriptors, say): an attempt ends only once its record was looked
/// at, never as "died without recording" because of the daemon's own trouble.
fn load_record_patiently(dir: &JobDir, job: JobId, attempt: u32) -> Option<ExitRecord> {
    let mut pause = Duration::from_millis(100);
    loop {
        match ExitRecord::load(dir, attempt) {
            Ok(record) => return record,
            Err(e) => {
                tracing::warn!(
                    "job {job} attempt {attempt}: cannot read its exit record yet ({e}); retrying"
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

impl Backend for LocalBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn start(&self, events: EventSink) {
        let _ = self.events.set(events);
        self.sweep_orphans();
    }

    fn launch(&self, launch: Launch) -> Result<(), String> {
        let req = LaunchRequest {
            job: launch.job,
            attempt: launch.attempt,
            gpus: launch.first_node_gpus(),
            argv: &launch.argv,
            cwd: &launch.cwd,
            env: &launch.env,
            run_as: launch.run_as.as_ref(),
            share_gid: launch.share_gid,
            session: launch.spec.session.as_ref().map(|s| s.kind),
            container: launch
                .spec
                .image
                .as_ref()
                .map(|_| crate::container::container_name(launch.job, launch.attempt)),
        };
        let (job, attempt) = (launch.job, launch.attempt);
        let cpus = match self.choose_cpus(launch.resources.cpus, req.gpus) {
            Ok(cpus) => cpus,
            Err(why) => {
                // Never on CPUs other jobs hold: the attempt is given back, not
                // failed (not the job's fault), once the caller has recorded it.
                let sink = self.sink();
                std::thread::spawn(move || {
                    sink(AttemptEvent::Ended {
                        job,
                        attempt,
                        record: None,
                        outside: Some(crate::backend::OutsideEnd::Lost(why)),
                    })
                });
                return Ok(());
            }
        };
        let limits = AttemptLimits {
            cpus,
            memory_mib: launch.memory_limit_mib,
            holds_cpus: launch.resources.cpus > 0,
        };
        let mut cmd = self
            .executor
            .prepare_with(&req, &limits)
            .map_err(|e| e.to_string())?;
        let spawned = cmd.spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                if let Some(g) = self.executor.job_groups(job, attempt) {
                    let _ = g.remove();
                }
                return Err(e.to_string());
            }
        };
        // Only a job with cores of its own holds them (one with none asked
        // runs on what nobody holds).
        if limits.holds_cpus && !limits.cpus.is_empty() {
            self.hold(job, attempt, limits.cpus);
        }
        // The command holds the daemon's copy of the attempt's lock: let it go now.
        drop(cmd);
        let dir = self.executor.job_dir(job);
        let sink = self.sink();
        let reserved = self.reserved.clone();
        let waiter = std::thread::Builder::new()
            .name(format!("job-{job}"))
            .spawn(move || {
                let _ = child.wait();
                let record = load_record_patiently(&dir, job, attempt);
                release(&reserved, job, attempt);
                sink(AttemptEvent::Ended {
                    job,
                    attempt,
                    record,
                    outside: None,
                });
            });
        waiter.map(|_| ()).map_err(|e| {
            format!("cannot watch the attempt (the supervisor runs on; a restart adopts it): {e}")
        })
    }

    fn signal(&self, job: JobId, attempt: u32, signal: i32) -> bool {
        self.executor.signal(job, attempt, signal).unwrap_or(false)
    }

    fn reattach(&self, recorded: &Recorded) -> Reattached {
        let (job, attempt) = (recorded.job, recorded.attempt);
        let dir = self.executor.job_dir(job);
        // Probe the lock before reading the record: a supervisor that ends between
        // the two steps has written its record before releasing the lock, so this
        // order never mistakes a finished attempt for one that never ran.
        let alive = self.executor.supervisor_alive(job, attempt);
        let groups = self.executor.job_groups(job, attempt);
        if let Some(record) = ExitRecord::read(&dir, attempt) {
            return Reattached::Ended(Some(record));
        }
        if alive {
            if let Some(g) = groups.filter(|g| g.holds_cpus) {
                // What it held before the restart it holds still.
                self.hold(job, attempt, g.cpus);
            }
            self.adopt(job, attempt);
            return Reattached::Running;
        }
        if let Some(g) = groups {
            // Its supervisor died (with the machine, or killed): whatever of the
            // job is left must not hold its GPUs any longer. Killing usually
            // takes milliseconds; one stuck (a process in uninterruptible sleep)
            // is waited for on a thread, off the daemon's start.
            match g.kill_all(REATTACH_KILL_WITHIN) {
                Ok(()) => {
                    if let Err(e) = g.remove() {
                        tracing::warn!("job {job} attempt {attempt}: {e}");
                    }
                }
                Err(_) => {
                    let _ = std::thread::Builder::new()
                        .name(format!("end-{job}-{attempt}"))
                        .spawn(move || {
                            if let Err(e) = g
                                .kill_all(crate::cgroup::EMPTY_WITHIN)
                                .and_then(|()| g.remove())
                            {
                                tracing::warn!("job {job} attempt {attempt}: {e}");
                            }
                        });
                }
            }
        }
        if !recorded.rebooted && dir.pgid_file(attempt).exists() {
            // The job had started (its supervisor recorded the process group) and the
            // supervisor died without a record: a failure, not a silent rerun.
            return Reattached::Ended(None);
        }
        Reattached::Vanished(if recorded.rebooted {
            "node restarted".into()
        } else {
            "the daemon stopped before the attempt could start".into()
        })
    }

    fn status(&self, _job: JobId) -> Option<String> {
        None
    }
}

/// Gives back an ended attempt's CPUs.
fn release(reserved: &Reserved, job: JobId, attempt: u32) {
    reserved
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(job, attempt));
}

impl LocalBackend {
    fn hold(&self, job: JobId, attempt: u32, cpus: Vec<u32>) {
        self.reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((job, attempt), cpus);
    }

    /// At start: this daemon's job groups whose attempt no supervisor watches
    /// any longer (it died with the daemon's machine, or was killed) are
    /// emptied and removed, so no straggler keeps a GPU. Empty groups of other
    /// daemons (other homes, often long deleted) are removed too; one that
    /// holds a process, or was made a moment ago (another daemon's launch
    /// under way), is never touched.
    fn sweep_orphans(&self) {
        for (name, groups) in self.executor.confinement().existing() {
            let Some((job, attempt)) = self.executor.parse_group_name(&name) else {
                if groups.procs().is_empty() && groups.age().is_some_and(|a| a >= FOREIGN_GROUP_AGE)
                {
                    match groups.remove() {
                        Ok(()) => tracing::debug!("removed the empty cgroup {name}"),
                        Err(e) => tracing::debug!("cannot remove the empty cgroup {name}: {e}"),
                    }
                }
                continue;
            };
            if self.executor.supervisor_alive(job, attempt) {
                continue;
            }
            match groups.kill_all(crate::cgroup::EMPTY_WITHIN).and_then(|()| groups.remove()) {
                Ok(()) => tracing::info!("removed the cgroup of job {job} attempt {attempt}, which no supervisor watched"),
                Err(e) => tracing::warn!("job {job} attempt {attempt}: {e}"),
            }
        }
    }

    /// Watches an attempt whose supervisor is not our child.
    fn adopt(&self, job: JobId, attempt: u32) {
        let dir = self.executor.job_dir(job);
        let lock = dir.lock_file(attempt);
        let sink = self.sink();
        let reserved = self.reserved.clone();
        let _ = std::thread::Builder::new()
            .name(format!("job-{job}"))
            .spawn(move || loop {
                std::thread::sleep(ADOPTED_CHECK);
                if let Some(record) = ExitRecord::read(&dir, attempt) {
                    release(&reserved, job, attempt);
                    sink(AttemptEvent::Ended {
                        job,
                        attempt,
                        record: Some(record),
                        outside: None,
                    });
                    return;
                }
                if !crate::local::lock_held(&lock) {
                    // It may have written the record just before exiting.
                    let record = ExitRecord::read(&dir, attempt);
                    release(&reserved, job, attempt);
                    sink(AttemptEvent::Ended {
                        job,
                        attempt,
                        record,
                        outside: None,
                    });
                    return;
                }
            });
    }
}
