//! The daemon's configuration: `gpuq server --config FILE`, else
//! `$GPUQ_HOME/gpuq.toml` when it exists. Every field is optional.
//!
//! ```toml
//! admins = ["alice"]            # may cancel, requeue, hold any job (never run as another user)
//! single_user = false           # true: even as root, run every job as the daemon's user
//! allow_root_jobs = false       # true: jobs may run as uid 0 (root's own, or single_user as root)
//! min_job_uid = 1000            # accounts below this uid (system accounts) never run jobs
//!
//! [scheduler]
//! fair_share_half_life = "7d"   # how fast past usage is forgotten
//! default_max_gpus = 4          # per user, at once
//! default_max_queued = 10000    # per user, queued or held (the default)
//! slots = 32                    # jobs at once on this node
//! requeue_delay = "1s"          # a job's exit 75 (requeue me): its next start waits this long,
//! requeue_max_delay = "10m"     # doubled for each requeue in a row without progress, up to this
//! max_requeues_without_progress = 10  # then it fails (no new checkpoint file, no new metric)
//! submit_rate = 100             # jobs per second one user may submit, sustained (cancelled ones count:
//! submit_burst = 10000          # their rows stay), with bursts of up to this many
//!
//! [server]                      # the daemon's own settings (a `gpuq server` flag wins)
//! gpus = "sim:4"                # auto (NVML), none, or sim:N [default: auto]
//! listen = "127.0.0.1:8585"
//! log_max_size = "16M"          # $GPUQ_HOME/daemon.log is rotated to daemon.log.1 beyond this
//!
//! [output]                      # what jobs write (over a limit the excess is dropped and counted)
//! log_max_size = "1G"           # an attempt's log keeps its head and last min(half, 4M), says what was cut
//! disk_reserve = "1G"           # job logs and metrics stop when the data directory's disk has less free
//!                               # [default: 5% of that disk, at most 1G]; the database keeps the rest
//! metrics_rate = 1000           # points per second one job may log, sustained,
//! metrics_burst = 50000         # with bursts of up to this many
//! metrics_user_rate = 5000      # points per second all of one user's jobs and runs together,
//! metrics_user_burst = 100000   # with bursts of up to this many
//! metrics_max_points = 5000000  # points per job (about 33 bytes each in the database)
//! metrics_max_keys = 1000       # distinct metric names per job (and params, and tags)
//! max_runs_per_user = 10000     # runs one user may create through the tracking API (jobs' own: not counted)
//! artifact_max_size = "64G"     # the largest single artifact upload; uploads also stop at disk_reserve
//!
//! [users.alice]
//! share = 2                     # twice bob's share of the GPUs
//! max_gpus = 8
//!
//! [projects.vision]
//! max_gpus = 6
//! max_queued = 500
//! group = "vision"              # its jobs' checkpoints/ and outputs/ readable by this group (0750)
//!
//! [telemetry]
//! interval = "5s"               # how often every GPU is read
//!
//! [alerts]
//! idle_after = "10m"            # a job whose GPUs stay at or under idle_util_percent this long
//! idle_util_percent = 1
//! memory_percent = 95           # GPU memory in use
//! temperature_c = 85
//! cooldown = "30m"              # the same alert is not repeated within this time
//!
//! [[alerts.webhooks]]
//! url = "https://open.feishu.cn/open-apis/bot/v2/hook/…"
//! format = "feishu"             # json (the alert as is), slack, feishu or dingtalk
//! secret = "…"                  # optional: signs Feishu and DingTalk requests
//!
//! [cost]
//! instance = "aws/us-east-1/p4d.24xlarge"   # a rented VM: its catalog row (gpuq prices list)
//! spot = false                   # use the row's spot price
//! # gpu_hour = 1.20              # or a price per GPU-hour (own hardware: amortised)
//! cpu_job_hour = 0.05            # jobs without GPUs, per job-hour (default: no charge listed)
//! catalog = "/etc/gpuq/prices.csv"  # extra or overriding catalog rows
//! timezone = "Asia/Shanghai"     # days and months of reports and budgets, and schedules
//!
//! [[budgets]]
//! user = "alice"                 # or project = "vision"
//! amount = 200.0                 # dollars per period
//! period = "month"               # day, week or month
//! action = "refuse"              # at 100%: refuse (new submits), hold (queued jobs), stop (running ones too)
//! alert_at = [80, 100]           # percent
//!
//! [autostop]
//! idle_after = "30m"             # no job, or every job's GPUs under util_percent, this long
//! util_percent = 5
//! warn_before = "5m"
//! command = "shutdown -h now"    # or a cloud CLI call; without a command the queue is drained
//! commands = ["shutdown -h now", "/usr/local/bin/stop-vm"]  # what `gpuq autostop --command` may choose
//! dry_run = false
//!
//! [sessions]
//! idle_util_percent = 5          # a notebook's or shell's GPU at or above this is in use
//!
//! [connections]                  # each open connection costs the daemon a descriptor
//! max_tcp = 4096                 # TCP connections at once, in all; more are closed at once
//! max_unauthenticated = 1024     # TCP connections yet to send an authenticated request: past
//! max_unauthenticated_per_address = 256  # either bound, the oldest of them is closed
//! max_per_user = 64              # unix socket connections per account (root's and the daemon's: no cap)
//! max_tcp_per_user = 256         # authenticated TCP connections per user (the daemon token's: no cap)
//! header_timeout = "10s"         # a request's headers (or an idle keep-alive's next) within this
//!
//! [confinement]                  # each job in cgroups of its own (root, or a delegated subtree)
//! mode = "auto"                  # "off": jobs run unconfined
//! devices = "auto"               # "v1": the devices controller; "bpf": the cgroup v2 device program (auto on a hybrid host: both)
//! max_processes = 4096           # processes (and threads) per job
//! allow_devices = ["c 10:200 rw"] # a site's own devices every job may open, beside the built-in list
//!
//! [resources]                    # cores and memory a job gets when its spec does not say (see config_resources.rs)
//! cpus_per_gpu = 8               # default: the node's cores / its GPUs, rounded down (0 where that is under 2)
//! memory_per_gpu = "64G"         # default: the node's allocatable memory / its GPUs
//! cpus = 0                       # a CPU-only job's cores (default 0: none reserved, it runs on the unreserved ones)
//! memory_per_cpu = "4G"          # per reserved core, where no per-GPU share applies (default: allocatable / cores)
//!                                # and the memory cap (not reserved) of a job holding no memory: × max(cores, 1)
//! system_memory = "4G"           # not allocatable to jobs (default: 10% of the node's memory, at most 4G)
//!
//! [envs]                         # cached Python environments (`python:` in a spec)
//! uv = "/usr/local/bin/uv"       # default: uv on the daemon's PATH, else the user's (lab-wide: the daemon's only)
//! dir = "/shared/gpuq-envs"      # default $GPUQ_HOME/envs; on Slurm a shared filesystem
//! max_size = "100G"              # least recently used ones no job needs go beyond it
//! shared = false                 # true: one lab-wide, read-only cache (keyed without the user when only the key decides the build)
//! build_timeout = "1h"
//! max_parallel_builds = 2
//!
//! [containers]                   # container jobs (`image:` in a spec), run with podman
//! podman = "podman"
//! global_args = ["--runtime", "runc"]
//! run_args = ["--ulimit", "nofile=1024:1024"]
//!
//! backend = "slurm"             # top level: run jobs through Slurm (default: local)
//! [slurm]
//! partition = "gpu"             # sbatch defaults
//! account = "lab"
//! qos = "normal"
//! max_gpus = 64                 # GPUs gpuq hands to Slurm at once (its admission limit)
//! poll_interval = "2s"          # one squeue (and sacct) per interval for all jobs
//! extra_args = ["--mem-per-gpu=16G"]
//!
//! [[schedules]]
//! name = "nightly-eval"
//! cron = "0 2 * * *"             # minute hour day month weekday (6 fields: seconds first)
//! action = "submit"              # drain, undrain, or submit
//! spec = "/home/alice/eval.yaml" # for submit: a job spec file
//! user = "alice"                 # for submit: whose job it is
//! ```

