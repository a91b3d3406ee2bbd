//! Cached Python environments and container jobs.
//!
//! A job whose spec names a Python environment waits in the queue (its
//! `waits_on` set) until the environment of its key is ready; one build per key
//! however many jobs ask, run as the job's user by `gpuq __env-build`. A failed
//! build fails the jobs waiting on it with uv's message; a build cut short (the
//! daemon or the builder killed) is never used: only the store's `ready` makes
//! an environment usable, and a new build starts in a fresh directory. Past the
//! size cap, the least recently used environments no queued or running job
//! needs are removed, by their owner.

use super::envs_inputs::{build_env, hermetic_env, root_alone};
use super::{Inner, Service};
use gpuq_api::home::now_ms;
use gpuq_api::repro::RuntimeEnvironment;
use gpuq_core::pyenv::{self, CachedEnv};
use gpuq_core::{Job, JobId, JobSpec, JobState, Millis};
use gpuq_exec::container::{self, ContainerJob, Podman};
use gpuq_exec::envbuild::{BuildRequest, BuildResult, BuildState, EnvCache};
use gpuq_store::envs::{EnvBuilt, EnvRow, ENV_BUILDING, ENV_READY};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// The attempt whose software `add_env_launch` sets up.
pub(super) struct EnvLaunch<'a> {
    pub id: JobId,
    pub attempt: u32,
    pub spec: &'a JobSpec,
    pub cwd: &'a str,
    /// Its GPUs on its (first) node.
    pub gpus: &'a [u32],
    /// It runs as a user other than root (a container then maps that uid inside).
    pub rootless: bool,
}

/// A build this daemon watches.
#[derive(Debug, Clone)]
pub(super) struct Build {
    started_at: Millis,
    /// The builder's process group (`None`: found running after a restart).
    pgid: Option<i32>,
}

/// What the service keeps about environments (under the scheduler's lock).
#[derive(Debug, Default)]
pub(super) struct EnvJobs {
    /// The environment key of each queued or running job that has one.
    keys: BTreeMap<JobId, String>,
    /// Keys a queued job waits for, and the first job that asked (its user builds it).
    wanted: BTreeMap<String, JobId>,
    building: BTreeMap<String, Build>,
    /// The image of each queued or running container job (for its runtime record).
    images: BTreeMap<JobId, String>,
}

fn describe_source(spec: &JobSpec) -> String {
    let Some(py) = &spec.python else {
        return String::new();
    };
    let mut s = match (&py.requirements, &py.project) {
        (Some(r), _) => r.clone(),
        (None, Some(p)) => format!("project {p}"),
        _ => String::new(),
    };
    if let Some(v) = &py.version {
        s.push_str(&format!(", Python {v}"));
    }
    if spec.setup.is_some() {
        s.push_str(", with setup");
    }
    s
}

/// The cache of a daemon with this config and data directory (made once, at start).
pub(super) fn env_cache_for(config: &crate::config::Config, home: &std::path::Path) -> EnvCache {
    let root = config
        .envs
        .dir
        .as_ref()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| home.join("envs"));
    let exe = std::env::current_exe().unwrap_or_else(|_| "gpuq".into());
    EnvCache::new(root, exe)
}

impl Service {
    pub(super) fn env_cache(&self) -> &EnvCache {
        &self.env_cache
    }

    /// The key of a job's environment: private to the account it runs as,
    /// unless the cache is lab-wide.
    pub(super) fn env_key_of(&self, job: &Job) -> Option<String> {
        job.spec.python.as_ref()?;
        let owner = if self.lab_wide(&job.spec) {
            None
        } else {
            Some(match self.run_as(&job.user) {
                Ok(Some(a)) => a.uid,
                // SAFETY: getuid cannot fail.
                _ => unsafe { libc::getuid() },
            })
        };
        let platform = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
        // A setup script runs in the job's directory: that directory is an input too.
        let mut spec = job.spec.clone();
        if spec.setup.is_some() {
            spec.setup = Some(format!("{}\0{}", spec.setup.unwrap_or_default(), job.cwd));
        }
        pyenv::env_key(&spec, &platform, owner)
    }

    /// The environment of `spec` is one for the whole lab (keyed without its
    /// owner, built hermetically): the cache is lab-wide and the build reads
    /// nothing its key does not hold but files root alone can change. A build
    /// that depends on its builder (a `setup` script, a relative path, a file
    /// of theirs) gets an environment keyed to them, so only they use it.
    fn lab_wide(&self, spec: &JobSpec) -> bool {
        self.config.envs.shared
            && pyenv::outside_inputs(spec).is_ok_and(|paths| paths.iter().all(|p| root_alone(p)))
    }

