//! What the sampler sees, kept for queries: the latest readings, each GPU's
//! bounded history, each running job's GPU figures, the detectors' state, and
//! the counters behind `/metrics`. Alerts raised here are committed to the
//! store, then delivered (log, webhooks) and streamed.

use super::{Inner, Service};
use gpuq_api::home::now_ms;
use gpuq_api::GpuHistory;
use gpuq_core::alerts::{Alert, Detectors, JobOnGpus, NewAlert, Thresholds};
use gpuq_core::telemetry::{GpuProcess, GpuReading, History, HistoryPoint, JobGpuUsage, Retention};
use gpuq_core::{Attempt, Job, JobId, Millis};
use gpuq_gpu::Sample;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Upper bounds (seconds) of the queue wait-time histogram's buckets.
pub const WAIT_BUCKETS: [f64; 10] = [
    1.0,
    5.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4.0 * 3600.0,
    12.0 * 3600.0,
    86400.0,
];

pub struct Monitor {
    readings: Vec<GpuReading>,
    processes: Vec<GpuProcess>,
    history: HashMap<u32, History>,
    retention: Retention,
    live: HashMap<JobId, LiveUsage>,
    detectors: Detectors,
    pub counters: Counters,
}

#[derive(Default, Clone)]
pub struct Counters {
    pub starts: u64,
    /// Cumulative counts per `WAIT_BUCKETS` bound, then the sum and count of waits (s).
    pub wait_buckets: [u64; WAIT_BUCKETS.len()],
    pub wait_sum_s: f64,
    pub wait_count: u64,
    pub alerts: HashMap<&'static str, u64>,
}

struct LiveUsage {
    attempt: u32,
    usage: JobGpuUsage,
    last_at: Millis,
}

/// A running job holding GPUs, as the sampler needs it.
#[derive(Debug, Clone)]
pub struct OnGpus {
    pub id: JobId,
    pub attempt: u32,
    pub user: Arc<str>,
    pub gpus: Vec<u32>,
    pub started_at: Millis,
    pub job_dir: PathBuf,
    /// `GPUQ_SIM_UTIL` / `GPUQ_SIM_MEMORY_MIB` from the job's spec (simulated GPUs only).
    pub sim_env: (Option<f64>, Option<u64>),
}

impl Monitor {
    pub fn new(thresholds: Thresholds, retention: Retention) -> Self {
        Self {
            readings: vec![],
            processes: vec![],
            history: HashMap::new(),
            retention,
            live: HashMap::new(),
            detectors: Detectors::new(thresholds),
            counters: Counters::default(),
        }
    }

    pub fn observe_start(&mut self, wait_ms: Millis) {
        let s = wait_ms.max(0) as f64 / 1000.0;
        self.counters.starts += 1;
        self.counters.wait_sum_s += s;
        self.counters.wait_count += 1;
        for (i, bound) in WAIT_BUCKETS.iter().enumerate() {
            if s <= *bound {
                self.counters.wait_buckets[i] += 1;
            }
        }
    }