#[path = "config_output.rs"]
mod output;
pub use output::OutputConfig;
#[path = "config_resources.rs"]
mod resources;
pub use resources::{Capacity, ResourcesConfig};

use gpuq_core::DurationSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Users who may act on every job (besides root and the daemon's own user).
    #[serde(default)]
    pub admins: Vec<String>,
    /// Even when run as root, serve only the daemon's own user and run every
    /// job as that user (socket mode 0600). Names in submits are then labels.
    #[serde(default)]
    pub single_user: bool,
    /// Jobs may run as uid 0. Off by default: being a gpuq admin must never make
    /// anyone root, and a root job is rarely what a lab means.
    #[serde(default)]
    pub allow_root_jobs: bool,
    /// The lowest uid a job may run as (system accounts such as `daemon` or `bin`
    /// are not people); root is governed by `allow_root_jobs`.
    pub min_job_uid: Option<u32>,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub users: BTreeMap<String, UserConfig>,
    #[serde(default)]
    pub projects: BTreeMap<String, ProjectConfig>,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    #[serde(default)]
    pub alerts: AlertsConfig,
    #[serde(default)]
    pub cost: CostConfig,
    #[serde(default)]
    pub budgets: Vec<BudgetConfig>,
    pub autostop: Option<AutostopConfig>,
    #[serde(default)]
    pub schedules: Vec<ScheduleConfig>,
    #[serde(default)]
    pub backend: BackendKind,
    #[serde(default)]
    pub slurm: SlurmConfig,
    #[serde(default)]
    pub sessions: SessionsConfig,
    #[serde(default)]
    pub connections: ConnectionsConfig,
    #[serde(default)]
    pub envs: EnvsConfig,
    #[serde(default)]
    pub containers: ContainersConfig,
    #[serde(default)]
    pub output: OutputConfig,
    #[serde(default)]
    pub resources: ResourcesConfig,
    /// `[confinement]`: jobs in cgroups (see gpuq_exec::cgroup).
    #[serde(default)]
    pub confinement: gpuq_exec::cgroup::ConfinementConfig,
}