    /// The build of `spec` runs hermetically (see `BuildRequest::hermetic`):
    /// every lab-wide one, whatever a path's owner does between submit and
    /// build (so also one keyed to its owner only for an absolute path of theirs).
    fn hermetic(&self, spec: &JobSpec) -> bool {
        self.config.envs.shared && pyenv::outside_inputs(spec).is_ok()
    }

    /// Puts a queued job in the scheduler's queue; one whose environment is
    /// not ready waits for it (and its build is asked for).
    pub(super) fn enqueue(&self, inner: &mut Inner, job: &Job) {
        let mut p = super::pending_of(job, &self.resource_defaults());
        p.waits_on = self.env_gate(inner, job);
        inner.pending.insert(p.queue_key(), p);
    }

    fn env_gate(&self, inner: &mut Inner, job: &Job) -> Option<Arc<str>> {
        if let Some(image) = &job.spec.image {
            inner.envs.images.insert(job.id, image.clone());
        }
        let key = self.env_key_of(job)?;
        inner.envs.keys.insert(job.id, key.clone());
        let ready = matches!(inner.store.env(&key), Ok(Some(row)) if row.state == ENV_READY);
        if ready && self.env_cache().dir(&key).is_dir() {
            return None;
        }
        inner.envs.wanted.entry(key.clone()).or_insert(job.id);
        self.wake_envs.notify_one();
        Some(Arc::from(format!(
            "its Python environment {key} is being built (`gpuq envs` shows it; `gpuq envs log {key}` its log)"
        )))
    }

