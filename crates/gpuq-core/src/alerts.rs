//! Detectors: telemetry and job outcomes in, alerts out, deduplicated with a
//! cool-down. Pure: the daemon feeds readings with `now` and delivers what comes out.

use crate::telemetry::GpuReading;
use crate::{JobId, Millis};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A job holds GPUs but has not used them for a while.
    JobIdle,
    GpuMemoryHigh,
    GpuTemperatureHigh,
    GpuXid,
    GpuLost,
    JobFailed,
    JobOom,
    /// A budget crossed an alert threshold.
    Budget,
    /// The node is idle: autostop's warning, and its action.
    NodeIdle,
    /// An interactive session is idle: the warning before its idle stop, and the stop.
    SessionIdle,
    /// A job's metrics went over a limit: the excess is dropped (said once per reason).
    MetricsDropped,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::JobIdle => "job_idle",
            AlertKind::GpuMemoryHigh => "gpu_memory_high",
            AlertKind::GpuTemperatureHigh => "gpu_temperature_high",
            AlertKind::GpuXid => "gpu_xid",
            AlertKind::GpuLost => "gpu_lost",
            AlertKind::JobFailed => "job_failed",
            AlertKind::JobOom => "job_oom",
            AlertKind::Budget => "budget",
            AlertKind::NodeIdle => "node_idle",
            AlertKind::SessionIdle => "session_idle",
            AlertKind::MetricsDropped => "metrics_dropped",
        }
    }

    pub const ALL: [AlertKind; 11] = [
        AlertKind::JobIdle,
        AlertKind::GpuMemoryHigh,
        AlertKind::GpuTemperatureHigh,
        AlertKind::GpuXid,
        AlertKind::GpuLost,
        AlertKind::JobFailed,
        AlertKind::JobOom,
        AlertKind::Budget,
        AlertKind::NodeIdle,
        AlertKind::SessionIdle,
        AlertKind::MetricsDropped,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// An alert as stored: `id` orders alerts and resumes an event stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Alert {
    pub id: i64,
    #[serde(flatten)]
    pub alert: NewAlert,
}

/// An alert as raised, before the store gives it an id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NewAlert {
    pub at: Millis,
    pub kind: AlertKind,
    pub job: Option<JobId>,
    pub user: Option<String>,
    pub gpu: Option<u32>,
    pub message: String,
}

/// Thresholds (`[alerts]` in gpuq.toml).
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// A job whose GPUs all stay at or under `idle_util_percent` this long is idle.
    pub idle_after_ms: Millis,
    pub idle_util_percent: f64,
    pub memory_percent: f64,
    pub temperature_c: u32,
    /// The same alert (kind, job, GPU) is not raised again within this time.
    pub cooldown_ms: Millis,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            idle_after_ms: 10 * 60_000,
            idle_util_percent: 1.0,
            memory_percent: 95.0,
            temperature_c: 85,
            cooldown_ms: 30 * 60_000,
        }
    }
}

/// A running job as the detectors see it.
#[derive(Debug, Clone)]
pub struct JobOnGpus<'a> {
    pub id: JobId,
    pub user: &'a str,
    pub gpus: &'a [u32],
    pub started_at: Millis,
}

#[derive(Debug, Default)]
pub struct Detectors {
    pub thresholds: Thresholds,
    /// Per running job: when one of its GPUs was last seen busy.
    busy_at: HashMap<JobId, Millis>,
    last_raised: HashMap<(AlertKind, Option<JobId>, Option<u32>), Millis>,
}

impl Detectors {
    pub fn new(thresholds: Thresholds) -> Self {
        Self {
            thresholds,
            ..Default::default()
        }
    }