/// `[envs]`: cached Python environments, built with uv as the job's user.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvsConfig {
    /// The uv executable; default: `uv` on the daemon's PATH, else on the user's.
    pub uv: Option<String>,
    /// Where environments are kept; default `$GPUQ_HOME/envs`. On Slurm, a
    /// directory every node sees at the same path.
    pub dir: Option<String>,
    /// The cache's size cap; least recently used environments no queued or
    /// running job needs are removed beyond it.
    #[serde(default = "default_envs_max_size")]
    pub max_size: gpuq_core::MemSize,
    /// One lab-wide cache: an environment is keyed without its user, built by
    /// the first user who asks and readable (not writable) by everyone.
    #[serde(default)]
    pub shared: bool,
    /// A build running longer than this is stopped and fails its jobs.
    #[serde(default = "default_build_timeout")]
    pub build_timeout: DurationSpec,
    /// Builds at once.
    #[serde(default = "default_parallel_builds")]
    pub max_parallel_builds: u32,
}

impl Default for EnvsConfig {
    fn default() -> Self {
        Self {
            uv: None,
            dir: None,
            max_size: default_envs_max_size(),
            shared: false,
            build_timeout: default_build_timeout(),
            max_parallel_builds: default_parallel_builds(),
        }
    }
}

fn default_envs_max_size() -> gpuq_core::MemSize {
    "100G".parse().expect("a size")
}
fn default_build_timeout() -> DurationSpec {
    "1h".parse().expect("a duration")
}
fn default_parallel_builds() -> u32 {
    2
}

/// `[containers]`: how podman runs container jobs (`image:` in a spec).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainersConfig {
    #[serde(default = "default_podman")]
    pub podman: String,
    /// Before `run`, e.g. `["--runtime", "runc"]`.
    #[serde(default)]
    pub global_args: Vec<String>,
    /// After `run`, e.g. `["--ulimit", "nofile=1024:1024"]`.
    #[serde(default)]
    pub run_args: Vec<String>,
}

impl Default for ContainersConfig {
    fn default() -> Self {
        Self {
            podman: default_podman(),
            global_args: Vec::new(),
            run_args: Vec::new(),
        }
    }
}

fn default_podman() -> String {
    "podman".into()
}

/// `[sessions]`: interactive sessions (`gpuq notebook`, `gpuq shell`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// A session's GPU at or above this utilisation is in use (not idle).
    #[serde(default = "default_session_util")]
    pub idle_util_percent: f64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            idle_util_percent: default_session_util(),
        }
    }
}

fn default_session_util() -> f64 {
    5.0
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Local,
    Slurm,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    #[serde(default = "default_slurm_gpus")]
    pub max_gpus: u32,
    #[serde(default = "default_poll")]
    pub poll_interval: DurationSpec,
    #[serde(default)]
    pub extra_args: Vec<String>,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        toml::from_str("").expect("every slurm field has a default")
    }
}