    /// Starts wanted builds and notices ended ones; woken by submits and
    /// builders' exits, and once a second (builds found after a restart,
    /// timeouts).
    pub async fn envs_loop(self: Arc<Self>) {
        loop {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.wake_envs.notified()).await;
            let this = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || this.env_tick()).await;
        }
    }

    fn env_tick(self: &Arc<Self>) {
        let cache = self.env_cache();
        let now = now_ms();
        let timeout = self.config.envs.build_timeout.as_millis() as i64;
        let building: Vec<(String, Build)> = {
            let inner = self.lock();
            inner
                .envs
                .building
                .iter()
                .map(|(k, b)| (k.clone(), b.clone()))
                .collect()
        };
        for (key, build) in building {
            match cache.state(&key) {
                BuildState::Running => {
                    if let (Some(pgid), true) = (build.pgid, now - build.started_at > timeout) {
                        tracing::warn!(
                            "the build of environment {key} ran past its timeout: stopping it"
                        );
                        // SAFETY: the builder's own process group (pgid > 1: it was our child).
                        if pgid > 1 {
                            unsafe { libc::killpg(pgid, libc::SIGKILL) };
                        }
                        self.env_build_ended(
                            &key,
                            Some(format!(
                                "the build ran longer than envs.build_timeout ({})",
                                self.config.envs.build_timeout
                            )),
                        );
                    }
                }
                _ => self.env_build_ended(&key, None),
            }
        }
        let wanted: Vec<(String, JobId)> = {
            let mut inner = self.lock();
            let inner = &mut *inner;
            // Jobs that ended (cancelled while waiting) no longer want anything.
            let states = &inner.states;
            let keys = &inner.envs.keys;
            inner.envs.wanted.retain(|key, first| {
                let alive = |id: &JobId| states.get(id).is_some_and(|s| !s.is_terminal());
                if alive(first) {
                    return true;
                }
                match keys.iter().find(|(id, k)| *k == key && alive(id)) {
                    Some((id, _)) => {
                        *first = *id;
                        true
                    }
                    None => false,
                }
            });
            inner
                .envs
                .wanted
                .iter()
                .filter(|(k, _)| !inner.envs.building.contains_key(*k))
                .map(|(k, j)| (k.clone(), *j))
                .collect()
        };
        for (key, job) in wanted {
            let busy = self.lock().envs.building.len() as u32;
            if busy >= self.config.envs.max_parallel_builds.max(1) {
                break;
            }
            // A build of a daemon that died may still run: wait for it.
            if cache.state(&key) == BuildState::Running {
                self.lock().envs.building.insert(
                    key,
                    Build {
                        started_at: now,
                        pgid: None,
                    },
                );
                continue;
            }
            if let Err(why) = self.start_env_build(&key, job, now) {
                tracing::warn!("environment {key}: {why}");
                self.fail_waiting(
                    &key,
                    &format!("its Python environment {key} could not be built: {why}"),
                );
            }
        }
    }

    fn start_env_build(self: &Arc<Self>, key: &str, job: JobId, now: Millis) -> Result<(), String> {
        let (info, user) = {
            let inner = self.lock();
            let info = inner.store.launch_info(job).map_err(|e| e.to_string())?;
            let user = inner
                .store
                .job(job)
                .ok()
                .flatten()
                .map(|j| j.user)
                .unwrap_or_default();
            (info, user)
        };
        let run_as = self.run_as(&user)?;
        let py = info.spec.python.clone().unwrap_or_default();
        let inputs = py.inputs.clone().unwrap_or_default();
        let hermetic = self.hermetic(&info.spec);
        let uv = match self.config.envs.uv.clone() {
            Some(uv) if uv.contains('/') => uv,
            name => {
                let name = name.unwrap_or_else(|| "uv".into());
                match which(&name) {
                    Some(uv) => uv,
                    // A lab-wide build never runs a uv its submitter chose.
                    None if hermetic => {
                        return Err(format!(
                            "there is no `{name}` on the daemon's PATH, and a lab-wide environment \
                             is built only with the daemon's uv: name it in gpuq.toml \
                             (`uv = \"/path/to/uv\"` under [envs])"
                        ))
                    }
                    None => name,
                }
            }
        };
        let req = BuildRequest {
            key: key.to_string(),
            dir: Default::default(),
            kind: match py.kind() {
                pyenv::EnvKind::Project => "project".into(),
                pyenv::EnvKind::Requirements => "requirements".into(),
            },
            requirements_txt: inputs.requirements_txt,
            pyproject_toml: inputs.pyproject_toml,
            uv_lock: inputs.uv_lock,
            version: py.version,
            setup: info.spec.setup.clone(),
            cwd: info.cwd.clone(),
            uv: uv.into(),
            env: if hermetic {
                hermetic_env()
            } else {
                build_env(&info.env)
            },
            uid: None,
            gid: None,
            groups: Vec::new(),
            shared: self.config.envs.shared,
            hermetic,
        };
        {
            let mut inner = self.lock();
            inner
                .store
                .begin_env_build(
                    key,
                    &user,
                    run_as.as_ref().map(|a| a.uid),
                    &describe_source(&info.spec),
                    now,
                )
                .map_err(|e| e.to_string())?;
        }
        let cache = self.env_cache();
        let mut cmd = cache
            .prepare(req, run_as.as_ref(), now)
            .map_err(|e| format!("cannot prepare {}: {e}", cache.root().display()))?;
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the builder: {e}"))?;
        tracing::info!("building environment {key} for job {job} (as {user})");
        self.lock().envs.building.insert(
            key.to_string(),
            Build {
                started_at: now,
                pgid: Some(child.id() as i32),
            },
        );
        self.notify_changed();
        let this = Arc::clone(self);
        std::thread::spawn(move || {
            let _ = child.wait();
            this.wake_envs.notify_one();
        });
        Ok(())
    }

    /// A build is over (or was stopped: `forced` says why): record it, then
    /// start or fail the jobs waiting on it.
    fn env_build_ended(self: &Arc<Self>, key: &str, forced: Option<String>) {
        let cache = self.env_cache();
        let now = now_ms();
        let outcome = match forced {
            Some(why) => BuildState::Finished(BuildResult::Failed { cause: why }),
            None => cache.state(key),
        };
        let built = match outcome {
            BuildState::Running => return,
            BuildState::Finished(BuildResult::Ready {
                python,
                packages,
                size_bytes,
            }) => EnvBuilt::Ready {
                python,
                packages,
                size_bytes,
            },
            BuildState::Finished(BuildResult::Failed { cause }) => EnvBuilt::Failed(cause),
            BuildState::Interrupted => {
                EnvBuilt::Failed("the build was cut short (its builder was killed)".into())
            }
        };
        let built = match built {
            EnvBuilt::Ready { .. } if self.config.envs.shared => self.seal_env(key, now, built),
            other => other,
        };
        let interrupted = matches!(&built, EnvBuilt::Failed(c) if c.contains("cut short"));
        {
            let mut inner = self.lock();
            inner.envs.building.remove(key);
            if let Err(e) = inner.store.finish_env_build(key, &built, now) {
                tracing::error!("cannot record the build of environment {key}: {e}");
                return;
            }
        }
        cache.clear_ticket(key);
        match built {
            EnvBuilt::Ready { .. } => {
                tracing::info!("environment {key} is ready");
                let mut inner = self.lock();
                let inner = &mut *inner;
                inner.envs.wanted.remove(key);
                let keys = &inner.envs.keys;
                for p in inner.pending.values_mut() {
                    if keys.get(&p.id).map(String::as_str) == Some(key) {
                        p.waits_on = None;
                    }
                }
            }
            EnvBuilt::Failed(cause) => {
                self.remove_env_dir(key, now);
                let builds = self
                    .lock()
                    .store
                    .env(key)
                    .ok()
                    .flatten()
                    .map_or(0, |r| r.builds);
                if interrupted && builds < 3 {
                    // Cut short by a crash: the waiting jobs get a fresh build.
                    tracing::warn!(
                        "the build of environment {key} was cut short: building it again"
                    );
                } else {
                    let log = cache.log(key);
                    self.fail_waiting(
                        key,
                        &format!(
                            "its Python environment {key} failed to build: {cause} (the whole log: gpuq envs log {key}; {})",
                            log.display()
                        ),
                    );
                }
            }
        }
        self.changed_and_reschedule();
        self.evict_envs();
    }

    /// Fails every queued job that waits for `key`.
    fn fail_waiting(self: &Arc<Self>, key: &str, reason: &str) {
        let now = now_ms();
        let mut inner = self.lock();
        inner.envs.wanted.remove(key);
        let waiting: Vec<JobId> = inner
            .pending
            .values()
            .filter(|p| {
                p.waits_on.is_some() && inner.envs.keys.get(&p.id).map(String::as_str) == Some(key)
            })
            .map(|p| p.id)
            .collect();
        let ends: Vec<(JobId, JobState, String)> = waiting
            .iter()
            .map(|id| (*id, JobState::Failed, reason.to_string()))
            .collect();
        if let Err(e) = inner.store.end_queued(&ends, now) {
            tracing::error!("cannot fail the jobs waiting for environment {key}: {e}");
            return;
        }
        for id in waiting {
            Self::remove_pending(&mut inner, id);
            inner.states.insert(id, JobState::Failed);
            inner.envs.keys.remove(&id);
        }
        drop(inner);
        self.changed_and_reschedule();
    }

    /// A lab-wide environment, just built, made immutable (`EnvCache::seal`):
    /// ready only once nobody but the daemon's account can change it.
    fn seal_env(&self, key: &str, now: Millis, built: EnvBuilt) -> EnvBuilt {
        let cap = self.config.envs.max_size.mib().saturating_mul(1 << 20);
        let seal = self.env_cache().seal(key, now, cap);
        if let Some(path) = seal.retired {
            let owner = self.lock().store.env(key).ok().flatten().map(|r| r.user);
            self.remove_as(&path, owner.as_deref());
        }
        match seal.result {
            Ok(()) => built,
            Err(why) => {
                tracing::warn!("environment {key} could not be sealed: {why}");
                EnvBuilt::Failed(format!("it cannot be shared read-only: {why}"))
            }
        }
    }

    /// Moves an environment's directory out of the cache and has its owner
    /// remove it (a sealed one is the daemon's own).
    fn remove_env_dir(&self, key: &str, now: Millis) {
        let cache = self.env_cache();
        let owner = if cache.is_sealed(key) {
            None
        } else {
            self.lock().store.env(key).ok().flatten().map(|r| r.user)
        };
        match cache.retire(key, now) {
            Ok(Some(path)) => self.remove_as(&path, owner.as_deref()),
            Ok(None) => {}
            Err(e) => tracing::warn!("cannot retire environment {key}: {e}"),
        }
    }

    /// Removes a retired tree with `owner`'s rights (`None`: the daemon's).
    fn remove_as(&self, path: &std::path::Path, owner: Option<&str>) {
        let run_as = owner.and_then(|u| self.run_as(u).ok().flatten());
        match self.env_cache().remover(path, run_as.as_ref()).spawn() {
            Ok(mut child) => {
                std::thread::spawn(move || child.wait());
            }
            Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
        }
    }

    /// The keys queued or running jobs need (stale entries of ended jobs go).
    fn envs_in_use(inner: &mut Inner) -> BTreeSet<String> {
        let states = &inner.states;
        let alive = |id: &JobId| states.get(id).is_some_and(|s| !s.is_terminal());
        inner.envs.keys.retain(|id, _| alive(id));
        inner.envs.images.retain(|id, _| alive(id));
        inner.envs.keys.values().cloned().collect()
    }

    /// Past the cap, removes the least recently used environments nobody needs.
    pub(super) fn evict_envs(&self) {
        let cap = self.config.envs.max_size.mib().saturating_mul(1 << 20);
        let victims = {
            let mut inner = self.lock();
            let in_use = Self::envs_in_use(&mut inner);
            let rows = inner.store.envs().unwrap_or_default();
            let cached: Vec<CachedEnv> = rows
                .iter()
                .map(|r| CachedEnv {
                    key: r.key.clone(),
                    size_bytes: r.size_bytes,
                    last_used_at: r.last_used_at,
                    ready: r.state == ENV_READY,
                })
                .collect();
            pyenv::evictions(&cached, cap, &in_use)
        };
        let now = now_ms();
        for key in victims {
            tracing::info!("environment {key}: evicted (least recently used, over envs.max_size)");
            self.remove_env_dir(&key, now);
            let _ = self.lock().store.remove_env(&key);
        }
    }

    /// After a restart: builds recorded as running are looked at again
    /// (finished while no daemon ran, still running, or cut short).
    pub(super) fn resume_env_builds(&self) {
        let mut inner = self.lock();
        let rows = inner.store.envs().unwrap_or_default();
        for row in rows.iter().filter(|r| r.state == ENV_BUILDING) {
            inner.envs.building.insert(
                row.key.clone(),
                Build {
                    started_at: now_ms(),
                    pgid: None,
                },
            );
        }
        let queued: Vec<Job> = inner
            .store
            .list(&gpuq_store::ListFilter {
                states: vec![JobState::Queued],
                ..Default::default()
            })
            .unwrap_or_default();
        for job in queued.iter().filter(|j| j.spec.python.is_some()) {
            let waits = self.env_gate(&mut inner, job);
            for p in inner.pending.values_mut().filter(|p| p.id == job.id) {
                p.waits_on = waits.clone();
            }
        }
        let running: Vec<JobId> = inner.running.keys().copied().collect();
        for id in running {
            if let Ok(Some(job)) = inner.store.job(id) {
                if let Some(key) = self.env_key_of(&job) {
                    inner.envs.keys.insert(id, key);
                }
            }
        }
        drop(inner);
        // A cap lowered in the config applies at once.
        self.evict_envs();
        self.wake_envs.notify_one();
    }

    /// What an attempt about to start runs in, for its runtime record.
    pub(super) fn runtime_environment(
        &self,
        inner: &Inner,
        job: JobId,
    ) -> Option<RuntimeEnvironment> {
        if let Some(image) = inner.envs.images.get(&job) {
            return Some(RuntimeEnvironment {
                image: Some(image.clone()),
                ..Default::default()
            });
        }
        let key = inner.envs.keys.get(&job)?;
        let row: EnvRow = inner.store.env(key).ok().flatten()?;
        Some(RuntimeEnvironment {
            key: Some(key.clone()),
            python: row.python,
            packages: row.packages,
            image: None,
        })
    }

    /// Sets up an attempt's software: its environment first on PATH, or its
    /// command wrapped in podman.
    pub(super) fn add_env_launch(
        &self,
        at: EnvLaunch<'_>,
        argv: &mut Vec<String>,
        env: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        let EnvLaunch {
            id,
            attempt,
            spec,
            cwd,
            gpus,
            rootless,
        } = at;
        if spec.python.is_some() {
            let mut inner = self.lock();
            let key =
                inner.envs.keys.get(&id).cloned().ok_or_else(|| {
                    "its Python environment is not known to this daemon".to_string()
                })?;
            let ready = matches!(inner.store.env(&key), Ok(Some(r)) if r.state == ENV_READY);
            let dir = self.env_cache().dir(&key);
            if !ready || !dir.is_dir() {
                return Err(format!("its Python environment {key} is not ready (it was removed); requeue the job to build it again"));
            }
            let _ = inner.store.touch_env(&key, now_ms());
            let path = env.get("PATH").cloned().unwrap_or_default();
            env.insert("PATH".into(), format!("{}/bin:{path}", dir.display()));
            env.insert("VIRTUAL_ENV".into(), dir.to_string_lossy().into_owned());
            env.remove("PYTHONHOME");
            env.insert("GPUQ_ENV_KEY".into(), key);
        }
        if let Some(image) = &spec.image {
            let podman = Podman {
                program: self.config.containers.podman.clone().into(),
                global_args: self.config.containers.global_args.clone(),
                run_args: self.config.containers.run_args.clone(),
            };
            let job = ContainerJob {
                job: id,
                attempt,
                image,
                argv,
                cwd,
                dir: &self.job_dir(id),
                gpus,
                pass: container::passed_names(env, &spec.env),
                rootless,
                cdi: container::cdi_available(),
            };
            let (wrapped, extra) = container::wrap(self.env_cache.gpuq(), &podman, &job);
            *argv = wrapped;
            env.extend(extra);
        }
        Ok(())
    }
}

