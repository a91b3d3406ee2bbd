//! Commands and queries over the store, the in-memory queue and the backend.
//!
//! Every state change is committed to the store (with its event row) before its
//! side effect runs. The scheduler pass runs whenever something changed (submit,
//! exit, cancel, release, a back-off timer), with bursts coalesced by a
//! `Notify`: no polling loop decides when a job starts.

pub mod arrays;
mod backend_events;
pub mod costs;
mod cpu;
mod envs;
mod envs_inputs;
mod explain;
mod host_usage;
mod housekeeping;
mod input;
pub mod monitoring;
mod outcome;
pub mod output_limits;
mod placeable;
mod recovery;
mod repro;
mod scheduling;
pub mod sessions;
mod stop;
mod sweep;
mod tracking;
mod usage;
pub use tracking::TrackingLink;

use super::identity::{Caller, Identity};
use crate::config::Config;
use gpuq_api::home::now_ms;
use gpuq_api::{GpuStatus, SubmitRequest};
use gpuq_core::scheduler::Policy;
use gpuq_core::scheduler::QueueKey;
use gpuq_core::{
    DependencyState, EarlySignal, Job, JobId, JobState, Millis, Node, PendingJob, RunningJob,
    SpecError,
};
use gpuq_exec::{Backend, ExitRecord, JobDir};
use gpuq_gpu::GpuInfo;
use gpuq_store::{AttemptEnd, NewJob, Store, StoreError};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use stop::{Stop, StopCause};
use tokio::sync::{watch, Notify};

/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// Said when a GPU job meets a daemon without GPUs (no driver, or `--gpus none`).
const NO_GPUS_HINT: &str = "; this daemon has no GPUs (`gpuq gpus` says why): to try gpuq without \
     real ones, `gpuq server stop`, then start the daemon with `gpuq server --gpus sim:4`";