fn default_slurm_gpus() -> u32 {
    64
}
fn default_poll() -> DurationSpec {
    DurationSpec::from_secs(2)
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostConfig {
    pub instance: Option<String>,
    #[serde(default)]
    pub spot: bool,
    pub gpu_hour: Option<f64>,
    pub cpu_job_hour: Option<f64>,
    pub catalog: Option<std::path::PathBuf>,
    pub timezone: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub user: Option<String>,
    pub project: Option<String>,
    pub amount: f64,
    #[serde(default = "default_period")]
    pub period: BudgetPeriod,
    #[serde(default)]
    pub action: BudgetAction,
    #[serde(default = "default_alert_at")]
    pub alert_at: Vec<u32>,
}

fn default_period() -> BudgetPeriod {
    BudgetPeriod::Month
}
fn default_alert_at() -> Vec<u32> {
    vec![80, 100]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    Day,
    Week,
    Month,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetAction {
    /// New submits are refused; queued and running jobs go on.
    #[default]
    Refuse,
    /// New submits are refused and queued jobs held.
    Hold,
    /// New submits are refused, queued jobs held, running jobs stopped.
    Stop,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AutostopConfig {
    pub idle_after: DurationSpec,
    #[serde(default = "default_autostop_util")]
    pub util_percent: f64,
    #[serde(default = "default_warn_before")]
    pub warn_before: DurationSpec,
    pub command: Option<String>,
    /// Further commands an admin may choose through the API (`gpuq autostop
    /// --command`); the API never names a command of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    #[serde(default)]
    pub dry_run: bool,
}

fn default_autostop_util() -> f64 {
    5.0
}
fn default_warn_before() -> DurationSpec {
    DurationSpec::from_secs(300)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    pub name: String,
    pub cron: String,
    pub action: ScheduleAction,
    pub spec: Option<std::path::PathBuf>,
    pub user: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleAction {
    Drain,
    Undrain,
    Submit,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    #[serde(default = "default_interval")]
    pub interval: DurationSpec,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            interval: default_interval(),
        }
    }
}

fn default_interval() -> DurationSpec {
    DurationSpec::from_secs(5)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    #[serde(default = "default_idle_after")]
    pub idle_after: DurationSpec,
    #[serde(default = "default_idle_util")]
    pub idle_util_percent: f64,
    #[serde(default = "default_memory_percent")]
    pub memory_percent: f64,
    #[serde(default = "default_temperature")]
    pub temperature_c: u32,
    #[serde(default = "default_cooldown")]
    pub cooldown: DurationSpec,
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        toml::from_str("").expect("every alerts field has a default")
    }
}

fn default_idle_after() -> DurationSpec {
    DurationSpec::from_secs(600)
}
fn default_idle_util() -> f64 {
    1.0
}
fn default_memory_percent() -> f64 {
    95.0
}
fn default_temperature() -> u32 {
    85
}
fn default_cooldown() -> DurationSpec {
    DurationSpec::from_secs(1800)
}

impl AlertsConfig {
    pub fn thresholds(&self) -> gpuq_core::alerts::Thresholds {
        gpuq_core::alerts::Thresholds {
            idle_after_ms: self.idle_after.as_millis() as i64,
            idle_util_percent: self.idle_util_percent,
            memory_percent: self.memory_percent,
            temperature_c: self.temperature_c,
            cooldown_ms: self.cooldown.as_millis() as i64,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    #[serde(default)]
    pub format: WebhookFormat,
    /// Feishu's and DingTalk's "signature" security setting.
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// The alert object as the API returns it.
    #[default]
    Json,
    Slack,
    Feishu,
    Dingtalk,
}

/// Jobs a user may have queued when gpuq.toml does not say.
pub const DEFAULT_MAX_QUEUED: u32 = 10_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    #[serde(default = "default_half_life")]
    pub fair_share_half_life: DurationSpec,
    pub default_max_gpus: Option<u32>,
    pub default_max_queued: Option<u32>,
    pub slots: Option<u32>,
    /// Most tasks in one job array (at most, and by default, 10,000).
    pub max_array_tasks: Option<u32>,
    /// A job that exits 75 (asks to be requeued) starts again after this delay…
    #[serde(default = "default_requeue_delay")]
    pub requeue_delay: DurationSpec,
    /// …doubled for each requeue in a row without progress, up to this.
    #[serde(default = "default_requeue_max_delay")]
    pub requeue_max_delay: DurationSpec,
    /// Requeues in a row without progress (no new file in its checkpoint
    /// directory, no new metric) before the job fails: a job that only ever
    /// exits 75 would otherwise start again forever.
    #[serde(default = "default_requeues_without_progress")]
    pub max_requeues_without_progress: u32,
    /// Jobs per second one user may submit (array tasks count one each):
    /// `max_queued` counts pending jobs only, and a submit-then-cancel loop
    /// would otherwise grow the tables without bound.
    #[serde(default = "default_submit_rate")]
    pub submit_rate: u32,
    #[serde(default = "default_submit_burst")]
    pub submit_burst: u32,
}

fn default_submit_rate() -> u32 {
    100
}
fn default_submit_burst() -> u32 {
    10_000
}

fn default_requeue_delay() -> DurationSpec {
    DurationSpec::from_secs(1)
}
fn default_requeue_max_delay() -> DurationSpec {
    DurationSpec::from_secs(600)
}
fn default_requeues_without_progress() -> u32 {
    10
}

/// `[connections]`: how many connections the daemon holds, and how long a
/// request may take to arrive (see `listen.rs`): each costs a descriptor.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsConfig {
    /// TCP connections open at once, in all.
    #[serde(default = "default_max_tcp")]
    pub max_tcp: usize,
    /// TCP connections that have not yet carried an authenticated request;
    /// a new one past this closes the oldest of them.
    #[serde(default = "default_max_unauthenticated")]
    pub max_unauthenticated: usize,
    /// Of those, from one address.
    #[serde(default = "default_max_unauthenticated_per_address")]
    pub max_unauthenticated_per_address: usize,
    /// Socket connections one account (not root, not the daemon's) holds at once.
    #[serde(default = "default_max_per_user")]
    pub max_per_user: usize,
    /// Authenticated TCP connections one user (not the daemon's owner) holds at once.
    #[serde(default = "default_max_tcp_per_user")]
    pub max_tcp_per_user: usize,
    /// Time a client has to send a request's headers (idle keep-alive included).
    #[serde(default = "default_header_timeout")]
    pub header_timeout: DurationSpec,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        Self {
            max_tcp: default_max_tcp(),
            max_unauthenticated: default_max_unauthenticated(),
            max_unauthenticated_per_address: default_max_unauthenticated_per_address(),
            max_per_user: default_max_per_user(),
            max_tcp_per_user: default_max_tcp_per_user(),
            header_timeout: default_header_timeout(),
        }
    }
}