impl Service {
    /// `GET /v1/envs`: every cached environment, with the jobs that need it.
    pub fn env_views(&self) -> Result<Vec<gpuq_api::envs::EnvView>, super::ServiceError> {
        let cache = self.env_cache();
        let mut inner = self.lock();
        Self::envs_in_use(&mut inner);
        let rows = inner.store.envs()?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let jobs = inner
                    .envs
                    .keys
                    .iter()
                    .filter(|(_, k)| **k == r.key)
                    .map(|(id, _)| *id)
                    .collect();
                gpuq_api::envs::EnvView {
                    path: cache.dir(&r.key).to_string_lossy().into_owned(),
                    key: r.key,
                    state: r.state,
                    user: r.user,
                    source: r.source,
                    python: r.python,
                    packages: r.packages,
                    size_bytes: r.size_bytes,
                    builds: r.builds,
                    error: r.error,
                    created_at: r.created_at,
                    built_at: r.built_at,
                    last_used_at: r.last_used_at,
                    jobs,
                }
            })
            .collect())
    }

    /// The last build's log (its last 1 MiB), read through the cache's own directory.
    pub fn env_log(&self, key: &str) -> Option<String> {
        let cache = self.env_cache();
        let logs = cache.log(key);
        use std::io::{Read, Seek, SeekFrom};
        const TAIL: u64 = 1 << 20;
        let dir = gpuq_exec::safe_fs::Dir::open(logs.parent()?).ok()?;
        let mut file = dir.open_regular(logs.file_name()?.to_str()?, None).ok()?;
        let len = file.metadata().ok()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
        let mut bytes = Vec::new();
        file.take(TAIL).read_to_end(&mut bytes).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// `name` on the daemon's PATH, as an absolute path.
fn which(name: &str) -> Option<String> {
    which_in(&std::env::var_os("PATH")?, name)
}

/// `name` in the directories of a PATH value.
fn which_in(path: &std::ffi::OsStr, name: &str) -> Option<String> {
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.to_string_lossy().into_owned())
}