/// Pauses between tries to record an attempt's end that the store refused.
const END_RETRY_FIRST: Duration = Duration::from_millis(500);
const END_RETRY_MAX: Duration = Duration::from_secs(10);
/// How much of a failed attempt's log is searched for known causes (CUDA OOM).
const LOG_TAIL_BYTES: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    BadSpec(#[from] SpecError),
    #[error("job {0} does not exist")]
    NoSuchJob(JobId),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Quota(String),
    #[error("{0}")]
    Budget(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct RunningAttempt {
    attempt: u32,
    user: Arc<str>,
    project: Option<Arc<str>>,
    started_at: Millis,
    /// All its nodes and GPUs, in rank order.
    placement: gpuq_core::Placement,
    ends_by: Option<Millis>,
    priority: gpuq_core::Priority,
    preemptible: bool,
    grace: Duration,
    early_signal: Option<EarlySignal>,
    stop: Option<Stop>,
    /// The job's spec and failures so far, for classifying the attempt's end
    /// without a store read (`None` when the launch information was unreadable).
    spec: Option<Arc<gpuq_core::JobSpec>>,
    failures: u32,
    /// Price per hour of this attempt (recorded with it in the store).
    rate: Option<gpuq_core::cost::Micros>,
    /// It has begun to run: at once on a backend that does not queue launches,
    /// else when the backend says it started.
    began: bool,
    /// The backend gave it back, not the job's fault (its node failed, the
    /// cores it was placed on were taken): why, for the requeue's reason.
    lost: Option<String>,
    /// The group it counts against (a job array's `%N`).
    group: Option<gpuq_core::JobGroup>,
}

impl RunningAttempt {
    /// A running attempt of a job with this spec (`None`: its launch information
    /// was unreadable), whose clock started at `started` (`None`: not known; its
    /// time limit then has no end yet). Unpriced, and begun.
    fn new(
        attempt: u32,
        user: Arc<str>,
        project: Option<Arc<str>>,
        started: Option<Millis>,
        placement: gpuq_core::Placement,
        spec: Option<&gpuq_core::JobSpec>,
        failures: u32,
    ) -> Self {
        RunningAttempt {
            attempt,
            user,
            project,
            started_at: started.unwrap_or_else(now_ms),
            placement,
            ends_by: spec
                .and_then(|s| s.time_limit)
                .zip(started)
                .map(|(t, s)| s + t.as_millis() as i64),
            priority: spec.map(|s| s.priority).unwrap_or_default(),
            preemptible: spec.is_some_and(|s| s.preemptible),
            grace: spec
                .and_then(|s| s.grace)
                .map(|g| g.as_std())
                .unwrap_or(DEFAULT_GRACE),
            early_signal: spec.and_then(|s| s.signal),
            stop: None,
            spec: spec.map(|s| Arc::new(s.clone())),
            failures,
            rate: None,
            began: true,
            lost: None,
            group: None,
        }
    }

    /// Its GPUs on this machine: node 0 is the one node of a one-node backend
    /// (a cluster backend has no GPU here that telemetry could see).
    fn local_gpus(&self) -> &[u32] {
        self.placement.on(0)
    }
}

struct Inner {
    store: Store,
    pending: BTreeMap<QueueKey, PendingJob>,
    running: HashMap<JobId, RunningAttempt>,
    /// Every job's state, for dependency lookups.
    states: HashMap<JobId, JobState>,
    drained: bool,
    /// Fair-share standings and quotas, as the scheduler core takes them.
    policy: Policy,
    ledger: usage::Ledger,
    /// Jobs' Python environments: keys, wanted and running builds.
    envs: envs::EnvJobs,
}

pub struct Service {
    inner: Mutex<Inner>,
    /// Bumped after every committed change; long polls (wait, log -f) watch it.
    changed: watch::Sender<u64>,
    wake_scheduler: Notify,
    /// Wakes the environment builds' loop (a job waits for a build, a builder exited).
    wake_envs: Notify,
    /// Where environments are cached, and the executable their builders run.
    env_cache: gpuq_exec::envbuild::EnvCache,
    /// The last pass decided nothing and only submits happened since (see `submit_needs_a_pass`).
    quiet: AtomicBool,
    /// What runs the jobs; the service never asks which one it is.
    backend: Arc<dyn Backend>,
    /// The data directory (jobs' directories are under it).
    home: std::path::PathBuf,
    nodes: Vec<Node>,
    gpus: Vec<GpuInfo>,
    /// The driver of `gpus` (NVML), for the attempts' runtime records.
    driver: gpuq_gpu::DriverInfo,
    config: Config,
    identity: Arc<Identity>,
    /// Telemetry and alert state; its own lock keeps sampling off the scheduler's.
    monitor: Mutex<monitoring::Monitor>,
    /// Where committed alerts go for delivery (log, webhooks).
    alert_out: Option<tokio::sync::mpsc::UnboundedSender<gpuq_core::alerts::Alert>>,
    pricing: crate::pricing::Pricing,
    /// Schedules, autostop and budget checks (the once-a-second duties).
    housekeeping: Mutex<housekeeping::Housekeeping>,
    /// Experiment tracking, on its own connection and lock (heavy metric logging
    /// never holds the scheduler's).
    tracking: Mutex<gpuq_store::tracking::Tracking>,
    /// How a job reaches the tracking API.
    link: tracking::TrackingLink,
    /// Held while a job's metrics file is read into the store.
    metrics_reader: Mutex<()>,
    /// Metric rates per run and user, and drops not yet recorded (`[output]`).
    metrics_gate: Mutex<output_limits::MetricsGate>,
    /// Whether the data directory's disk is down to its reserve.
    disk_watch: Mutex<output_limits::DiskWatch>,
    submit_gate: Mutex<output_limits::SubmitGate>,
    /// Held while a sweep takes a step: one searcher step at a time.
    sweep_lock: Mutex<()>,
    /// Running interactive sessions: readiness, clients, idle clocks.
    sessions: Mutex<HashMap<JobId, sessions::Watched>>,
}

/// What the service needs besides its core parts.
pub struct Extras {
    pub alert_out: Option<tokio::sync::mpsc::UnboundedSender<gpuq_core::alerts::Alert>>,
    pub pricing: crate::pricing::Pricing,
    pub tracking: gpuq_store::tracking::Tracking,
    pub link: tracking::TrackingLink,
    pub driver: gpuq_gpu::DriverInfo,
}

impl Service {
    pub fn new(
        mut store: Store,
        backend: Arc<dyn Backend>,
        home: std::path::PathBuf,
        gpus: Vec<GpuInfo>,
        config: Config,
        identity: Arc<Identity>,
        extras: Extras,
    ) -> Result<Arc<Self>, StoreError> {
        // `preempted` is transient: a daemon that died between its two commits requeues the job here.
        let preempted = gpuq_store::ListFilter {
            states: vec![JobState::Preempted],
            ..Default::default()
        };
        for job in store.list(&preempted)? {
            store.requeue_preempted(job.id, now_ms())?;
        }
        let states: HashMap<JobId, JobState> = store.all_states()?.into_iter().collect();
        let mut pending = BTreeMap::new();
        let defaults = scheduling::resource_defaults(&config, &backend.info().nodes);
        for job in store.list(&gpuq_store::ListFilter {
            states: vec![JobState::Queued],
            ..Default::default()
        })? {
            let p = pending_of(&job, &defaults);
            pending.insert(p.queue_key(), p);
        }
        let drained = store.meta("drained")?.as_deref() == Some("1");
        let nodes = backend.info().nodes.clone();
        let (changed, _) = watch::channel(0);
        let now = now_ms();
        let policy = Policy {
            standing: HashMap::new(),
            user_max_gpus: config
                .users
                .iter()
                .filter_map(|(u, c)| Some((Arc::from(u.as_str()), c.max_gpus?)))
                .collect(),
            default_user_max_gpus: config.scheduler.default_max_gpus,
            project_max_gpus: config
                .projects
                .iter()
                .filter_map(|(p, c)| Some((Arc::from(p.as_str()), c.max_gpus?)))
                .collect(),
            strict_order: false,
        };
        let mut inner = Inner {
            store,
            pending,
            running: HashMap::new(),
            states,
            drained,
            policy,
            ledger: usage::Ledger::new(now, config.scheduler.fair_share_half_life.as_millis()),
            envs: Default::default(),
        };
        Self::load_usage(&mut inner, now)?;
        inner.policy.standing = inner.ledger.standings(|u| config.share(u));
        let monitor = monitoring::Monitor::new(
            config.alerts.thresholds(),
            gpuq_core::telemetry::Retention::default(),
        );
        let env_cache = envs::env_cache_for(&config, &home);
        let service = Arc::new(Self {
            env_cache,
            monitor: Mutex::new(monitor),
            alert_out: extras.alert_out,
            housekeeping: Mutex::new(housekeeping::Housekeeping::new(
                &config.schedules,
                config.autostop.clone(),
                &extras.pricing,
                now,
            )),
            pricing: extras.pricing,
            tracking: Mutex::new(extras.tracking),
            link: extras.link,
            metrics_reader: Mutex::new(()),
            metrics_gate: Mutex::new(output_limits::MetricsGate::new(output_limits::Rates {
                run: config.output.metrics_rate,
                run_burst: config.output.metrics_burst,
                user: config.output.metrics_user_rate,
                user_burst: config.output.metrics_user_burst,
            })),
            disk_watch: Mutex::new(output_limits::DiskWatch::default()),
            submit_gate: Mutex::new(output_limits::SubmitGate::default()),
            sweep_lock: Mutex::new(()),
            sessions: Mutex::new(HashMap::new()),
            identity,
            config,
            inner: Mutex::new(inner),
            changed,
            wake_scheduler: Notify::new(),
            wake_envs: Notify::new(),
            quiet: AtomicBool::new(false),
            backend,
            home,
            nodes,
            gpus,
            driver: extras.driver,
        });
        service.connect_backend();
        service.resume_env_builds();
        Ok(service)
    }

    fn job_dir(&self, id: JobId) -> JobDir {
        JobDir::new(&self.home, id)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock would be a bug; keep serving rather than cascade.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn gpu_count(&self) -> u32 {
        self.gpus.len() as u32
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn notify_changed(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    fn changed_and_reschedule(&self) {
        self.quiet.store(false, Ordering::SeqCst);
        self.notify_changed();
        self.wake_scheduler.notify_one();
    }

    fn largest_node_gpus(&self) -> u32 {
        self.nodes
            .iter()
            .map(|n| n.gpus.len() as u32)
            .max()
            .unwrap_or(0)
    }

    /// Queues a job for `caller` (an admin may submit on behalf of another user).
    pub fn submit(&self, req: SubmitRequest, caller: &Caller) -> Result<Job, ServiceError> {
        input::validate_submit_request(&req)?;
        let spec = req.spec;
        spec.validate()?;
        self.check_placeable(&spec)?;
        self.check_array(&spec)?;
        if spec.session.is_some() && !self.backend.info().interactive {
            return Err(SpecError::new(
                "session",
                format!(
                    "interactive sessions run on the daemon's own node, and this daemon runs its jobs through {}: \
                     use its own interactive jobs (`srun --pty bash`), or a gpuq daemon on the GPU node",
                    self.backend.info().name
                ),
            )
            .into());
        }
        let adding = arrays::jobs_in(&spec);
        let mut env = req.env;
        env.extend(spec.env.clone());
        let user = self.submitter(&req.user, caller)?;
        let cwd = spec.cwd.clone().unwrap_or(req.cwd);
        self.check_cwd_of(&user, &cwd)?;
        self.check_uv(&spec, &env)?;
        let now = now_ms();
        self.check_budget(&user, &spec, now)?;
        let repro = repro::completed(req.repro, &spec, &cwd, &env);
        let job = {
            let mut inner = self.lock();
            let (limit, key) = self.config.max_queued(&user);
            let queued = inner.pending.values().filter(|p| *p.user == *user).count() as u32;
            if queued.saturating_add(adding) > limit {
                return Err(ServiceError::Quota(arrays::over_queued_quota(
                    &user, queued, adding, limit, &key,
                )));
            }
            if let Some((project, limit)) = spec
                .project
                .as_ref()
                .and_then(|p| Some((p, self.config.projects.get(p)?.max_queued?)))
            {
                let queued = inner
                    .pending
                    .values()
                    .filter(|p| p.project.as_deref() == Some(project.as_str()))
                    .count() as u32;
                if queued + adding > limit {
                    return Err(ServiceError::Quota(arrays::over_queued_quota(
                        &format!("project {project}"),
                        queued,
                        adding,
                        limit,
                        &format!("[projects.{project}] max_queued"),
                    )));
                }
            }
            let spec = arrays::after_whole_arrays(&inner.store, spec)?;
            for dep in &spec.after {
                if !inner.states.contains_key(dep) {
                    return Err(SpecError::new("after", format!("job {dep} does not exist")).into());
                }
            }
            // Last, so that only a submit that would otherwise be taken spends tokens.
            self.check_submit_rate(&user, adding)?;
            let new = NewJob {
                spec,
                user,
                cwd,
                repro,
                env,
                idempotency_key: req.idempotency_key,
            };
            // An array: all its tasks in one transaction; the answer is its first task.
            let jobs = match &new.spec.array {
                None => vec![inner.store.submit(&new, now)?],
                Some(array) => inner.store.submit_array(&new, array, now)?,
            };
            let mut needs_pass = false;
            for job in &jobs {
                if !inner.states.contains_key(&job.id) {
                    needs_pass = needs_pass || self.submit_needs_a_pass(&inner, job);
                    self.enqueue(&mut inner, job);
                    inner.states.insert(job.id, JobState::Queued);
                }
            }
            let job = jobs.into_iter().next().ok_or(StoreError::Corrupt {
                id: 0,
                why: "a submit stored no job".into(),
            })?;
            (job, needs_pass)
        };
        let (job, needs_pass) = job;
        if needs_pass {
            self.wake_scheduler.notify_one();
        }
        self.notify_changed();
        Ok(job)
    }

    /// Whom a submit runs as: the caller, or the user it asks for when the
    /// caller may act for them.
    fn submitter(&self, asked: &str, caller: &Caller) -> Result<String, ServiceError> {
        let asked = asked.trim();
        if asked.is_empty() || asked == caller.user {
            Ok(caller.user.clone())
        } else if self.identity.may_act_for(caller, asked) {
            Ok(asked.to_string())
        } else if caller.admin {
            // An admin manages the queue; running code as another account is root's.
            Err(SpecError::new(
                "user",
                format!(
                    "only the daemon's owner ({}) may submit jobs that run as another user; you are {}",
                    self.identity.owner, caller.user
                ),
            )
            .into())
        } else {
            Ok(caller.user.clone())
        }
    }

    /// The job's directory must be one `user`'s account can enter.
    fn check_cwd_of(&self, user: &str, cwd: &str) -> Result<(), ServiceError> {
        let account = self
            .identity
            .job_account(user)
            .map_err(|why| SpecError::new("user", why))?;
        Ok(check_cwd(cwd, account.as_ref())?)
    }

    pub fn job(&self, id: JobId) -> Result<Job, ServiceError> {
        self.lock()
            .store
            .job(id)?
            .ok_or(ServiceError::NoSuchJob(id))
    }

    pub fn with_store<T>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError>,
    ) -> Result<T, ServiceError> {
        Ok(f(&self.lock().store)?)
    }

    /// A write that touches no job (the dashboard's sessions and login links).
    pub fn with_store_mut<T>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, StoreError>,
    ) -> Result<T, ServiceError> {
        Ok(f(&mut self.lock().store)?)
    }

    fn state_of(&self, inner: &Inner, id: JobId) -> Result<JobState, ServiceError> {
        inner
            .states
            .get(&id)
            .copied()
            .ok_or(ServiceError::NoSuchJob(id))
    }

    fn remove_pending(inner: &mut Inner, id: JobId) -> Option<PendingJob> {
        let key = inner
            .pending
            .iter()
            .find(|(_, p)| p.id == id)
            .map(|(k, _)| *k)?;
        inner.pending.remove(&key)
    }

    pub fn cancel(self: &Arc<Self>, id: JobId, by: &str) -> Result<Job, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        match self.state_of(&inner, id)? {
            JobState::Queued | JobState::Preempted => {
                inner.store.end_queued(
                    &[(id, JobState::Cancelled, format!("cancelled by {by}"))],
                    now,
                )?;
                Self::remove_pending(&mut inner, id);
                inner.states.insert(id, JobState::Cancelled);
                drop(inner);
                self.changed_and_reschedule();
            }
            JobState::Running => {
                drop(inner);
                self.stop(id, StopCause::Cancel { by: by.to_string() });
            }
            ended => {
                return Err(ServiceError::Conflict(format!(
                    "job {id} already ended ({ended}); nothing to cancel"
                )))
            }
        }
        self.job(id)
    }

    /// Running: stop it and queue it again. Ended: queue it again with a fresh retry budget.
    pub fn requeue(self: &Arc<Self>, id: JobId, by: &str) -> Result<Job, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        match self.state_of(&inner, id)? {
            JobState::Running => {
                drop(inner);
                self.stop(id, StopCause::Requeue { by: by.to_string() });
            }
            JobState::Queued | JobState::Preempted => {
                return Err(ServiceError::Conflict(format!(
                    "job {id} is already queued"
                )));
            }
            _ended => {
                inner.store.requeue_ended(id, by, now)?;
                let job = inner.store.job(id)?.ok_or(ServiceError::NoSuchJob(id))?;
                self.enqueue(&mut inner, &job);
                inner.states.insert(id, JobState::Queued);
                drop(inner);
                self.changed_and_reschedule();
            }
        }
        self.job(id)
    }

    /// Holds (`hold: true`) or releases a queued job; `by` is who asks.
    pub fn hold(&self, id: JobId, hold: bool, by: &str) -> Result<Job, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        let state = self.state_of(&inner, id)?;
        if state != JobState::Queued {
            let verb = if hold { "held" } else { "released" };
            return Err(ServiceError::Conflict(format!(
                "job {id} is {state}; only queued jobs can be {verb}"
            )));
        }
        let job = inner.store.job(id)?.ok_or(ServiceError::NoSuchJob(id))?;
        if !hold && job.held_by.is_none() {
            return Err(ServiceError::Conflict(format!("job {id} is not held")));
        }
        if let Some(t) = inner.store.trial_of_job(id)? {
            if job.held_by.as_deref() == Some(gpuq_store::sweeps::pause_hold(t.sweep_id).as_str()) {
                return Err(ServiceError::Conflict(format!(
                    "job {id} is trial {} of sweep {}, paused at its rung: the sweep resumes it if it is promoted (gpuq sweep show {})",
                    t.trial, t.sweep_id, t.sweep_id
                )));
            }
        }
        inner.store.set_held(id, hold.then_some(by), by, now)?;
        if let Some(p) = inner.pending.values_mut().find(|p| p.id == id) {
            p.held = hold;
        }
        drop(inner);
        self.changed_and_reschedule();
        self.job(id)
    }

    /// Stops (or resumes) starting new jobs; running ones continue. Persisted across restarts.
    pub fn set_drained(&self, drained: bool) -> Result<(), ServiceError> {
        let mut inner = self.lock();
        inner
            .store
            .set_meta("drained", if drained { "1" } else { "0" })?;
        inner.drained = drained;
        drop(inner);
        self.changed_and_reschedule();
        Ok(())
    }

    pub fn drained(&self) -> bool {
        self.lock().drained
    }

    fn is_running(&self, id: JobId, attempt: u32) -> bool {
        self.lock()
            .running
            .get(&id)
            .is_some_and(|r| r.attempt == attempt)
    }

    pub fn gpu_status(&self) -> Result<Vec<GpuStatus>, ServiceError> {
        let inner = self.lock();
        let mut out = Vec::new();
        for g in &self.gpus {
            let holder = inner
                .running
                .iter()
                .find(|(_, r)| r.local_gpus().contains(&g.index))
                .map(|(id, _)| *id);
            let job = holder.map(|id| inner.store.job(id)).transpose()?.flatten();
            out.push(GpuStatus {
                node: self.nodes[0].name.clone(),
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_mib: g.memory_mib,
                job: holder,
                user: job.as_ref().map(|j| j.user.clone()),
                job_name: job.and_then(|j| j.name),
                reading: None,
                processes: vec![],
            });
        }
        drop(inner);
        let monitor = self.monitor();
        for status in &mut out {
            status.reading = monitor
                .readings()
                .iter()
                .find(|r| r.index == status.index)
                .cloned();
            status.processes = monitor
                .processes()
                .iter()
                .filter(|p| p.gpu == status.index)
                .cloned()
                .collect();
        }
        Ok(out)
    }

    pub fn token_user(&self, hash: &[u8]) -> Result<Option<(i64, String, Vec<u8>)>, ServiceError> {
        Ok(self.lock().store.token_user(hash)?)
    }

    pub fn create_token(&self, user: &str, hash: &[u8]) -> Result<i64, ServiceError> {
        Ok(self.lock().store.create_token(user, hash, now_ms())?)
    }

    pub fn revoke_token(&self, id: i64) -> Result<bool, ServiceError> {
        Ok(self.lock().store.revoke_token(id, now_ms())?)
    }

    pub fn log_path(&self, id: JobId, attempt: u32) -> std::path::PathBuf {
        self.job_dir(id).log(attempt)
    }

    /// Commits the end of an attempt, decides what becomes of the job, and frees its
    /// resources. When the store cannot take it (a full disk), the attempt stays
    /// running in memory, as the store still shows it, and the commit is tried
    /// again, with a growing pause, until it lands: nothing waits for a restart.
    fn attempt_ended(self: &Arc<Self>, id: JobId, attempt: u32, record: Option<ExitRecord>) {
        // The attempt's last metrics are in its file now; store them before its run's status changes.
        let user = self.lock().running.get(&id).map(|r| r.user.to_string());
        if let Some(user) = user {
            self.ingest_metrics_file(id, &user, true);
        }
        self.try_end_attempt(id, attempt, record, Duration::ZERO);
    }

    fn try_end_attempt(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        record: Option<ExitRecord>,
        waited: Duration,
    ) {
        if let Err(e) = self.end_attempt(id, attempt, record.as_ref()) {
            let pause = (waited * 2).clamp(END_RETRY_FIRST, END_RETRY_MAX);
            if waited.is_zero() {
                tracing::error!(
                    "cannot record the end of job {id} attempt {attempt}: {e}; retrying until it commits"
                );
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::error!(
                    "no runtime to retry the end of job {id}; the restart recovery finishes it"
                );
                return;
            };
            let this = Arc::clone(self);
            runtime.spawn(async move {
                tokio::time::sleep(pause).await;
                this.try_end_attempt(id, attempt, record, pause);
            });
        } else if !waited.is_zero() {
            tracing::info!("recorded the end of job {id} attempt {attempt} after a retry");
        }
    }

    /// One try of `attempt_ended`; an error means nothing changed.
    fn end_attempt(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        record: Option<&ExitRecord>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let succeeded = record.is_some_and(|r| r.exit_code == Some(0) && r.signal.is_none());
        // Only a failure is searched for its cause (CUDA OOM); a success costs no read.
        let log_tail = if succeeded {
            String::new()
        } else {
            self.job_dir(id).log_tail(attempt, LOG_TAIL_BYTES)
        };
        // Exit 75 asks for a requeue: whether it made progress paces the next start.
        let requeued = record.is_some_and(|r| r.exit_code == Some(outcome::EXIT_REQUEUE));
        let progress = requeued.then(|| self.last_progress_ms(id)).flatten();
        // A sweep trial that reached its rung pauses rather than ends.
        let trial = self.trial_of(id);
        let pause = trial
            .filter(|_| succeeded_or_requeue(record))
            .and_then(|t| self.trial_pause(t));
        let failure;
        {
            let mut inner = self.lock();
            let Some(run) = inner.running.get(&id).filter(|r| r.attempt == attempt) else {
                return Ok(());
            };
            let stop = run.stop.clone();
            let run_user = run.user.to_string();
            let (spec, failures) = match &run.spec {
                Some(spec) => (Arc::clone(spec), run.failures),
                None => match inner.store.job(id) {
                    Ok(Some(job)) => (Arc::new(job.spec), job.failures),
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(e),
                },
            };
            let stalled_requeues = if requeued {
                outcome::stalled_requeues(&inner.store.attempts(id)?, attempt, progress)
            } else {
                0
            };
            let out = outcome::classify(&outcome::Ended {
                record,
                stop: stop.as_ref(),
                spec: &spec,
                failures,
                log_tail: &log_tail,
                now,
                began: run.began,
                lost: run.lost.as_deref(),
                stalled_requeues,
                requeue: outcome::RequeuePolicy::of(&self.config.scheduler),
            });
            let mut out = out;
            let mut held_by = None;
            if let Some((hold, why)) = pause
                .clone()
                .filter(|_| matches!(out.next_state, JobState::Succeeded | JobState::Queued))
            {
                out.next_state = JobState::Queued;
                out.reason = why;
                out.event = "paused";
                out.eligible_at = None;
                held_by = Some(hold);
            }
            let gpu_usage = Self::take_usage(&inner, &mut self.monitor(), id, now);
            let end = AttemptEnd {
                job: id,
                attempt,
                exit_code: record.and_then(|r| r.exit_code),
                signal: record.and_then(|r| r.signal),
                next_state: out.next_state,
                reason: out.reason,
                failures: out.failures,
                eligible_at: out.eligible_at,
                event: out.event.to_string(),
                gpu_usage,
                host_usage: outcome::host_usage(record),
                held_by,
            };
            // On failure it stays running in memory: freeing GPUs the store still
            // shows as held would let two jobs share them.
            inner.store.finish_attempt(&end, now)?;
            if let Some(run) = inner.running.remove(&id) {
                let gpus = run.placement.gpu_count() as usize;
                self.account(&mut inner, &run.user, gpus, run.started_at, now);
            }
            inner.states.insert(id, out.next_state);
            let alerts = spec.alerts_on_failure();
            failure = (alerts && (out.oom || out.next_state == JobState::Failed)).then(|| {
                (
                    run_user.clone(),
                    out.oom,
                    out.next_state == JobState::Failed,
                    end.reason.clone(),
                )
            });
            if out.next_state == JobState::Preempted {
                if let Err(e) = inner.store.requeue_preempted(id, now) {
                    tracing::error!("cannot requeue preempted job {id}: {e}");
                }
                inner.states.insert(id, JobState::Queued);
            }
            if matches!(out.next_state, JobState::Queued | JobState::Preempted) {
                if let Ok(Some(job)) = inner.store.job(id) {
                    self.enqueue(&mut inner, &job);
                }
            }
        }
        if let Some(t) = trial {
            self.advance_sweep(t.sweep_id);
        }
        if let Some((user, oom, is_final, reason)) = failure {
            self.alert_failure(id, &user, oom, is_final, &reason);
        }
        self.changed_and_reschedule();
        Ok(())
    }
}