    /// Looks at one round of readings; returns the alerts to raise.
    pub fn observe(
        &mut self,
        now: Millis,
        readings: &[GpuReading],
        jobs: &[JobOnGpus],
    ) -> Vec<NewAlert> {
        let t = self.thresholds.clone();
        let mut out = Vec::new();
        for r in readings {
            let gpu = Some(r.index);
            if r.lost {
                let msg = format!("GPU {} is lost (fallen off the bus): its jobs will fail; the node needs a reset", r.index);
                self.raise(&mut out, now, AlertKind::GpuLost, None, None, gpu, msg);
                continue;
            }
            for xid in &r.new_xids {
                let msg = format!("GPU {} reported XID error {xid}{}", r.index, xid_hint(*xid));
                self.raise(&mut out, now, AlertKind::GpuXid, None, None, gpu, msg);
            }
            if let Some(p) = r.memory_percent().filter(|p| *p > t.memory_percent) {
                let msg = format!(
                    "GPU {} memory at {p:.0}% ({} of {} MiB): the next allocation may fail with CUDA out of memory",
                    r.index,
                    r.memory_used_mib.unwrap_or(0),
                    r.memory_total_mib.unwrap_or(0)
                );
                self.raise(
                    &mut out,
                    now,
                    AlertKind::GpuMemoryHigh,
                    None,
                    None,
                    gpu,
                    msg,
                );
            }
            if let Some(c) = r.temperature_c.filter(|c| *c > t.temperature_c) {
                let msg = format!(
                    "GPU {} at {c} °C (limit {} °C): check cooling; the card will throttle",
                    r.index, t.temperature_c
                );
                self.raise(
                    &mut out,
                    now,
                    AlertKind::GpuTemperatureHigh,
                    None,
                    None,
                    gpu,
                    msg,
                );
            }
        }
        self.busy_at
            .retain(|id, _| jobs.iter().any(|j| j.id == *id));
        for job in jobs.iter().filter(|j| !j.gpus.is_empty()) {
            let utils: Vec<f64> = readings
                .iter()
                .filter(|r| job.gpus.contains(&r.index))
                .filter_map(|r| r.util_percent)
                .collect();
            let busy_at = self.busy_at.entry(job.id).or_insert(job.started_at);
            if utils.is_empty() || utils.iter().any(|u| *u > t.idle_util_percent) {
                *busy_at = now;
                continue;
            }
            let idle_ms = now - *busy_at;
            if idle_ms >= t.idle_after_ms {
                let n = job.gpus.len();
                let msg = format!(
                    "job {} ({}) holds {n} GPU{} at {:.0}% for {}: is it running on the CPU?",
                    job.id,
                    job.user,
                    if n == 1 { "" } else { "s" },
                    utils.iter().cloned().fold(0.0, f64::max),
                    minutes(idle_ms)
                );
                self.raise(
                    &mut out,
                    now,
                    AlertKind::JobIdle,
                    Some(job.id),
                    Some(job.user),
                    None,
                    msg,
                );
            }
        }
        out
    }

