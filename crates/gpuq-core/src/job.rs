//! A job as the store keeps it and the API shows it.

use crate::{JobId, JobSpec, JobState, Millis, Priority};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A job: its spec, where it runs, how it ended. Field names are a stable contract
/// (`gpuq ls --json`, `gpuq show --json`, the HTTP API).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Job {
    pub id: JobId,
    pub name: Option<String>,
    pub user: String,
    pub project: Option<String>,
    pub state: JobState,
    pub priority: Priority,
    /// GPUs asked for.
    pub gpus_requested: u32,
    /// GPU indices of the current (or last) attempt; empty while queued.
    pub gpus: Vec<u32>,
    pub node: Option<String>,
    /// The command as one line.
    pub command: String,
    pub cwd: String,
    /// Number of the current (or last) attempt; 0 before the first start.
    pub attempt: u32,
    /// Failed attempts counted against `retries` (requeues and preemptions do not count).
    pub failures: u32,
    /// Who holds the job back (`gpuq hold`), if anyone.
    pub held_by: Option<String>,
    /// A retry waits until this time (epoch ms).
    pub eligible_at: Option<Millis>,
    pub exit_code: Option<i32>,
    /// Signal that killed the last attempt, if any.
    pub signal: Option<i32>,
    /// Why the job is in its state, in words ("exit 1", "dependency job 4 failed", …).
    pub reason: Option<String>,
    /// Epoch milliseconds.
    pub submitted_at: Millis,
    /// Start of the current (or last) attempt; none while queued (earlier
    /// attempts keep theirs in `attempts`).
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// The spec as submitted (flags or YAML).
    pub spec: JobSpec,
    /// What the job's attempts cost (the running one up to now); absent when its
    /// node has no price (never shown as $0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::Micros>,
    /// The array this job is a task of (the array's id, its first task's id); null for a plain job.
    #[serde(default)]
    pub array_id: Option<JobId>,
    /// Its index in the array (`GPUQ_ARRAY_INDEX`); null for a plain job.
    #[serde(default)]
    pub array_index: Option<u32>,
    /// The most tasks of its array that run at once (`%N`), if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_limit: Option<u32>,
    /// A running job's memory and CPU so far, read from its cgroup when asked
    /// (absent when it is not running or runs unconfined; an ended attempt's
    /// figures are in its `attempts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_usage: Option<HostUsage>,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Attempt {
    pub job_id: JobId,
    pub attempt: u32,
    pub node: String,
    pub gpus: Vec<u32>,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    /// GPU figures of the attempt (after it ended, when telemetry saw it run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_usage: Option<crate::telemetry::JobGpuUsage>,
    /// Its price per hour (all its GPUs) on its node when it started; absent: no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_hour: Option<crate::cost::Micros>,
    /// The Slurm job that ran this attempt (Slurm backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<u64>,
    /// Memory and CPU as the attempt's cgroup counted them (after it ended,
    /// when it ran confined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_usage: Option<HostUsage>,
}

/// What an attempt's cgroup counted: memory (peak and limit), CPU time, and
/// whether the kernel killed a process of the job at its memory limit. Every
/// figure is null when unknown (a controller the host does not give), never 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostUsage {
    /// The kernel's OOM killer acted inside the job's memory limit.
    #[serde(default)]
    pub oom_killed: bool,
    /// Highest memory use of all the job's processes together, in bytes.
    #[serde(default)]
    pub memory_peak_bytes: Option<u64>,
    /// Its memory limit, in bytes; null: no limit of its own.
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
    /// CPU time (user + system) of all its processes, in seconds.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// Cores it was given; null: none reserved (it shared the unreserved cores).
    #[serde(default)]
    pub cpus: Option<u32>,
}

/// One row of a job's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    pub seq: i64,
    pub at: Millis,
    pub job_id: JobId,
    pub kind: String,
    pub detail: String,
}

impl Job {
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// How the command line names it: `12.3` for task 3 of array 12, else its id.
    pub fn reference(&self) -> crate::JobRef {
        match (self.array_id, self.array_index) {
            (Some(array), Some(index)) => crate::JobRef::Task { array, index },
            _ => crate::JobRef::Job(self.id),
        }
    }

    /// The first task of an array: its id is the array's.
    pub fn is_array_head(&self) -> bool {
        self.array_id == Some(self.id)
    }
}
