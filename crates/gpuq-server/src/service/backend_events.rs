//! What the backend reports about its attempts, applied to the service: the
//! backend's id for an attempt (committed for re-attach), a queued launch that
//! began to run (its clock, price and time limit start then), and ends, with
//! what the backend did on its own turned into the stop cause gpuq would have
//! given. Events are applied on the thread that reports them.

use super::stop::{Stop, StopCause, StopStep};
use super::Service;
use gpuq_api::home::now_ms;
use gpuq_core::{JobId, Millis};
use gpuq_exec::{AttemptEvent, ExitRecord, OutsideEnd};
use std::sync::{Arc, Weak};

impl Service {
    /// Hands the backend a sink that applies each event at once, on the thread
    /// that reports it (a waiter or poll thread of the backend), inside the
    /// runtime's context: no hop through a queue between an attempt's end and
    /// the next scheduling pass, and one thread's events stay in order.
    pub(super) fn connect_backend(self: &Arc<Self>) {
        let this: Weak<Self> = Arc::downgrade(self);
        let runtime = tokio::runtime::Handle::current();
        self.backend.start(Arc::new(move |event| {
            let Some(service) = this.upgrade() else {
                return;
            };
            let _context = runtime.enter();
            service.apply_backend_event(event);
        }));
    }

    fn apply_backend_event(self: &Arc<Self>, event: AttemptEvent) {
        match event {
            AttemptEvent::Accepted {
                job,
                attempt,
                backend_id,
            } => {
                if let Err(e) = self
                    .lock()
                    .store
                    .set_backend_id(job, attempt, backend_id, now_ms())
                {
                    tracing::error!("job {job}: cannot record its backend id {backend_id}: {e}");
                }
                self.notify_changed();
            }
            AttemptEvent::Started {
                job,
                attempt,
                at,
                place,
            } => self.began(job, attempt, at, &place),
            AttemptEvent::Ended {
                job,
                attempt,
                record,
                outside,
            } => self.backend_ended(job, attempt, record, outside),
            AttemptEvent::Changed => self.notify_changed(),
        }
    }

    /// A queued launch began to run: its clock (run time, cost, time limit) starts now.
    fn began(self: &Arc<Self>, id: JobId, attempt: u32, now: Millis, place: &str) {
        let limit = {
            let mut inner = self.lock();
            let Some(run) = inner.running.get_mut(&id).filter(|r| r.attempt == attempt) else {
                return;
            };
            run.started_at = now;
            run.began = true;
            let rate = self.pricing.rate(run.placement.gpu_count());
            run.rate = rate;
            if let Err(e) = inner
                .store
                .set_attempt_started(id, attempt, now, Some(place), rate)
            {
                tracing::error!("job {id}: cannot record its start: {e}");
            }
            let run = inner.running.get(&id).expect("checked above");
            run.spec
                .as_ref()
                .and_then(|s| s.time_limit.map(|t| (t, s.signal)))
        };
        if let Some((limit, early)) = limit {
            // gpuq runs the protocol at the limit as for any attempt; the backend's own
            // limit (Slurm's --time and --signal) is the backstop for a daemon that is down.
            self.arm_time_limit(
                id,
                attempt,
                limit.as_millis() as i64,
                limit.to_string(),
                early,
            );
        }
        self.notify_changed();
    }

    fn backend_ended(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        mut record: Option<ExitRecord>,
        outside: Option<OutsideEnd>,
    ) {
        let (began, stopping) = {
            let inner = self.lock();
            let Some(run) = inner.running.get(&id).filter(|r| r.attempt == attempt) else {
                return;
            };
            (run.began, run.stop.is_some())
        };
        if !began {
            // Ended while the backend held it in its queue: no run time, nothing to pay.
            let now = now_ms();
            let mut inner = self.lock();
            let _ = inner
                .store
                .set_attempt_started(id, attempt, now, None, None);
            if let Some(run) = inner.running.get_mut(&id) {
                run.started_at = now;
                run.rate = None;
            }
        }
        // gpuq's own stop keeps its cause; otherwise the backend's says what happened.
        if !stopping {
            match outside {
                Some(OutsideEnd::TimeLimit(limit)) => {
                    self.set_stop_cause(id, StopCause::TimeLimit { limit })
                }
                Some(OutsideEnd::Cancelled(by)) => {
                    self.set_stop_cause(id, StopCause::Cancel { by })
                }
                // Not the job's fault: it runs again.
                Some(OutsideEnd::Lost(why)) => {
                    tracing::info!("job {id} attempt {attempt}: {why}; it runs again");
                    if let Some(run) = self.lock().running.get_mut(&id) {
                        run.lost = Some(why);
                    }
                    record = Some(ExitRecord {
                        exit_code: Some(super::outcome::EXIT_REQUEUE),
                        signal: None,
                        spawn_error: None,
                        cannot_start: false,
                        ended_at_ms: now_ms(),
                        usage: None,
                    })
                }
                None => {}
            }
        }
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
}