/// The job's working directory must be one its user can enter; for a job of
/// another account that is checked with that account's rights, so the answer
/// never tells whether a path the user cannot see exists.
fn check_cwd(cwd: &str, account: Option<&gpuq_exec::RunAs>) -> Result<(), SpecError> {
    let path = std::path::Path::new(cwd);
    if !path.is_absolute() {
        return Err(SpecError::new(
            "cwd",
            format!("{cwd:?} is not an absolute path; give the directory from /"),
        ));
    }
    let entered = match account {
        Some(account) => gpuq_exec::safe_fs::can_enter_as(path, account),
        None if path.is_dir() => Ok(()),
        None => Err(std::io::Error::from_raw_os_error(libc::ENOTDIR)),
    };
    entered.map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EACCES) => "permission denied".to_string(),
            Some(libc::ENOENT | libc::ENOTDIR) => "not a directory on this node".to_string(),
            _ => e.to_string(),
        };
        SpecError::new("cwd", format!("cannot enter {cwd}: {why}"))
    })
}

/// An attempt that exited 0, or 75 (requeue me): a trial at its rung does either.
fn succeeded_or_requeue(record: Option<&ExitRecord>) -> bool {
    record.is_some_and(|r| matches!(r.exit_code, Some(0 | 75)) && r.signal.is_none())
}