impl ConnectionsConfig {
    fn check(&self) -> Result<(), String> {
        for (key, v, default) in [
            ("max_tcp", self.max_tcp, default_max_tcp()),
            (
                "max_unauthenticated",
                self.max_unauthenticated,
                default_max_unauthenticated(),
            ),
            (
                "max_unauthenticated_per_address",
                self.max_unauthenticated_per_address,
                default_max_unauthenticated_per_address(),
            ),
            ("max_per_user", self.max_per_user, default_max_per_user()),
            (
                "max_tcp_per_user",
                self.max_tcp_per_user,
                default_max_tcp_per_user(),
            ),
        ] {
            if v == 0 {
                return Err(format!(
                    "connections.{key}: 0 would refuse every client; give a number of connections (the default is {default})"
                ));
            }
        }
        if self.header_timeout.as_millis() < 1000 {
            return Err(format!(
                "connections.header_timeout: {} is too short for a slow network; give 1s or more (the default is 10s)",
                self.header_timeout
            ));
        }
        Ok(())
    }
}

fn default_max_tcp() -> usize {
    4096
}
fn default_max_unauthenticated() -> usize {
    1024
}
fn default_max_unauthenticated_per_address() -> usize {
    256
}
fn default_max_per_user() -> usize {
    64
}
fn default_max_tcp_per_user() -> usize {
    256
}
fn default_header_timeout() -> DurationSpec {
    DurationSpec::from_secs(10)
}

