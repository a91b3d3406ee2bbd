//! The gpuq HTTP/JSON API: the types both sides exchange, and the client used by
//! the CLI. The server is `gpuq-server`; the OpenAPI document is
//! `docs/openapi.json`.

pub mod arrays;
mod client;
pub mod envs;
pub mod home;
pub mod openapi;
pub mod profile;
pub mod repro;
pub mod sessions;
pub mod spec_file;
pub mod sweep;
pub mod tracking;
pub mod web;

pub use client::{ApiError, Client, LogChunk};
/// A shell's terminal stream (`Client::attach`).
pub use reqwest::Upgraded as TerminalStream;

pub use gpuq_core::advice::{Advice, AdviceOption};
use gpuq_core::alerts::Alert;
use gpuq_core::cost::Micros;
use gpuq_core::telemetry::{GpuProcess, GpuReading, HistoryPoint, JobGpuUsage};
use gpuq_core::{Attempt, Event, Job, JobId, JobSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Header carrying the next byte offset of a log read.
pub const HEADER_LOG_OFFSET: &str = "x-gpuq-log-offset";
/// Header set to `true` when the attempt ended and everything was read.
pub const HEADER_LOG_COMPLETE: &str = "x-gpuq-log-complete";
/// Header naming the attempt a log read returned.
pub const HEADER_LOG_ATTEMPT: &str = "x-gpuq-log-attempt";

/// `POST /v1/jobs`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SubmitRequest {
    pub spec: JobSpec,
    /// The submitter's working directory, used unless the spec sets `cwd`.
    pub cwd: String,
    /// The submitter's environment at submit time; the spec's `env` overrides it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Who submits (a local daemon trusts its single user's client).
    pub user: String,
    /// Repeating a submit with the same key returns the first job: safe retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The code and interpreter the job is submitted from (`gpuq show --repro`);
    /// at most 1 MiB as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro: Option<repro::Repro>,
}

/// `GET /v1/queue`, `POST /v1/queue/drain`, `POST /v1/queue/undrain`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueueStatus {
    /// True while no new job starts (maintenance); running jobs continue.
    pub drained: bool,
}

/// `GET /v1/jobs/{id}`: the job with its attempts and history.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: Job,
    pub attempts: Vec<Attempt>,
    pub events: Vec<Event>,
    /// GPU figures over every attempt (the running one so far), when telemetry saw the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_usage: Option<JobGpuUsage>,
    /// The cores and memory it holds on each node: the spec's `cpus` and
    /// `memory` where given (as asked, in `spec`), else the daemon's
    /// `[resources]` defaults. 0: none reserved. Absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<gpuq_core::JobResources>,
    /// The memory limit (MiB) its cgroup enforces: its reserved memory, else a
    /// cap that reserves nothing. 0: none of its own. Absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_mib: Option<u64>,
}

/// `GET /v1/gpus`: one GPU and who holds it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GpuStatus {
    pub node: String,
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_mib: u64,
    pub job: Option<JobId>,
    pub user: Option<String>,
    pub job_name: Option<String>,
    /// The latest telemetry reading (none before the first sample, or without telemetry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading: Option<GpuReading>,
    /// Processes on this GPU, with the job each belongs to (none for simulated GPUs).
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
}

/// `GET /v1/gpus/history`: each GPU's readings over time, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GpuHistory {
    pub index: u32,
    pub points: Vec<HistoryPoint>,
}

/// One item of `GET /v1/events` (server-sent events; the SSE `event:` field is
/// `job` or `alert`, its `id:` resumes the stream via `Last-Event-ID`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FeedItem {
    Job(Event),
    Alert(Alert),
}

/// `GET /v1/jobs/{id}/cpu`: a running job's CPU use (its processes on this node).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct JobCpu {
    pub job: JobId,
    /// CPU time over the last second, in percent of one core (200: two cores busy).
    pub cpu_percent: f64,
    /// Its processes (its process group and session).
    pub processes: u32,
    /// The node's cores.
    pub cores: u32,
}

/// `GET /v1/info`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ServerInfo {
    pub version: String,
    pub node: String,
    pub gpus: u32,
    /// What GPU discovery found, in words.
    pub gpu_discovery: String,
    pub slots: u32,
    pub home: String,
    pub pid: u32,
    /// The NVIDIA driver's version, as NVML reports it (none without NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// The newest CUDA version the driver supports (e.g. `12.4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_cuda_version: Option<String>,
    /// GPUs come from NVML (which also lists their processes), not a simulation.
    #[serde(default)]
    pub nvml: bool,
    /// Which isolation jobs run under: "cgroup v1 (devices, memory, …)",
    /// "cgroup v2 device program + v1 memory/…", or "none: <why>".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
}