    /// A job's attempt ended in failure (`oom`: it ran out of memory, GPU
    /// memory by its log or its memory limit by its cgroup; `what` says which).
    pub fn job_failed(
        &mut self,
        now: Millis,
        job: JobId,
        user: &str,
        oom: bool,
        what: &str,
    ) -> Vec<NewAlert> {
        let mut out = Vec::new();
        let (kind, msg) = if oom {
            (
                AlertKind::JobOom,
                // `what` begins with which memory: "CUDA out of memory (…", "out of memory: the job's limit is …".
                format!("job {job} ({user}): {what}"),
            )
        } else {
            (
                AlertKind::JobFailed,
                format!("job {job} ({user}) failed: {what}"),
            )
        };
        self.raise(&mut out, now, kind, Some(job), Some(user), None, msg);
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn raise(
        &mut self,
        out: &mut Vec<NewAlert>,
        now: Millis,
        kind: AlertKind,
        job: Option<JobId>,
        user: Option<&str>,
        gpu: Option<u32>,
        message: String,
    ) {
        let key = (kind, job, gpu);
        if let Some(last) = self.last_raised.get(&key) {
            if now - last < self.thresholds.cooldown_ms {
                return;
            }
        }
        self.last_raised.insert(key, now);
        out.push(NewAlert {
            at: now,
            kind,
            job,
            user: user.map(str::to_string),
            gpu,
            message,
        });
    }
}

fn minutes(ms: Millis) -> String {
    if ms >= 60_000 {
        format!("{} min", ms / 60_000)
    } else {
        format!("{} s", ms / 1000)
    }
}

/// What the common XIDs mean (NVIDIA's XID catalogue), so the alert says what to do.
fn xid_hint(xid: u64) -> &'static str {
    match xid {
        13 | 31 | 43 => " (an application fault: usually a bug in the job, not the card)",
        48 | 63 | 64 | 94 | 95 => " (memory ECC error: the card may need a reset or replacement)",
        74 => " (NVLink error)",
        79 => " (GPU fell off the bus)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(index: u32, util: f64) -> GpuReading {
        GpuReading {
            index,
            util_percent: Some(util),
            memory_used_mib: Some(100),
            memory_total_mib: Some(1000),
            temperature_c: Some(50),
            ..Default::default()
        }
    }

    #[test]
    fn an_idle_job_is_flagged_once_per_cooldown() {
        let mut d = Detectors::new(Thresholds {
            idle_after_ms: 60_000,
            cooldown_ms: 600_000,
            ..Default::default()
        });
        let gpus = [0, 1];
        let job = [JobOnGpus {
            id: 42,
            user: "ana",
            gpus: &gpus,
            started_at: 0,
        }];
        let idle = [reading(0, 0.0), reading(1, 0.0)];
        assert!(
            d.observe(30_000, &idle, &job).is_empty(),
            "not idle long enough"
        );
        let alerts = d.observe(60_000, &idle, &job);
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].kind, AlertKind::JobIdle);
        assert_eq!(
            alerts[0].message,
            "job 42 (ana) holds 2 GPUs at 0% for 1 min: is it running on the CPU?"
        );
        assert!(d.observe(120_000, &idle, &job).is_empty(), "cool-down");
        // Busy again, then idle again after the cool-down: a new alert.
        assert!(d
            .observe(700_000, &[reading(0, 50.0), reading(1, 0.0)], &job)
            .is_empty());
        assert!(d.observe(730_000, &idle, &job).is_empty());
        assert_eq!(d.observe(761_000, &idle, &job).len(), 1);
    }

    #[test]
    fn card_problems_are_flagged() {
        let mut d = Detectors::default();
        let mut hot = reading(0, 90.0);
        hot.temperature_c = Some(91);
        hot.memory_used_mib = Some(990);
        hot.new_xids = vec![79];
        let mut lost = reading(1, 0.0);
        lost.lost = true;
        let alerts = d.observe(0, &[hot, lost], &[]);
        let kinds: Vec<_> = alerts.iter().map(|a| a.kind).collect();
        assert_eq!(
            kinds,
            [
                AlertKind::GpuXid,
                AlertKind::GpuMemoryHigh,
                AlertKind::GpuTemperatureHigh,
                AlertKind::GpuLost
            ]
        );
        assert!(alerts[0]
            .message
            .contains("XID error 79 (GPU fell off the bus)"));
        assert!(alerts[1].message.contains("99%"), "{}", alerts[1].message);
    }

    #[test]
    fn failures_are_flagged_with_their_cause() {
        let mut d = Detectors::default();
        let a = d.job_failed(5, 7, "bo", true, "exit 1");
        assert_eq!(a[0].kind, AlertKind::JobOom);
        assert_eq!(a[0].job, Some(7));
        assert_eq!(
            d.job_failed(6, 8, "bo", false, "exit 1")[0].kind,
            AlertKind::JobFailed
        );
    }
}