    /// Folds one round of readings in; returns the alerts it raises.
    fn record(&mut self, now: Millis, sample: Sample, jobs: &[OnGpus]) -> Vec<NewAlert> {
        let previous: HashMap<u32, GpuReading> =
            self.readings.drain(..).map(|r| (r.index, r)).collect();
        for r in &sample.readings {
            self.history
                .entry(r.index)
                .or_insert_with(|| History::new(self.retention))
                .push(HistoryPoint::of(r));
        }
        self.live.retain(|id, _| jobs.iter().any(|j| j.id == *id));
        for job in jobs {
            let live = self.live.entry(job.id).or_insert_with(|| LiveUsage {
                attempt: job.attempt,
                usage: JobGpuUsage::default(),
                // The first reading stands for the time since the attempt started.
                last_at: job.started_at.min(now),
            });
            if live.attempt != job.attempt {
                *live = LiveUsage {
                    attempt: job.attempt,
                    usage: JobGpuUsage::default(),
                    last_at: job.started_at.min(now),
                };
            }
            let seconds = (now - live.last_at).max(0) as f64 / 1000.0;
            live.last_at = now;
            let gpus: Vec<&GpuReading> = sample
                .readings
                .iter()
                .filter(|r| job.gpus.contains(&r.index))
                .collect();
            let process_memory: Vec<u64> = sample
                .processes
                .iter()
                .filter(|p| p.job == Some(job.id))
                .filter_map(|p| p.memory_mib)
                .collect();
            let process_memory = (!process_memory.is_empty()).then(|| process_memory.iter().sum());
            // Energy from the cards' counters; power × time where a card has none.
            let energy: Option<f64> = gpus
                .iter()
                .map(
                    |r| match (r.energy_j, previous.get(&r.index).and_then(|p| p.energy_j)) {
                        (Some(now_j), Some(before)) if now_j >= before => Some(now_j - before),
                        _ => r.power_w.map(|w| w * seconds),
                    },
                )
                .sum();
            live.usage.observe(seconds, &gpus, process_memory, energy);
        }
        let on_gpus: Vec<JobOnGpus> = jobs
            .iter()
            .map(|j| JobOnGpus {
                id: j.id,
                user: &j.user,
                gpus: &j.gpus,
                started_at: j.started_at,
            })
            .collect();
        let alerts = self.detectors.observe(now, &sample.readings, &on_gpus);
        self.readings = sample.readings;
        self.processes = sample.processes;
        alerts
    }

    pub fn readings(&self) -> &[GpuReading] {
        &self.readings
    }

    pub fn processes(&self) -> &[GpuProcess] {
        &self.processes
    }

    pub fn history(&self, gpu: u32, since: Millis) -> Vec<HistoryPoint> {
        self.history
            .get(&gpu)
            .map(|h| h.since(since))
            .unwrap_or_default()
    }

    /// The figures of a running attempt so far.
    pub fn live_usage(&self, id: JobId, attempt: u32) -> Option<JobGpuUsage> {
        self.live
            .get(&id)
            .filter(|l| l.attempt == attempt)
            .map(|l| l.usage.clone())
    }
}

impl Service {
    /// Running jobs that hold GPUs, for the sampler.
    pub fn jobs_on_gpus(&self) -> Vec<OnGpus> {
        let inner = self.lock();
        inner
            .running
            .iter()
            .filter(|(_, r)| !r.local_gpus().is_empty())
            .map(|(id, r)| {
                let env = r.spec.as_ref().map(|s| &s.env);
                let var = |k: &str| env.and_then(|e| e.get(k)).map(|v| v.trim());
                OnGpus {
                    id: *id,
                    attempt: r.attempt,
                    user: r.user.clone(),
                    gpus: r.local_gpus().to_vec(),
                    started_at: r.started_at,
                    job_dir: self.job_dir(*id).root().to_path_buf(),
                    sim_env: (
                        var("GPUQ_SIM_UTIL").and_then(|v| v.parse().ok()),
                        var("GPUQ_SIM_MEMORY_MIB").and_then(|v| v.parse().ok()),
                    ),
                }
            })
            .collect()
    }

    /// One round from the sampler: keep it, and raise what the detectors find.
    pub fn record_sample(&self, now: Millis, sample: Sample, jobs: &[OnGpus]) {
        let alerts = self.monitor().record(now, sample, jobs);
        self.raise(alerts);
        self.notify_changed();
    }

