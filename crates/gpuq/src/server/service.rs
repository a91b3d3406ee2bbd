//! Commands and queries over the store, the in-memory queue and the executor.
//!
//! Every state change is committed to the store (with its event row) before its
//! side effect runs. The scheduler pass runs whenever something changed (submit,
//! exit, cancel, GPU freed), with bursts coalesced by a `Notify`: no polling
//! loop decides when a job starts.

use crate::home::now_ms;
use gpuq_api::{GpuStatus, SubmitRequest};
use gpuq_core::scheduler::QueueKey;
use gpuq_core::{
    schedule, Decision, DependencyState, Job, JobId, JobSpec, JobState, Millis, Node, PendingJob,
    RunningJob, ScheduleInput, SpecError,
};
use gpuq_exec::{ExitRecord, LaunchRequest, LocalExecutor};
use gpuq_gpu::GpuInfo;
use gpuq_store::{AttemptEnd, NewJob, StartRecord, Store, StoreError};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    BadSpec(#[from] SpecError),
    #[error("job {0} does not exist")]
    NoSuchJob(JobId),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the daemon is stopping an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StopCause {
    Cancel,
    TimeLimit(String),
}

struct RunningAttempt {
    attempt: u32,
    node: usize,
    gpus: Vec<u32>,
    ends_by: Option<Millis>,
    retries: u32,
    stop: Option<StopCause>,
}

struct Inner {
    store: Store,
    pending: BTreeMap<QueueKey, PendingJob>,
    running: HashMap<JobId, RunningAttempt>,
    /// Every job's state, for dependency lookups.
    states: HashMap<JobId, JobState>,
}

pub struct Service {
    inner: Mutex<Inner>,
    /// Bumped after every committed change; long polls (wait, log -f) watch it.
    changed: watch::Sender<u64>,
    wake_scheduler: Notify,
    executor: LocalExecutor,
    nodes: Vec<Node>,
    gpus: Vec<GpuInfo>,
}

impl Service {
    pub fn new(
        store: Store,
        executor: LocalExecutor,
        node_name: String,
        gpus: Vec<GpuInfo>,
        slots: u32,
    ) -> Result<Arc<Self>, StoreError> {
        let states: HashMap<JobId, JobState> = store.all_states()?.into_iter().collect();
        let mut pending = BTreeMap::new();
        for job in store.list(&gpuq_store::ListFilter {
            states: vec![JobState::Queued],
            limit: None,
        })? {
            let p = pending_of(&job);
            pending.insert(p.queue_key(), p);
        }
        let nodes = vec![Node {
            name: node_name,
            gpus: gpus.iter().map(|g| g.index).collect(),
            slots,
        }];
        let (changed, _) = watch::channel(0);
        Ok(Arc::new(Self {
            inner: Mutex::new(Inner {
                store,
                pending,
                running: HashMap::new(),
                states,
            }),
            changed,
            wake_scheduler: Notify::new(),
            executor,
            nodes,
            gpus,
        }))
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

    fn largest_node_gpus(&self) -> u32 {
        self.nodes
            .iter()
            .map(|n| n.gpus.len() as u32)
            .max()
            .unwrap_or(0)
    }

    pub fn submit(&self, req: SubmitRequest) -> Result<Job, ServiceError> {
        let spec = req.spec;
        spec.validate()?;
        let largest = self.largest_node_gpus();
        if spec.gpus > largest {
            return Err(SpecError::new(
                "gpus",
                format!(
                    "job asks for {} GPUs; the largest node has {largest}",
                    spec.gpus
                ),
            )
            .into());
        }
        let cwd = spec.cwd.clone().unwrap_or(req.cwd);
        if !std::path::Path::new(&cwd).is_dir() {
            return Err(
                SpecError::new("cwd", format!("{cwd} is not a directory on this node")).into(),
            );
        }
        let mut env = req.env;
        env.extend(spec.env.clone());
        let user = if req.user.trim().is_empty() {
            crate::home::current_user()
        } else {
            req.user
        };
        let now = now_ms();
        let job = {
            let mut inner = self.lock();
            for dep in &spec.after {
                if !inner.states.contains_key(dep) {
                    return Err(SpecError::new("after", format!("job {dep} does not exist")).into());
                }
            }
            let job = inner.store.submit(
                &NewJob {
                    spec,
                    user,
                    cwd,
                    env,
                },
                now,
            )?;
            let p = pending_of(&job);
            inner.pending.insert(p.queue_key(), p);
            inner.states.insert(job.id, JobState::Queued);
            job
        };
        self.notify_changed();
        self.wake_scheduler.notify_one();
        Ok(job)
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

    pub fn cancel(self: &Arc<Self>, id: JobId) -> Result<Job, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        let state = *inner.states.get(&id).ok_or(ServiceError::NoSuchJob(id))?;
        match state {
            JobState::Queued | JobState::Preempted => {
                inner
                    .store
                    .end_queued(&[(id, JobState::Cancelled, "cancelled".into())], now)?;
                inner.pending.retain(|_, p| p.id != id);
                inner.states.insert(id, JobState::Cancelled);
                drop(inner);
                self.notify_changed();
                self.wake_scheduler.notify_one();
            }
            JobState::Running => {
                let already = inner.running.get(&id).is_some_and(|r| r.stop.is_some());
                if !already {
                    inner.store.record_event(
                        id,
                        "cancel_requested",
                        "SIGTERM sent to the process group",
                        now,
                    )?;
                    drop(inner);
                    self.stop(id, StopCause::Cancel);
                } else {
                    drop(inner);
                }
            }
            ended => {
                return Err(ServiceError::Conflict(format!(
                    "job {id} already ended ({ended}); nothing to cancel"
                )))
            }
        }
        self.job(id)
    }

    /// The stop protocol: SIGTERM to the job's process group, then SIGKILL after the grace period.
    fn stop(self: &Arc<Self>, id: JobId, cause: StopCause) {
        let (attempt, grace) = {
            let mut inner = self.lock();
            let Some(run) = inner.running.get_mut(&id) else {
                return;
            };
            if run.stop.is_some() {
                return;
            }
            run.stop = Some(cause);
            let attempt = run.attempt;
            let grace = inner
                .store
                .job(id)
                .ok()
                .flatten()
                .and_then(|j| j.spec.grace)
                .map(|g| g.as_std())
                .unwrap_or(DEFAULT_GRACE);
            (attempt, grace)
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            // The supervisor writes the process group id right after the spawn; a stop
            // decided in that instant waits for it.
            for _ in 0..100 {
                if this
                    .executor
                    .signal(id, attempt, libc::SIGTERM)
                    .unwrap_or(false)
                    || !this.is_running(id, attempt)
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(grace).await;
            if this.is_running(id, attempt) {
                let _ = this.executor.signal(id, attempt, libc::SIGKILL);
            }
        });
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
                .find(|(_, r)| r.node == 0 && r.gpus.contains(&g.index))
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
            });
        }
        Ok(out)
    }

    /// Runs the scheduler whenever woken; never returns.
    pub async fn scheduler_loop(self: Arc<Self>) {
        loop {
            self.wake_scheduler.notified().await;
            // Dependency failures can unblock (fail) further dependents: repeat until quiet.
            while self.schedule_pass() {}
        }
    }

    /// One pass: decide, commit, then launch. Returns true when jobs were failed
    /// (their dependents need another look).
    fn schedule_pass(self: &Arc<Self>) -> bool {
        let now = now_ms();
        let (launches, failed_any) = {
            let mut inner = self.lock();
            if inner.pending.is_empty() {
                return false;
            }
            let running: Vec<RunningJob> = inner
                .running
                .iter()
                .map(|(id, r)| RunningJob {
                    id: *id,
                    node: r.node,
                    gpus: r.gpus.clone(),
                    ends_by: r.ends_by,
                })
                .collect();
            let states = &inner.states;
            let lookup = |dep: JobId| match states.get(&dep) {
                None => DependencyState::Missing,
                Some(JobState::Succeeded) => DependencyState::Succeeded,
                Some(s) if s.is_terminal() => DependencyState::Ended(s.to_string()),
                Some(_) => DependencyState::Pending,
            };
            let input = ScheduleInput {
                now,
                nodes: &self.nodes,
                running: &running,
                dependency: &lookup,
                drained: false,
            };
            let decisions = schedule(&input, inner.pending.values());
            if decisions.is_empty() {
                return false;
            }
            let mut starts = Vec::new();
            let mut fails = Vec::new();
            for d in decisions {
                match d {
                    Decision::Start { job, node, gpus } => starts.push(StartRecord {
                        job,
                        node: self.nodes[node].name.clone(),
                        gpus,
                    }),
                    Decision::Fail { job, reason } => fails.push((job, JobState::Failed, reason)),
                }
            }
            if let Err(e) = inner.store.end_queued(&fails, now) {
                tracing::error!("cannot record failed jobs: {e}");
                return false;
            }
            let attempts = match inner.store.start(&starts, now) {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!("cannot record job starts: {e}");
                    return false;
                }
            };
            for (id, _, _) in &fails {
                inner.pending.retain(|_, p| p.id != *id);
                inner.states.insert(*id, JobState::Failed);
            }
            let mut launches = Vec::with_capacity(starts.len());
            for (start, attempt) in starts.into_iter().zip(attempts) {
                let key = inner
                    .pending
                    .iter()
                    .find(|(_, p)| p.id == start.job)
                    .map(|(k, _)| *k);
                let Some(p) = key.and_then(|k| inner.pending.remove(&k)) else {
                    continue;
                };
                let ends_by = p.time_limit_ms.map(|t| now + t as i64);
                inner.states.insert(start.job, JobState::Running);
                inner.running.insert(
                    start.job,
                    RunningAttempt {
                        attempt,
                        node: 0,
                        gpus: start.gpus.clone(),
                        ends_by,
                        retries: 0,
                        stop: None,
                    },
                );
                launches.push((start.job, attempt, start.gpus, p.time_limit_ms));
            }
            (launches, !fails.is_empty())
        };
        self.notify_changed();
        for (job, attempt, gpus, time_limit) in launches {
            self.launch(job, attempt, &gpus, time_limit);
        }
        failed_any
    }

    fn launch(self: &Arc<Self>, id: JobId, attempt: u32, gpus: &[u32], time_limit_ms: Option<u64>) {
        let prepared = {
            let mut inner = self.lock();
            inner
                .store
                .launch_info(id)
                .map_err(|e| e.to_string())
                .and_then(|info| {
                    if let Some(r) = inner.running.get_mut(&id) {
                        r.retries = info.spec.retries;
                    }
                    let req = LaunchRequest {
                        job: id,
                        attempt,
                        gpus,
                        argv: &info.argv,
                        cwd: &info.cwd,
                        env: &info.env,
                    };
                    self.executor.prepare(&req).map_err(|e| e.to_string())
                })
        };
        let child = prepared.and_then(|cmd| {
            tokio::process::Command::from(cmd)
                .spawn()
                .map_err(|e| e.to_string())
        });
        let mut child = match child {
            Ok(c) => c,
            Err(why) => {
                tracing::warn!("job {id} attempt {attempt} could not start: {why}");
                let record = ExitRecord {
                    exit_code: None,
                    signal: None,
                    spawn_error: Some(why),
                    ended_at_ms: now_ms(),
                };
                self.attempt_ended(id, attempt, Some(record));
                return;
            }
        };
        if let Some(limit) = time_limit_ms {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(limit)).await;
                if this.is_running(id, attempt) {
                    let text = gpuq_core::DurationSpec::from_millis(limit).to_string();
                    let _ = this.lock().store.record_event(
                        id,
                        "time_limit",
                        &format!("time limit {text} reached"),
                        now_ms(),
                    );
                    this.stop(id, StopCause::TimeLimit(text));
                }
            });
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _ = child.wait().await;
            let record = ExitRecord::read(&this.executor.job_dir(id), attempt);
            this.attempt_ended(id, attempt, record);
        });
    }

    /// Commits the end of an attempt and frees its resources.
    fn attempt_ended(&self, id: JobId, attempt: u32, record: Option<ExitRecord>) {
        let now = now_ms();
        {
            let mut inner = self.lock();
            let Some(run) = inner.running.get(&id).filter(|r| r.attempt == attempt) else {
                return;
            };
            let stop = run.stop.clone();
            let retries = run.retries;
            let (exit_code, signal, how) = match &record {
                Some(r) => (r.exit_code, r.signal, r.describe()),
                None => (
                    None,
                    None,
                    "the supervisor vanished without recording an exit status".to_string(),
                ),
            };
            let (next_state, reason) = match (&stop, exit_code) {
                (Some(StopCause::Cancel), _) => (JobState::Cancelled, format!("cancelled ({how})")),
                (Some(StopCause::TimeLimit(limit)), _) => (
                    JobState::Failed,
                    format!("time limit {limit} reached ({how})"),
                ),
                (None, Some(0)) if signal.is_none() => (JobState::Succeeded, how),
                (None, _) if attempt <= retries => (
                    JobState::Queued,
                    format!("{how}; retry {attempt} of {retries}"),
                ),
                (None, _) => (JobState::Failed, how),
            };
            let end = AttemptEnd {
                job: id,
                attempt,
                exit_code,
                signal,
                next_state,
                reason,
            };
            if let Err(e) = inner.store.finish_attempt(&end, now) {
                // Leave it running in memory: freeing GPUs the store still shows as held
                // would let two jobs share them. The restart recovery finishes it.
                tracing::error!("cannot record the end of job {id} attempt {attempt}: {e}");
                return;
            }
            inner.running.remove(&id);
            inner.states.insert(id, next_state);
            if next_state == JobState::Queued {
                if let Ok(Some(job)) = inner.store.job(id) {
                    let p = pending_of(&job);
                    inner.pending.insert(p.queue_key(), p);
                }
            }
        }
        self.notify_changed();
        self.wake_scheduler.notify_one();
    }

    /// After a restart: attempts recorded as running get their real end from the
    /// exit record, or are watched until they write one.
    pub fn recover(self: &Arc<Self>) -> Result<(), StoreError> {
        let running = self.lock().store.list(&gpuq_store::ListFilter {
            states: vec![JobState::Running],
            limit: None,
        })?;
        for job in running {
            let retries = job.spec.retries;
            let ends_by = job
                .spec
                .time_limit
                .zip(job.started_at)
                .map(|(t, s)| s + t.as_millis() as i64);
            self.lock().running.insert(
                job.id,
                RunningAttempt {
                    attempt: job.attempt,
                    node: 0,
                    gpus: job.gpus.clone(),
                    ends_by,
                    retries,
                    stop: None,
                },
            );
            let this = Arc::clone(self);
            let dir = self.executor.job_dir(job.id);
            let attempt = job.attempt;
            tokio::spawn(async move {
                // Not our child any more: watch for the exit record the supervisor writes.
                loop {
                    if let Some(record) = ExitRecord::read(&dir, attempt) {
                        this.attempt_ended(job.id, attempt, Some(record));
                        break;
                    }
                    let alive = this.executor.signal(job.id, attempt, 0).unwrap_or(false);
                    if !alive && ExitRecord::read(&dir, attempt).is_none() {
                        this.attempt_ended(job.id, attempt, None);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            });
        }
        self.wake_scheduler.notify_one();
        Ok(())
    }
}

fn pending_of(job: &Job) -> PendingJob {
    let spec: &JobSpec = &job.spec;
    PendingJob {
        id: job.id,
        priority: job.priority,
        submitted_at: job.submitted_at,
        gpus: job.gpus_requested,
        time_limit_ms: spec.time_limit.map(|t| t.as_millis()),
        after: spec.after.clone(),
    }
}

impl Service {
    pub fn log_path(&self, id: JobId, attempt: u32) -> std::path::PathBuf {
        self.executor.job_dir(id).log(attempt)
    }
}
