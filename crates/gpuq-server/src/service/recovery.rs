//! Start-up recovery: what a previous daemon left running.
//!
//! For each attempt the store records as running:
//! - its supervisor wrote an exit record: the attempt ended while no daemon ran;
//!   record its real status;
//! - its supervisor still holds the attempt's lock: the job is running; adopt it
//!   (watch for the exit record, re-arm its time limit, finish a pending stop);
//! - neither: the supervisor is gone without a record. After a reboot (the boot
//!   id changed) the job is requeued with cause `node restarted`; otherwise the
//!   daemon died between committing the start and the spawn, and the attempt
//!   never ran: it is requeued. A cancel that was pending ends it as cancelled.

use super::stop::{Stop, StopCause, StopStep};
use super::{RunningAttempt, Service};
use gpuq_api::home::now_ms;
use gpuq_core::{JobId, JobState, NodeGpus, Placement};
use gpuq_exec::{Reattached, Recorded};
use gpuq_store::{AttemptEnd, StoreError};
use std::sync::Arc;

/// This boot of the machine: `GPUQ_BOOT_ID` (for containers and tests), else the kernel's boot id.
pub fn current_boot_id() -> String {
    std::env::var("GPUQ_BOOT_ID")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Service {
    pub fn recover(self: &Arc<Self>) -> Result<(), StoreError> {
        let boot_id = current_boot_id();
        let running = {
            let mut inner = self.lock();
            let previous = inner.store.meta("boot_id")?;
            inner.store.set_meta("boot_id", &boot_id)?;
            let rebooted = previous.is_some_and(|p| p != boot_id);
            if rebooted {
                tracing::info!("the machine restarted since the last daemon ran");
            }
            let jobs = inner.store.list(&gpuq_store::ListFilter {
                states: vec![JobState::Running],
                ..Default::default()
            })?;
            let mut out = Vec::new();
            for job in jobs {
                let stop = inner
                    .store
                    .stop_of(job.id, job.attempt)?
                    .and_then(|s| serde_json::from_str::<StopCause>(&s).ok())
                    .map(|cause| Stop {
                        cause,
                        step: StopStep::Term,
                    });
                let placement = self.recorded_placement(&job);
                let recorded_attempt = inner
                    .store
                    .attempts(job.id)
                    .ok()
                    .and_then(|all| all.into_iter().find(|a| a.attempt == job.attempt));
                let backend_id = recorded_attempt.as_ref().and_then(|a| a.slurm_job_id);
                inner.running.insert(
                    job.id,
                    // `began` is corrected below from the events, for a backend that queues launches.
                    RunningAttempt {
                        rate: recorded_attempt.and_then(|a| a.rate_per_hour),
                        group: super::arrays::group_of(&job),
                        ..RunningAttempt::new(
                            job.attempt,
                            Arc::from(job.user.as_str()),
                            job.project.as_deref().map(Arc::from),
                            job.started_at,
                            placement,
                            Some(&job.spec),
                            job.failures,
                        )
                    },
                );
                out.push((job, stop, rebooted, backend_id));
            }
            out
        };
        for (job, stop, rebooted, backend_id) in running {
            let (id, attempt) = (job.id, job.attempt);
            let began = !self.backend.info().queues_launches || self.began_before(id, attempt);
            if let Some(run) = self.lock().running.get_mut(&id) {
                run.began = began;
            }
            let recorded = Recorded {
                job: id,
                attempt,
                backend_id,
                rebooted,
                began,
            };
            match self.backend.reattach(&recorded) {
                Reattached::Ended(record) => {
                    self.set_stop_state(id, stop);
                    match &record {
                        Some(r) => tracing::info!(
                            "job {id} attempt {attempt} ended while no daemon ran: {}",
                            r.describe()
                        ),
                        None => tracing::warn!(
                            "job {id} attempt {attempt}: its supervisor died while the job ran"
                        ),
                    }
                    self.attempt_ended(id, attempt, record);
                }
                Reattached::Running => {
                    tracing::info!("job {id} attempt {attempt} is still running: adopted");
                    match stop {
                        // The stop was under way: carry it out again from SIGTERM.
                        Some(stop) => self.stop(id, stop.cause),
                        None if began => {
                            if let (Some(limit), Some(started)) =
                                (job.spec.time_limit, job.started_at)
                            {
                                let remaining = started + limit.as_millis() as i64 - now_ms();
                                self.arm_time_limit(
                                    id,
                                    attempt,
                                    remaining,
                                    limit.to_string(),
                                    job.spec.signal,
                                );
                            }
                        }
                        None => {}
                    }
                }
                Reattached::NeverLaunched => {
                    self.set_stop_state(id, stop.clone());
                    tracing::info!(
                        "job {id} attempt {attempt}: the backend never got it; launching"
                    );
                    let info = self
                        .with_store(|s| s.launch_info(id))
                        .map_err(|e| e.to_string());
                    let placement = self
                        .lock()
                        .running
                        .get(&id)
                        .map(|r| r.placement.clone())
                        .unwrap_or_else(|| self.recorded_placement(&job));
                    self.launch(id, attempt, placement, &job.user, info);
                    if let Some(stop) = stop {
                        self.stop(id, stop.cause);
                    }
                }
                Reattached::Vanished(cause) => {
                    self.end_vanished_attempt(id, attempt, stop, &cause)?
                }
            }
        }
        self.wake_scheduler.notify_one();
        Ok(())
    }

    fn set_stop_state(&self, id: JobId, stop: Option<Stop>) {
        if let Some(run) = self.lock().running.get_mut(&id) {
            run.stop = stop;
        }
    }

    /// Where the store says a running attempt was placed: its nodes' names and
    /// all its GPUs in rank order, split evenly. A name the backend no longer
    /// describes (Slurm's own node list, once it started the job) counts as the
    /// first node.
    fn recorded_placement(&self, job: &gpuq_core::Job) -> Placement {
        let names: Vec<&str> = job.node.as_deref().unwrap_or("").split(',').collect();
        let indices: Option<Vec<usize>> = names
            .iter()
            .map(|n| self.nodes.iter().position(|x| x.name == *n))
            .collect();
        match indices {
            Some(idx) if idx.len() > 1 && job.gpus.len().is_multiple_of(idx.len()) => {
                let per = job.gpus.len() / idx.len();
                Placement(
                    idx.iter()
                        .enumerate()
                        .map(|(rank, &node)| NodeGpus {
                            node,
                            gpus: job.gpus[rank * per..(rank + 1) * per].to_vec(),
                        })
                        .collect(),
                )
            }
            Some(idx) if idx.len() == 1 => Placement::single(idx[0], job.gpus.clone()),
            _ => Placement::single(0, job.gpus.clone()),
        }
    }

    /// Whether a queued launch had begun to run before the restart (its start event).
    fn began_before(&self, id: JobId, attempt: u32) -> bool {
        self.with_store(|s| s.events(id))
            .map(|ev| {
                ev.iter().any(|e| {
                    e.kind == "running" && e.detail.starts_with(&format!("attempt {attempt} "))
                })
            })
            .unwrap_or(false)
    }

    /// An attempt without a supervisor or an exit record: requeue it (or finish a pending cancel).
    fn end_vanished_attempt(
        &self,
        id: JobId,
        attempt: u32,
        stop: Option<Stop>,
        cause: &str,
    ) -> Result<(), StoreError> {
        // What the attempt logged before it vanished is still in its metrics file.
        if let Ok(job) = self.job(id) {
            self.ingest_metrics_file(id, &job.user, true);
        }
        let now = now_ms();
        let mut inner = self.lock();
        let Some(job) = inner.store.job(id)? else {
            return Ok(());
        };
        let (next_state, reason, event) = match stop.map(|s| s.cause) {
            Some(StopCause::Cancel { by }) => (
                JobState::Cancelled,
                format!("cancelled by {by}; {cause}"),
                "cancelled",
            ),
            Some(StopCause::Idle { why }) => (
                JobState::Cancelled,
                format!("stopped idle: {why}; {cause}"),
                "cancelled",
            ),
            _ => (JobState::Queued, format!("requeued: {cause}"), "requeued"),
        };
        let end = AttemptEnd {
            job: id,
            attempt,
            exit_code: None,
            signal: None,
            next_state,
            reason,
            failures: job.failures,
            eligible_at: None,
            event: event.into(),
            gpu_usage: None,
            host_usage: None,
            held_by: None,
        };
        inner.store.finish_attempt(&end, now)?;
        inner.running.remove(&id);
        inner.states.insert(id, next_state);
        if next_state == JobState::Queued {
            if let Some(job) = inner.store.job(id)? {
                self.enqueue(&mut inner, &job);
            }
        }
        tracing::info!("job {id} attempt {attempt}: {}", end.reason);
        Ok(())
    }
}