/// `[server]`: the daemon's own settings, for a daemon started without flags
/// (by hand, by systemd, or by the first command that finds none running).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// auto (NVML), none, or sim:N.
    pub gpus: Option<String>,
    pub listen: Option<std::net::SocketAddr>,
    /// `daemon.log` is renamed to `daemon.log.1` once it grows beyond this.
    #[serde(default = "default_daemon_log_max_size")]
    pub log_max_size: gpuq_core::MemSize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            gpus: None,
            listen: None,
            log_max_size: default_daemon_log_max_size(),
        }
    }
}

fn default_daemon_log_max_size() -> gpuq_core::MemSize {
    "16M".parse().expect("a size")
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            fair_share_half_life: default_half_life(),
            default_max_gpus: None,
            default_max_queued: None,
            slots: None,
            max_array_tasks: None,
            requeue_delay: default_requeue_delay(),
            requeue_max_delay: default_requeue_max_delay(),
            max_requeues_without_progress: default_requeues_without_progress(),
            submit_rate: default_submit_rate(),
            submit_burst: default_submit_burst(),
        }
    }
}

fn default_half_life() -> DurationSpec {
    DurationSpec::from_secs(7 * 24 * 3600)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    #[serde(default = "one")]
    pub share: f64,
    pub max_gpus: Option<u32>,
    pub max_queued: Option<u32>,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    pub max_gpus: Option<u32>,
    pub max_queued: Option<u32>,
    /// A local group that may read the project's checkpoints and outputs.
    pub group: Option<String>,
}