impl Service {
    /// A job whose environment is built needs uv, found as the build will
    /// look for it (the `[envs] uv` setting, else the daemon's PATH, else the
    /// submitter's): without one the job is refused at submit with the fix,
    /// not failed later by its build.
    pub(super) fn check_uv(
        &self,
        spec: &JobSpec,
        env: &BTreeMap<String, String>,
    ) -> Result<(), gpuq_core::SpecError> {
        if spec.python.is_none() {
            return Ok(());
        }
        let fix =
            "install it (`pip install uv`, or see https://docs.astral.sh/uv/) where jobs run, \
                   or name it in the daemon's gpuq.toml: `uv = \"/path/to/uv\"` under [envs]";
        match self.config.envs.uv.as_deref() {
            Some(uv) if uv.contains('/') => {
                if std::path::Path::new(uv).is_file() {
                    return Ok(());
                }
                Err(gpuq_core::SpecError::new(
                    "python",
                    format!("the environment is built with uv, and the [envs] uv setting names {uv}, which does not exist: {fix}"),
                ))
            }
            name => {
                let name = name.unwrap_or("uv");
                // A lab-wide build runs only the daemon's uv.
                let found = which(name).is_some()
                    || !self.hermetic(spec)
                        && env
                            .get("PATH")
                            .is_some_and(|p| which_in(std::ffi::OsStr::new(p), name).is_some());
                if found {
                    return Ok(());
                }
                Err(gpuq_core::SpecError::new(
                    "python",
                    if self.hermetic(spec) {
                        format!("the environment is lab-wide, built only with the daemon's uv, and there is no `{name}` on the daemon's PATH: {fix}")
                    } else {
                        format!("the environment is built with uv, and there is no `{name}` on the daemon's PATH or yours: {fix}")
                    },
                ))
            }
        }
    }
}