    /// Commits alerts, then logs and delivers them.
    pub fn raise(&self, alerts: Vec<NewAlert>) {
        if alerts.is_empty() {
            return;
        }
        let stored = match self.lock().store.insert_alerts(&alerts) {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!("cannot record {} alert(s): {e}", alerts.len());
                alerts
                    .into_iter()
                    .map(|alert| Alert { id: 0, alert })
                    .collect()
            }
        };
        {
            let mut m = self.monitor();
            for a in &stored {
                *m.counters.alerts.entry(a.alert.kind.as_str()).or_default() += 1;
            }
        }
        for a in stored {
            tracing::warn!(kind = a.alert.kind.as_str(), "alert: {}", a.alert.message);
            if let Some(tx) = &self.alert_out {
                let _ = tx.send(a);
            }
        }
        self.notify_changed();
    }

    /// A job ended in failure: alert (CUDA OOM on any attempt, a failure only when final).
    pub(super) fn alert_failure(
        &self,
        id: JobId,
        user: &str,
        oom: bool,
        is_final: bool,
        what: &str,
    ) {
        if !(oom || is_final) {
            return;
        }
        let alerts = self
            .monitor()
            .detectors_job_failed(now_ms(), id, user, oom, what);
        self.raise(alerts);
    }

    /// Ends an attempt's live figures; returns them with its GPU-seconds.
    pub(super) fn take_usage(
        inner: &Inner,
        monitor: &mut Monitor,
        id: JobId,
        now: Millis,
    ) -> Option<JobGpuUsage> {
        let run = inner.running.get(&id)?;
        if run.placement.gpu_count() == 0 {
            return None;
        }
        let mut usage = monitor
            .live
            .remove(&id)
            .filter(|l| l.attempt == run.attempt)
            .map(|l| l.usage)
            .unwrap_or_default();
        usage.gpu_seconds =
            run.placement.gpu_count() as f64 * (now - run.started_at).max(0) as f64 / 1000.0;
        Some(usage)
    }

    pub fn monitor(&self) -> std::sync::MutexGuard<'_, Monitor> {
        self.monitor.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn alerts(&self, limit: u32) -> Result<Vec<Alert>, super::ServiceError> {
        Ok(self.lock().store.recent_alerts(limit)?)
    }

    /// A job's GPU figures: its ended attempts' plus the running attempt's so far.
    pub fn job_gpu_usage(&self, job: &Job, attempts: &[Attempt]) -> Option<JobGpuUsage> {
        let mut total: Option<JobGpuUsage> = None;
        for a in attempts {
            if let Some(u) = &a.gpu_usage {
                total.get_or_insert_with(Default::default).merge(u);
            }
        }
        if let Some(live) = self.running_attempt_usage(job, attempts) {
            total.get_or_insert_with(Default::default).merge(&live);
        }
        total
    }

    /// The running attempt's GPU figures so far (the store has an attempt's
    /// only once it ended); `None` when no attempt with GPUs runs.
    fn running_attempt_usage(&self, job: &Job, attempts: &[Attempt]) -> Option<JobGpuUsage> {
        let a = attempts
            .iter()
            .find(|a| a.attempt == job.attempt)
            .filter(|a| a.ended_at.is_none() && a.gpu_usage.is_none() && !a.gpus.is_empty())?;
        let mut live = self
            .monitor()
            .live_usage(job.id, a.attempt)
            .unwrap_or_default();
        live.gpu_seconds = a.gpus.len() as f64 * (now_ms() - a.started_at).max(0) as f64 / 1000.0;
        Some(live)
    }

    /// Fills the running attempt's figures so far, so that its row says what
    /// the job's totals already count.
    pub fn add_running_attempt_usage(&self, job: &Job, attempts: &mut [Attempt]) {
        if let Some(live) = self.running_attempt_usage(job, attempts) {
            if let Some(a) = attempts.iter_mut().find(|a| a.attempt == job.attempt) {
                a.gpu_usage = Some(live);
            }
        }
    }

    /// How many jobs are in each state (every state listed, zeros included).
    pub fn state_counts(&self) -> Vec<(&'static str, u64)> {
        let inner = self.lock();
        gpuq_core::JobState::ALL
            .iter()
            .map(|s| {
                let n = inner.states.values().filter(|v| *v == s).count() as u64;
                (s.as_str(), n)
            })
            .collect()
    }

    /// Each GPU's history since `since`.
    pub fn gpu_history(&self, since: Millis) -> Vec<GpuHistory> {
        let m = self.monitor();
        self.gpus
            .iter()
            .map(|g| GpuHistory {
                index: g.index,
                points: m.history(g.index, since),
            })
            .collect()
    }
}

impl Monitor {
    fn detectors_job_failed(
        &mut self,
        now: Millis,
        id: JobId,
        user: &str,
        oom: bool,
        what: &str,
    ) -> Vec<NewAlert> {
        self.detectors.job_failed(now, id, user, oom, what)
    }
}