impl Config {
    /// Reads `explicit`, else `home/gpuq.toml` if present, else the defaults.
    pub fn load(explicit: Option<&Path>, home: &Path) -> Result<Self, String> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let p = home.join("gpuq.toml");
                if !p.exists() {
                    return Ok(Config::default());
                }
                p
            }
        };
        // A root daemon takes its rules (who may be root, which commands it runs)
        // from this file: only root may be able to change it.
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            gpuq_exec::safe_fs::check_trusted(&path, 0).map_err(|e| {
                format!(
                    "{}: a daemon run as root reads only a root-owned config: {e}",
                    path.display()
                )
            })?;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Config =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        config.output.check()?;
        config.resources.check()?;
        config.confinement.check()?;
        config.connections.check()?;
        for (key, value, default) in [
            (
                "submit_rate",
                config.scheduler.submit_rate,
                default_submit_rate(),
            ),
            (
                "submit_burst",
                config.scheduler.submit_burst,
                default_submit_burst(),
            ),
        ] {
            if value == 0 {
                return Err(format!(
                    "scheduler.{key}: 0 would refuse every submit; give a number of jobs (the default is {default})"
                ));
            }
        }
        if config.telemetry.interval.as_millis() < 100 {
            return Err(format!(
                "telemetry.interval: {} is too short; use 100ms or more (the default is 5s)",
                config.telemetry.interval
            ));
        }
        let a = &config.alerts;
        for (key, value) in [
            ("idle_util_percent", a.idle_util_percent),
            ("memory_percent", a.memory_percent),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(format!(
                    "alerts.{key}: {value} is not a percentage (0 to 100)"
                ));
            }
        }
        let u = config.sessions.idle_util_percent;
        if !(0.0..=100.0).contains(&u) {
            return Err(format!(
                "sessions.idle_util_percent: {u} is not a percentage (0 to 100)"
            ));
        }
        for (i, b) in config.budgets.iter().enumerate() {
            if b.user.is_some() == b.project.is_some() {
                return Err(format!(
                    "budgets[{i}]: name exactly one of user = \"…\" or project = \"…\""
                ));
            }
            if !(b.amount.is_finite() && b.amount >= 0.0) {
                return Err(format!(
                    "budgets[{i}].amount: {} is not an amount in dollars",
                    b.amount
                ));
            }
            if b.alert_at.iter().any(|p| *p == 0 || *p > 1000) {
                return Err(format!(
                    "budgets[{i}].alert_at: percentages from 1 to 1000, like [80, 100]"
                ));
            }
        }
        let c = &config.cost;
        if c.instance.is_some() && c.gpu_hour.is_some() {
            return Err(
                "cost: set instance (a catalog row) or gpu_hour (your own price), not both".into(),
            );
        }
        for (key, value) in [("gpu_hour", c.gpu_hour), ("cpu_job_hour", c.cpu_job_hour)] {
            if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(format!(
                    "cost.{key}: {} is not a price in dollars per hour",
                    value.unwrap_or(0.0)
                ));
            }
        }
        for (i, s) in config.schedules.iter().enumerate() {
            if let Err(e) = s.cron.parse::<gpuq_core::cron::Cron>() {
                return Err(format!("schedules[{i}] ({}).cron: {e}", s.name));
            }
            if s.action == ScheduleAction::Submit && s.spec.is_none() {
                return Err(format!(
                    "schedules[{i}] ({}): action \"submit\" needs spec = \"/path/to/job.yaml\"",
                    s.name
                ));
            }
        }
        for (i, hook) in a.webhooks.iter().enumerate() {
            if !(hook.url.starts_with("http://") || hook.url.starts_with("https://")) {
                return Err(format!(
                    "alerts.webhooks[{i}].url: {:?} is not an http:// or https:// URL",
                    hook.url
                ));
            }
        }
        for (name, user) in &config.users {
            if !(user.share.is_finite() && user.share > 0.0) {
                return Err(format!(
                    "users.{name}.share: {} is not a positive number",
                    user.share
                ));
            }
        }
        Ok(config)
    }

    /// The lowest uid a job may run as (default 1000, where Debian's accounts for people begin).
    pub fn min_job_uid(&self) -> u32 {
        self.min_job_uid.unwrap_or(1000)
    }

    /// The autostop commands the API may choose: the configured one and `commands`.
    pub fn autostop_commands(&self) -> Vec<&str> {
        let Some(a) = &self.autostop else {
            return Vec::new();
        };
        a.command
            .iter()
            .chain(&a.commands)
            .map(String::as_str)
            .collect()
    }

    pub fn share(&self, user: &str) -> f64 {
        self.users.get(user).map(|u| u.share).unwrap_or(1.0)
    }

    /// Most jobs `user` may have queued (pending or held; an array counts its
    /// tasks), and the key of gpuq.toml that sets it. Never unbounded: one user's
    /// flood of submits slows every listing and every pass for everyone.
    pub fn max_queued(&self, user: &str) -> (u32, String) {
        if let Some(n) = self.users.get(user).and_then(|u| u.max_queued) {
            return (n, format!("[users.{user}] max_queued"));
        }
        (
            self.scheduler
                .default_max_queued
                .unwrap_or(DEFAULT_MAX_QUEUED),
            "[scheduler] default_max_queued".into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shares_and_quotas() {
        let c = Config::parse(
            "[scheduler]\nfair_share_half_life = \"1d\"\ndefault_max_gpus = 4\n[users.alice]\nshare = 2\nmax_queued = 3\n[projects.nlp]\nmax_gpus = 6\n",
        )
        .unwrap();
        assert_eq!(c.scheduler.fair_share_half_life.as_millis(), 86_400_000);
        assert_eq!((c.share("alice"), c.share("bob")), (2.0, 1.0));
        assert_eq!(c.max_queued("alice").0, 3);
        assert_eq!(c.max_queued("bob").0, DEFAULT_MAX_QUEUED);
        assert_eq!(c.projects["nlp"].max_gpus, Some(6));
    }

    #[test]
    fn mistakes_name_the_key_and_line() {
        let e = Config::parse("[users.alice]\nshares = 2\n").unwrap_err();
        assert!(e.contains("shares") && e.contains("line 2"), "{e}");
        let e = Config::parse("[users.bob]\nshare = -1\n").unwrap_err();
        assert!(e.contains("users.bob.share"), "{e}");
        let e = Config::parse("[scheduler]\nfair_share_half_life = \"soon\"\n").unwrap_err();
        assert!(e.contains("write it like"), "{e}");
        let e =
            Config::parse("[confinement]\nallow_devices = [\"c 10:200 rw\", \"c 10:200 rwm\"]\n")
                .unwrap_err();
        assert!(
            e.contains("confinement.allow_devices") && e.contains("\"c 10:200 rwm\""),
            "{e}"
        );
        let c = Config::parse("[confinement]\nallow_devices = [\"c 10:200 rw\", \"b 8:* r\"]\n")
            .unwrap();
        assert_eq!(c.confinement.extra_devices().unwrap().len(), 2);
        let e = Config::parse("[scheduler]\nsubmit_rate = 0\n").unwrap_err();
        assert!(
            e.contains("scheduler.submit_rate") && e.contains("100"),
            "{e}"
        );
    }
}
