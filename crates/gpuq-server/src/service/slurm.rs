//! The Slurm backend's side of the service: an admitted attempt is submitted
//! with `sbatch`, every running attempt is tracked by one batched query per
//! poll interval, and the stop protocol goes through `scancel`. A gpuq job in
//! state `running` is handed to Slurm; while Slurm keeps it PENDING its reason
//! shows in `gpuq ls`, `show` and `explain`, and its run time and cost start
//! only when Slurm starts it.

use super::stop::{Stop, StopCause, StopStep};
use super::Service;
use gpuq_api::home::now_ms;
use gpuq_core::JobId;
use gpuq_exec::slurm::{SlurmStatus, SlurmSubmit};
use gpuq_exec::{ExitRecord, LaunchRequest};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Polls without news before an attempt Slurm no longer knows is given up.
const MISSING_POLLS: u32 = 15;

/// What the service remembers of each Slurm attempt between polls.
#[derive(Debug, Clone, Default)]
pub struct Tracked {
    pub status: Option<SlurmStatus>,
    pub running_seen: bool,
    pub missing: u32,
}

impl Service {
    pub(super) fn slurm_states(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Tracked>> {
        self.slurm_tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits an attempt to Slurm (off the async workers: sbatch blocks).
    pub(super) fn launch_slurm(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        user: &str,
        info: gpuq_store::LaunchInfo,
    ) {
        let this = Arc::clone(self);
        let user = user.to_string();
        tokio::task::spawn_blocking(move || {
            let result = this.submit_to_slurm(id, attempt, &user, &info);
            match result {
                Ok(slurm_id) => {
                    if let Some(run) = this
                        .lock()
                        .running
                        .get_mut(&id)
                        .filter(|r| r.attempt == attempt)
                    {
                        run.slurm_id = Some(slurm_id);
                    }
                    this.slurm_states().insert(id, Tracked::default());
                    if let Err(e) = this
                        .lock()
                        .store
                        .set_slurm_job(id, attempt, slurm_id, now_ms())
                    {
                        tracing::error!("job {id}: cannot record Slurm job {slurm_id}: {e}");
                    }
                    tracing::info!(
                        "job {id} attempt {attempt} submitted to Slurm as job {slurm_id}"
                    );
                    this.notify_changed();
                }
                Err(why) => {
                    tracing::warn!(
                        "job {id} attempt {attempt} could not be submitted to Slurm: {why}"
                    );
                    this.attempt_ended(id, attempt, Some(ExitRecord::spawn_failed(why, now_ms())));
                }
            }
        });
    }

    fn submit_to_slurm(
        &self,
        id: JobId,
        attempt: u32,
        user: &str,
        info: &gpuq_store::LaunchInfo,
    ) -> Result<u64, String> {
        let slurm = self.slurm.as_ref().ok_or("no Slurm backend")?;
        let run_as = self.run_as(user)?;
        let req = LaunchRequest {
            job: id,
            attempt,
            gpus: &[],
            argv: &info.argv,
            cwd: &info.cwd,
            env: &info.env,
            run_as: run_as.as_ref(),
            share_gid: self.share_gid(&info.spec)?,
        };
        self.executor
            .prepare_files(&req)
            .map_err(|e| e.to_string())?;
        let mut env = self.executor.job_env(&req);
        // Slurm sets the GPUs a job sees.
        env.remove("CUDA_VISIBLE_DEVICES");
        let spec = &info.spec;
        let grace = spec
            .grace
            .map(|g| g.as_millis())
            .unwrap_or(super::DEFAULT_GRACE.as_millis() as u64);
        let early = spec
            .signal
            .map(|s| (s.name().to_string(), s.lead.as_millis() / 1000));
        let submit = SlurmSubmit {
            job: id,
            attempt,
            name: spec.name.as_deref(),
            nodes: spec.nodes.unwrap_or(1),
            gpus_per_node: spec.gpus,
            argv: &info.argv,
            cwd: &info.cwd,
            env: &env,
            // gpuq runs the stop protocol at the limit itself; Slurm's limit (and its
            // early signal, relative to it) is the backstop.
            time_minutes: spec
                .time_limit
                .map(|t| (t.as_millis() + grace) / 60_000 + 2),
            early_signal: early.as_ref().map(|(s, l)| (s.as_str(), *l)),
            preemptible: spec.preemptible,
            user: run_as.as_ref().map(|a| a.name.as_str()),
        };
        slurm.submit(&submit).map_err(|e| e.to_string())
    }

    /// Tracks every Slurm attempt: one query per interval for all of them.
    pub async fn slurm_poll_loop(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let this = self.clone();
            let _ = tokio::task::spawn_blocking(move || this.slurm_poll()).await;
        }
    }

    fn slurm_poll(self: &Arc<Self>) {
        let Some(slurm) = self.slurm.as_ref() else {
            return;
        };
        let watched: Vec<(JobId, u32, u64)> = self
            .lock()
            .running
            .iter()
            .filter_map(|(id, r)| Some((*id, r.attempt, r.slurm_id?)))
            .collect();
        if watched.is_empty() {
            return;
        }
        let ids: Vec<u64> = watched.iter().map(|w| w.2).collect();
        let statuses = match slurm.query(&ids) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot query Slurm: {e}");
                return;
            }
        };
        let now = now_ms();
        for (id, attempt, slurm_id) in watched {
            let status = statuses.get(&slurm_id).cloned();
            let mut start = None;
            let mut ended = None;
            {
                let mut tracked = self.slurm_states();
                let t = tracked.entry(id).or_default();
                match &status {
                    None => {
                        t.missing += 1;
                        if t.missing >= MISSING_POLLS {
                            ended = Some(None);
                        }
                    }
                    Some(s) => {
                        t.missing = 0;
                        if s.is_running() && !t.running_seen {
                            t.running_seen = true;
                            start = Some(s.nodes.clone().unwrap_or_else(|| "slurm".into()));
                        } else if !s.is_pending() && !s.is_running() {
                            ended = Some(Some(s.clone()));
                        }
                        t.status = Some(s.clone());
                    }
                }
            }
            if let Some(nodes) = start {
                self.slurm_started(id, attempt, &nodes, now);
            }
            if let Some(end) = ended {
                self.slurm_ended(id, attempt, slurm_id, end);
            }
        }
        self.notify_changed();
    }

    /// Slurm started the attempt: its clock (run time, cost, time limit) starts now.
    fn slurm_started(self: &Arc<Self>, id: JobId, attempt: u32, nodes: &str, now: i64) {
        let limit = {
            let mut inner = self.lock();
            let Some(run) = inner.running.get_mut(&id).filter(|r| r.attempt == attempt) else {
                return;
            };
            run.started_at = now;
            let rate = self.pricing.rate(run.gpus.len() as u32);
            run.rate = rate;
            if let Err(e) = inner
                .store
                .set_attempt_started(id, attempt, now, Some(nodes), rate)
            {
                tracing::error!("job {id}: cannot record its start in Slurm: {e}");
            }
            let run = inner.running.get(&id).expect("checked above");
            run.spec
                .as_ref()
                .and_then(|s| s.time_limit.map(|t| (t, s.signal)))
        };
        if let Some((limit, early)) = limit {
            // gpuq runs the protocol at the limit as on the local backend (Slurm's
            // --time is whole minutes); Slurm's --time and --signal are the backstop
            // for a daemon that is down.
            self.arm_time_limit(
                id,
                attempt,
                limit.as_millis() as i64,
                limit.to_string(),
                early,
            );
        }
    }

    /// The attempt left Slurm: its status from the batch script's record, else
    /// from sacct; what Slurm did on its own (time limit, node failure, an
    /// outside scancel) becomes the stop cause gpuq would have given it.
    fn slurm_ended(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        slurm_id: u64,
        status: Option<SlurmStatus>,
    ) {
        let ran = self
            .slurm_states()
            .remove(&id)
            .is_some_and(|t| t.running_seen);
        if !ran {
            // Ended while Slurm held it: no run time, nothing to pay.
            let _ = self
                .lock()
                .store
                .set_attempt_started(id, attempt, now_ms(), None, None);
            if let Some(run) = self.lock().running.get_mut(&id) {
                run.started_at = now_ms();
            }
        }
        let slurm = self.slurm.as_ref().expect("slurm backend");
        let now = now_ms();
        let state = status
            .as_ref()
            .map(|s| s.state.as_str())
            .unwrap_or("UNKNOWN");
        let mut record = slurm.exit_record(id, attempt).or_else(|| {
            status
                .as_ref()
                .and_then(|s| s.exit)
                .map(|(code, sig)| ExitRecord {
                    exit_code: (sig == 0).then_some(code),
                    signal: (sig != 0).then_some(sig),
                    spawn_error: None,
                    ended_at_ms: now,
                })
        });
        let stopping = self
            .lock()
            .running
            .get(&id)
            .is_some_and(|r| r.stop.is_some());
        if !stopping {
            match state {
                "TIMEOUT" | "DEADLINE" => self.set_stop_cause(
                    id,
                    StopCause::TimeLimit {
                        limit: "Slurm's time limit".into(),
                    },
                ),
                "CANCELLED" => self.set_stop_cause(
                    id,
                    StopCause::Cancel {
                        by: format!("Slurm (scancel {slurm_id} outside gpuq)"),
                    },
                ),
                // The node or Slurm lost the job: not the job's fault; run it again.
                "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" => {
                    record = Some(ExitRecord {
                        exit_code: Some(super::outcome::EXIT_REQUEUE),
                        signal: None,
                        spawn_error: None,
                        ended_at_ms: now,
                    })
                }
                _ => {}
            }
        }
        tracing::info!("job {id} attempt {attempt}: Slurm job {slurm_id} ended ({state})");
        self.attempt_ended(id, attempt, record);
    }

    fn set_stop_cause(&self, id: JobId, cause: StopCause) {
        if let Some(run) = self.lock().running.get_mut(&id) {
            run.stop = Some(Stop {
                cause,
                step: StopStep::Term,
            });
        }
    }

    /// One step of the stop protocol through Slurm. A job Slurm has not started
    /// cannot take a signal: it is cancelled outright.
    pub(super) fn slurm_signal(&self, id: JobId, slurm_id: u64, signal: i32) -> bool {
        let Some(slurm) = self.slurm.as_ref() else {
            return false;
        };
        let running = self.slurm_states().get(&id).is_some_and(|t| t.running_seen);
        let result = if signal == libc::SIGKILL || !running {
            slurm.cancel(slurm_id, None)
        } else {
            slurm.signal(
                slurm_id,
                gpuq_exec::supervisor::signal_name(signal).trim_start_matches("SIG"),
                None,
            )
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("job {id}: scancel of Slurm job {slurm_id} failed: {e}");
                false
            }
        }
    }

    /// After a daemon restart: re-attach to the attempt's Slurm job by its id (or
    /// by its name, if the daemon stopped before recording the id); submit it if
    /// Slurm never got it. Nothing is lost or submitted twice.
    pub(super) fn slurm_reattach(self: &Arc<Self>, id: JobId, attempt: u32, recorded: Option<u64>) {
        let slurm = self.slurm.as_ref().expect("slurm backend");
        let found = recorded.or_else(|| slurm.find(id, attempt).ok().flatten());
        match found {
            Some(slurm_id) => {
                if recorded.is_none() {
                    let _ = self
                        .lock()
                        .store
                        .set_slurm_job(id, attempt, slurm_id, now_ms());
                }
                if let Some(run) = self.lock().running.get_mut(&id) {
                    run.slurm_id = Some(slurm_id);
                }
                // A job already started keeps its recorded start: the poll marks it seen.
                let started = self
                    .with_store(|s| s.events(id))
                    .map(|ev| {
                        ev.iter().any(|e| {
                            e.kind == "running"
                                && e.detail.starts_with(&format!("attempt {attempt} "))
                        })
                    })
                    .unwrap_or(false);
                self.slurm_states().insert(
                    id,
                    Tracked {
                        running_seen: started,
                        ..Default::default()
                    },
                );
                tracing::info!("job {id} attempt {attempt}: re-attached to Slurm job {slurm_id}");
            }
            None => {
                let info = self.with_store(|s| s.launch_info(id));
                let user = self
                    .lock()
                    .running
                    .get(&id)
                    .map(|r| r.user.to_string())
                    .unwrap_or_default();
                match info {
                    Ok(info) => {
                        tracing::info!(
                            "job {id} attempt {attempt}: Slurm never got it; submitting"
                        );
                        self.launch_slurm(id, attempt, &user, info);
                    }
                    Err(e) => tracing::error!("job {id}: cannot resubmit to Slurm: {e}"),
                }
            }
        }
    }

    /// Slurm's view of a job handed to it, for `ls`, `show` and `explain`.
    /// Whether Slurm has started the attempt (always true on the local backend).
    pub(super) fn started_in_backend(&self, id: JobId) -> bool {
        self.slurm.is_none() || self.slurm_states().get(&id).is_some_and(|t| t.running_seen)
    }

    pub fn slurm_reason(&self, id: JobId) -> Option<String> {
        let tracked = self.slurm_states();
        let t = tracked.get(&id)?;
        let s = t.status.as_ref()?;
        Some(match (&s.reason, s.is_pending()) {
            (Some(r), true) => format!("waiting in Slurm: {} ({r})", s.state),
            _ => format!(
                "Slurm: {}{}",
                s.state,
                s.nodes
                    .as_ref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default()
            ),
        })
    }
}