/// `GET /v1/jobs/{id}/explain`, and each item of `GET /v1/explain`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Explanation {
    pub id: JobId,
    /// The rule that holds a queued job back, in a sentence; or what the job is doing.
    pub explanation: String,
}

/// `GET /v1/usage`: GPU-hours and fair-share standing.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub users: Vec<UserUsage>,
    pub projects: Vec<ProjectUsage>,
    /// Half-life of the fair-share decay, e.g. "7days".
    pub half_life: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct UserUsage {
    pub user: String,
    /// All GPU-hours ever used (running attempts count up to now).
    pub gpu_hours: f64,
    /// GPU-hours with the decay applied: what fair share looks at.
    pub decayed_gpu_hours: f64,
    pub share: f64,
    /// decayed GPU-hours per unit of share; lower goes first within a priority class.
    pub standing: f64,
    pub running_gpus: u32,
    pub queued_jobs: u32,
    pub max_gpus: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProjectUsage {
    pub project: String,
    pub gpu_hours: f64,
    pub running_gpus: u32,
    pub max_gpus: Option<u32>,
}

/// `POST /v1/tokens`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenRequest {
    /// The user the token acts as.
    pub user: String,
}

/// The answer to `POST /v1/tokens`: the only time the secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenCreated {
    pub id: i64,
    pub user: String,
    pub token: String,
}

/// `GET /v1/tokens`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenInfo {
    pub id: i64,
    pub user: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// `GET /v1/whoami`: the identity the daemon sees for this client.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WhoAmI {
    pub user: String,
    pub admin: bool,
}

/// Body of every error response.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: String,
    /// The offending field of the request, when one is to blame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// `GET /v1/cost`: what was spent, grouped, in a window.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CostReport {
    /// `user`, `project`, `job` or `day`.
    pub by: String,
    pub since: i64,
    pub until: i64,
    /// The time zone of days and months.
    pub timezone: String,
    /// The window in that time zone, in words.
    pub window: String,
    /// Where this node's price comes from, in words.
    pub pricing: String,
    pub rows: Vec<CostRow>,
    /// Sum of the priced rows; absent when nothing had a price.
    pub total: Option<Micros>,
    pub gpu_hours: f64,
    pub budgets: Vec<BudgetStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CostRow {
    pub key: String,
    /// Absent when none of the row's time had a price (not $0).
    pub cost: Option<Micros>,
    /// GPUs held × time, in the window.
    pub gpu_hours: f64,
    /// GPU-hours actually computing: held hours × average utilisation (telemetry);
    /// absent when no attempt of the row was sampled.
    pub used_gpu_hours: Option<f64>,
    pub attempts: u32,
    /// GPU-hours (GPUs held × time, as `gpu_hours`) of attempts that ran without a price.
    pub unpriced_hours: f64,
}

/// One budget in its current period.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BudgetStatus {
    /// `user` or `project`.
    pub scope: String,
    pub name: String,
    /// `day`, `week` or `month`.
    pub period: String,
    pub period_start: i64,
    pub period_end: i64,
    pub limit: Micros,
    pub spent: Micros,
    pub left: Micros,
    pub percent: f64,
    /// What happens at 100%: `refuse`, `hold` or `stop`.
    pub action: String,
    pub exhausted: bool,
}

/// `GET /v1/autostop`, `POST /v1/autostop`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AutostopStatus {
    /// `None`: off.
    pub idle_after: Option<String>,
    pub util_percent: f64,
    pub warn_before: String,
    /// What runs when the node has been idle long enough; without one the queue is drained.
    pub command: Option<String>,
    pub dry_run: bool,
    /// Since when the node counts as idle (epoch ms), if it does.
    pub idle_since: Option<i64>,
}

/// `POST /v1/autostop`: a partial update; a field left out keeps its current
/// value (else gpuq.toml's `[autostop]`), and an unknown field is refused.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AutostopRequest {
    /// A duration such as `30m`, or `off`; needed when autostop is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_after: Option<String>,
    /// One of the commands gpuq.toml allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

/// `GET /v1/schedules`: each schedule and its next runs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleInfo {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub action: String,
    pub spec: Option<String>,
    pub user: Option<String>,
    /// The next runs (epoch ms).
    pub next: Vec<i64>,
    /// The same, as local times in the schedule's time zone.
    pub next_local: Vec<String>,
    pub last_run: Option<i64>,
}
