//! The local backend: each attempt runs on this machine under its own
//! supervisor (`gpuq __supervise`), which records the exit status on disk. A
//! thread per attempt waits for the supervisor and reports the end.

use crate::backend::{AttemptEvent, Backend, BackendInfo, EventSink, Launch, Reattached, Recorded};
use crate::{ExitRecord, JobDir, LaunchRequest, LocalExecutor};
use gpuq_core::{JobId, Node};
use std::sync::OnceLock;
use std::time::Duration;

/// How often an adopted attempt (not the daemon's child) is checked for its end.
const ADOPTED_CHECK: Duration = Duration::from_millis(100);

pub struct LocalBackend {
    executor: LocalExecutor,
    info: BackendInfo,
    events: OnceLock<EventSink>,
}

impl LocalBackend {
    /// A backend of one node: this machine.
    pub fn new(executor: LocalExecutor, node: Node, summary: String) -> Self {
        Self {
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
        let mut cmd = self.executor.prepare(&req).map_err(|e| e.to_string())?;
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        // The command holds the daemon's copy of the attempt's lock: let it go now.
        drop(cmd);
        let (job, attempt) = (launch.job, launch.attempt);
        let dir = self.executor.job_dir(job);
        let sink = self.sink();
        let waiter = std::thread::Builder::new()
            .name(format!("job-{job}"))
            .spawn(move || {
                let _ = child.wait();
                let record = load_record_patiently(&dir, job, attempt);
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
        if let Some(record) = ExitRecord::read(&dir, attempt) {
            return Reattached::Ended(Some(record));
        }
        if alive {
            self.adopt(job, attempt);
            return Reattached::Running;
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

impl LocalBackend {
    /// Watches an attempt whose supervisor is not our child.
    fn adopt(&self, job: JobId, attempt: u32) {
        let dir = self.executor.job_dir(job);
        let lock = dir.lock_file(attempt);
        let sink = self.sink();
        let _ = std::thread::Builder::new()
            .name(format!("job-{job}"))
            .spawn(move || loop {
                std::thread::sleep(ADOPTED_CHECK);
                if let Some(record) = ExitRecord::read(&dir, attempt) {
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