/// The running set as the scheduler core sees it (cores and memory as the
/// defaults `d` make of each spec: a re-attached job counts as it launched).
fn running_snapshot(inner: &Inner, d: &gpuq_core::ResourceDefaults) -> Vec<RunningJob> {
    inner
        .running
        .iter()
        .map(|(id, r)| RunningJob {
            id: *id,
            user: r.user.clone(),
            project: r.project.clone(),
            placement: r.placement.clone(),
            ends_by: r.ends_by,
            priority: r.priority,
            preemptible: r.preemptible,
            stopping: r.stop.is_some(),
            group: r.group,
            resources: r
                .spec
                .as_deref()
                .map(|s| gpuq_core::effective(s, d))
                .unwrap_or_default(),
        })
        .collect()
}

fn dependency_state(states: &HashMap<JobId, JobState>, dep: JobId) -> DependencyState {
    match states.get(&dep) {
        None => DependencyState::Missing,
        Some(JobState::Succeeded) => DependencyState::Succeeded,
        Some(s) if s.is_terminal() => DependencyState::Ended(s.to_string()),
        Some(_) => DependencyState::Pending,
    }
}

fn pending_of(job: &Job, d: &gpuq_core::ResourceDefaults) -> PendingJob {
    PendingJob {
        id: job.id,
        user: Arc::from(job.user.as_str()),
        project: job.project.as_deref().map(Arc::from),
        priority: job.priority,
        submitted_at: job.submitted_at,
        gpus: job.gpus_requested,
        nodes: job.spec.nodes,
        time_limit_ms: job.spec.time_limit.map(|t| t.as_millis()),
        after: job.spec.after.clone(),
        held: job.held_by.is_some(),
        eligible_at: job.eligible_at,
        gpu_type: job.spec.gpu_type.as_deref().map(Arc::from),
        gpu_mem_mib: job.spec.gpu_mem.map(|m| m.mib()),
        group: arrays::group_of(job),
        waits_on: None,
        resources: gpuq_core::effective(&job.spec, d),
    }
}

/// A pending job with no constraints, for probing what nodes offer.
fn pending_probe() -> PendingJob {
    PendingJob {
        id: 0,
        user: Arc::from(""),
        project: None,
        priority: gpuq_core::Priority::Normal,
        submitted_at: 0,
        gpus: 0,
        nodes: Some(1),
        time_limit_ms: None,
        after: Vec::new(),
        held: false,
        eligible_at: None,
        gpu_type: None,
        gpu_mem_mib: None,
        group: None,
        waits_on: None,
        resources: gpuq_core::JobResources::default(),
    }
}
