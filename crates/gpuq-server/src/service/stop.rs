//! The stop protocol: (early signal) → SIGTERM to the job's process group →
//! the grace period → SIGKILL. The cause is committed before the first signal.

use super::Service;
use gpuq_api::home::now_ms;
use gpuq_core::{EarlySignal, JobId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Why an attempt is being stopped. Stored (as JSON) with the attempt, so a
/// restarted daemon finishes the stop with the right outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    Cancel {
        by: String,
    },
    TimeLimit {
        limit: String,
    },
    Preempt {
        for_job: JobId,
    },
    Requeue {
        by: String,
    },
    /// An interactive session left idle (`--idle-stop`): `why` says for how long and what was seen.
    Idle {
        why: String,
    },
}

/// The last step of the protocol carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    Requested,
    EarlySignal(&'static str),
    Term,
    Kill,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub cause: StopCause,
    pub step: StopStep,
}

impl StopCause {
    pub fn describe(&self) -> String {
        match self {
            StopCause::Cancel { by } => format!("cancel by {by}"),
            StopCause::TimeLimit { limit } => format!("time limit {limit} reached"),
            StopCause::Preempt { for_job } => format!("preemption for job {for_job}"),
            StopCause::Requeue { by } => format!("requeue by {by}"),
            StopCause::Idle { why } => format!("idle stop: {why}"),
        }
    }
}

impl Service {
    /// Starts the stop protocol for a running attempt (once; later calls are ignored).
    pub(super) fn stop(self: &Arc<Self>, id: JobId, cause: StopCause) {
        self.stop_attempt(id, None, cause)
    }

    /// As [`Service::stop`], but only if `attempt` (when given) is still the running one:
    /// a timer armed for one attempt must never stop the next.
    pub(super) fn stop_attempt(self: &Arc<Self>, id: JobId, only: Option<u32>, cause: StopCause) {
        let now = now_ms();
        let (attempt, grace, early) = {
            let mut inner = self.lock();
            let Some(run) = inner
                .running
                .get(&id)
                .filter(|r| only.is_none_or(|a| a == r.attempt))
            else {
                return;
            };
            if let Some(current) = &run.stop {
                // A cancel overrides a stop already under way (preemption, requeue): the
                // signals continue as they are, but the job ends cancelled, not requeued.
                let upgrade = matches!(cause, StopCause::Cancel { .. })
                    && !matches!(current.cause, StopCause::Cancel { .. });
                if upgrade {
                    let attempt = run.attempt;
                    let json = serde_json::to_string(&cause).expect("stop cause serializes");
                    if inner
                        .store
                        .set_stop(id, attempt, &json, &cause.describe(), now)
                        .is_ok()
                    {
                        if let Some(stop) = inner.running.get_mut(&id).and_then(|r| r.stop.as_mut())
                        {
                            stop.cause = cause;
                        }
                    }
                }
                return;
            }
            let attempt = run.attempt;
            let (grace, early) = (run.grace, run.early_signal);
            let json = serde_json::to_string(&cause).expect("stop cause serializes");
            if let Err(e) = inner
                .store
                .set_stop(id, attempt, &json, &cause.describe(), now)
            {
                tracing::error!("cannot record the stop of job {id}: {e}; not stopping it");
                return;
            }
            let early = early.filter(|_| matches!(cause, StopCause::Preempt { .. }));
            if let Some(run) = inner.running.get_mut(&id) {
                run.stop = Some(Stop {
                    cause,
                    step: StopStep::Requested,
                });
            }
            (attempt, grace, early)
        };
        self.notify_changed();
        self.wake_scheduler.notify_one();
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Some(sig) = early {
                if this
                    .signal_step(id, attempt, sig.number, StopStep::EarlySignal(sig.name()))
                    .await
                {
                    tokio::time::sleep(sig.lead.as_std().min(grace)).await;
                }
            }
            if !this
                .signal_step(id, attempt, libc::SIGTERM, StopStep::Term)
                .await
            {
                return;
            }
            tokio::time::sleep(grace).await;
            this.signal_step(id, attempt, libc::SIGKILL, StopStep::Kill)
                .await;
        });
    }

    /// Records the step, then signals the attempt's process group. False when the attempt is over.
    async fn signal_step(&self, id: JobId, attempt: u32, signal: i32, step: StopStep) -> bool {
        // The supervisor writes the process group id right after the spawn; a stop
        // decided in that instant waits for it, as long as the attempt runs.
        let mut pause = Duration::from_millis(20);
        loop {
            {
                let mut inner = self.lock();
                let Some(run) = inner.running.get_mut(&id).filter(|r| r.attempt == attempt) else {
                    return false;
                };
                if let Some(stop) = run.stop.as_mut() {
                    stop.step = step;
                }
            }
            if self.send_signal(id, attempt, signal) {
                return true;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Signals a running attempt through its backend. False: not yet.
    fn send_signal(&self, id: JobId, attempt: u32, signal: i32) -> bool {
        self.backend.signal(id, attempt, signal)
    }

    /// Arms the time limit (and its early signal) of a running attempt that has `remaining_ms` left.
    pub(super) fn arm_time_limit(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        remaining_ms: i64,
        limit_text: String,
        early: Option<EarlySignal>,
    ) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Some(sig) = early {
                let before = remaining_ms - sig.lead.as_millis() as i64;
                if before > 0 {
                    tokio::time::sleep(Duration::from_millis(before as u64)).await;
                }
                if !this.is_running(id, attempt) {
                    return;
                }
                let detail = format!("SIG{} sent {} before the time limit", sig.name(), sig.lead);
                let _ = this
                    .lock()
                    .store
                    .record_event(id, "early_signal", &detail, now_ms());
                this.send_signal(id, attempt, sig.number);
                tokio::time::sleep(Duration::from_millis(
                    remaining_ms.min(sig.lead.as_millis() as i64).max(0) as u64,
                ))
                .await;
            } else if remaining_ms > 0 {
                tokio::time::sleep(Duration::from_millis(remaining_ms as u64)).await;
            }
            this.stop_attempt(
                id,
                Some(attempt),
                StopCause::TimeLimit { limit: limit_text },
            );
        });
    }
}
