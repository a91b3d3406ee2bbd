//! Interactive sessions (`gpuq notebook`, `gpuq shell`): what the daemon adds
//! around a session job. At launch, a notebook gets where JupyterLab listens
//! (a unix socket in the job's private session directory), its base URL and
//! a token only the daemon knows. While it runs, a look every
//! [`LOOK_EVERY`] asks JupyterLab for its kernels, counts the clients the
//! proxy and the terminal relay hold, reads the session's GPUs, and feeds the
//! pure idle rule (`gpuq_core::idle`): its warning is an alert, its stop is
//! the stop protocol with the cause recorded.

use super::stop::StopCause;
use super::Service;
use gpuq_api::home::now_ms;
use gpuq_api::sessions::SessionStatus;
use gpuq_core::alerts::{AlertKind, NewAlert};
use gpuq_core::idle::{Activity, GpuActivity, IdleDecision, IdleWatch};
use gpuq_core::session::SessionKind;
use gpuq_core::{DurationSpec, JobId, JobSpec, Millis};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often running sessions are looked at.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);
/// JupyterLab's socket, in the job's session directory.
pub const JUPYTER_SOCKET: &str = "jupyter.sock";

/// What the daemon keeps of one running session.
pub struct Watched {
    kind: SessionKind,
    attempt: u32,
    idle: Option<IdleWatch>,
    ready: bool,
    busy_kernels: u32,
    /// Its busiest GPU's utilisation, when at or above the idle threshold.
    gpu_busy_percent: Option<f64>,
    idle_since: Option<Millis>,
    stop_at: Option<Millis>,
    /// Clients the proxy and the terminal relay hold open now.
    clients: Arc<AtomicU32>,
}

/// Held while a client is connected to a session (a proxied WebSocket, an
/// attached terminal): the session is in use meanwhile.
pub struct ClientGuard(Arc<AtomicU32>);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A running session, for the routes that serve it.
pub struct LiveSession {
    pub job: JobId,
    pub attempt: u32,
    pub kind: SessionKind,
    pub user: String,
    pub ready: bool,
}

impl Service {
    /// A notebook's JupyterLab token: derived from the daemon's secret, so it
    /// survives a daemon restart and is never stored.
    pub fn jupyter_token(&self, job: JobId) -> String {
        self.link.derived(&format!("jupyter token for job {job}"))
    }

    /// The path a notebook's attempt is served under, `/sessions/{job}/{capability}/`:
    /// the capability (128 bits derived from the daemon's secret, the job and the
    /// attempt) is the notebook's door key. Browsers send the dashboard's cookie
    /// to every port of the host, but a path only to where it points; so a page
    /// on another port that receives the cookie still cannot open the notebook.
    /// Only its user learns the path (`GET /v1/sessions/{id}`), and it dies with
    /// the attempt.
    pub fn notebook_base(&self, job: JobId, attempt: u32) -> String {
        let key = self.link.derived(&format!(
            "notebook address for job {job}, attempt {attempt}"
        ));
        format!("/sessions/{job}/{}/", &key[..32])
    }

    /// Completes a session's launch: a notebook listens on its socket under its
    /// base URL, with its token and its base URL (which holds its capability)
    /// in the environment (never on the command line, where `ps` would show
    /// them to everyone).
    pub(super) fn add_session_launch(
        &self,
        id: JobId,
        attempt: u32,
        spec: &JobSpec,
        argv: &mut Vec<String>,
        env: &mut BTreeMap<String, String>,
    ) {
        let Some(session) = &spec.session else {
            return;
        };
        if session.kind != SessionKind::Notebook {
            return;
        }
        let dir = gpuq_exec::JobDir::new(&self.home, id).session_dir();
        argv.extend([
            "--no-browser".to_string(),
            format!("--ServerApp.sock={}", dir.join(JUPYTER_SOCKET).display()),
            "--ServerApp.sock_mode=0600".into(),
            // The daemon authenticates every request before it is proxied; the
            // Host a browser sends is the daemon's, not JupyterLab's.
            "--ServerApp.allow_remote_access=True".into(),
            // Jobs run as root only where the daemon's config allows it
            // (`allow_root_jobs`); JupyterLab must not second-guess that.
            "--allow-root".into(),
        ]);
        env.insert("JUPYTER_TOKEN".into(), self.jupyter_token(id));
        // JupyterLab reads its base URL from the environment through a settings
        // file of ours, found first on `JUPYTER_CONFIG_PATH` (the user's own
        // settings still apply, after it).
        let job_dir = gpuq_exec::JobDir::new(&self.home, id);
        let ours = job_dir.jupyter_config_dir().display().to_string();
        let path = match env.get("JUPYTER_CONFIG_PATH") {
            Some(theirs) if !theirs.is_empty() => format!("{ours}:{theirs}"),
            _ => ours,
        };
        env.insert("JUPYTER_CONFIG_PATH".into(), path);
        // It would make JupyterLab skip every settings file, ours included.
        env.remove("JUPYTER_NO_CONFIG");
        env.insert(
            gpuq_exec::layout::NOTEBOOK_BASE_URL_ENV.into(),
            self.notebook_base(id, attempt),
        );
    }

    /// The session a route serves: running, of this kind.
    pub fn live_session(&self, id: JobId) -> Option<LiveSession> {
        let inner = self.lock();
        let run = inner.running.get(&id)?;
        let kind = run.spec.as_ref()?.session.as_ref()?.kind;
        let ready = self.sessions().get(&id).is_some_and(|w| w.ready);
        Some(LiveSession {
            job: id,
            attempt: run.attempt,
            kind,
            user: run.user.to_string(),
            ready,
        })
    }

    /// Counts a client of a running session until the guard drops.
    pub fn session_client(&self, id: JobId) -> Option<ClientGuard> {
        let sessions = self.sessions();
        let counter = Arc::clone(&sessions.get(&id)?.clients);
        counter.fetch_add(1, Ordering::Relaxed);
        Some(ClientGuard(counter))
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Watched>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session of a job, as `gpuq notebook` and the dashboard show it.
    pub fn session_status(&self, id: JobId) -> Result<Option<SessionStatus>, super::ServiceError> {
        let job = self.job(id)?;
        let spec = self.lock().store.launch_info(id)?.spec;
        let Some(session) = spec.session else {
            return Ok(None);
        };
        let sessions = self.sessions();
        let w = sessions
            .get(&id)
            .filter(|_| job.state == gpuq_core::JobState::Running);
        Ok(Some(SessionStatus {
            job: id,
            kind: session.kind,
            user: job.user.clone(),
            name: job.name.clone(),
            state: job.state,
            ready: w.is_some_and(|w| w.ready),
            // The notebook's capability: the routes show it to its user alone.
            path: (session.kind == SessionKind::Notebook)
                .then(|| format!("{}lab", self.notebook_base(id, job.attempt))),
            gpus: job.gpus.clone(),
            clients: w.map_or(0, |w| w.clients.load(Ordering::Relaxed)),
            busy_kernels: w.map_or(0, |w| w.busy_kernels),
            gpu_busy_percent: w.and_then(|w| w.gpu_busy_percent),
            idle_stop_ms: session.idle_stop.map(DurationSpec::as_millis),
            idle_since: w.and_then(|w| w.idle_since),
            stop_at: w.and_then(|w| w.stop_at),
            reason: job.reason.clone().unwrap_or_default(),
        }))
    }

    /// What `gpuq ls` and the dashboard say of a running session instead of a
    /// reason: starting, in use (by what), or idle for how long and until when.
    pub fn session_note(&self, id: JobId, now: Millis) -> Option<String> {
        let sessions = self.sessions();
        let w = sessions.get(&id)?;
        let what = describe(w.kind);
        if !w.ready {
            return Some(format!("{what} starting"));
        }
        let clients = w.clients.load(Ordering::Relaxed);
        Some(match (w.idle_since, w.stop_at) {
            (Some(since), Some(stop_at)) => format!(
                "{what} idle for {}; stops in {} unless used",
                span(now - since),
                span(stop_at - now)
            ),
            (Some(since), None) => format!("{what} idle for {}", span(now - since)),
            (None, _) => {
                let stop = if w.idle.is_none() {
                    "; no idle stop"
                } else {
                    ""
                };
                match in_use_by(w, clients) {
                    Some(by) => format!("{what} in use: {by}{stop}"),
                    None if w.idle.is_none() => format!("{what}: no client connected{stop}"),
                    // Code ran within the idle window, or its GPUs have no reading yet.
                    None => format!("{what} in use: not idle yet"),
                }
            }
        })
    }

    /// Every running session's status.
    pub fn running_sessions(&self) -> Vec<SessionStatus> {
        let ids: Vec<JobId> = {
            let mut ids: Vec<JobId> = self.sessions().keys().copied().collect();
            ids.sort_unstable();
            ids
        };
        ids.into_iter()
            .filter_map(|id| self.session_status(id).ok().flatten())
            .filter(|s| s.state == gpuq_core::JobState::Running)
            .collect()
    }

    /// The once-a-second look at every running session.
    pub async fn watch_sessions(self: Arc<Self>) {
        let mut tick = tokio::time::interval(LOOK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            self.look_at_sessions().await;
        }
    }

    async fn look_at_sessions(self: &Arc<Self>) {
        // (id, attempt, user, session, its GPUs, being stopped); the idle clock of
        // a session first seen now (started, or adopted after a restart) starts now.
        let running: Vec<_> = {
            let inner = self.lock();
            inner
                .running
                .iter()
                .filter_map(|(id, r)| {
                    let session = r.spec.as_ref()?.session.clone()?;
                    Some((
                        *id,
                        r.attempt,
                        r.user.to_string(),
                        session,
                        r.local_gpus().to_vec(),
                        r.stop.is_some(),
                    ))
                })
                .collect()
        };
        self.sessions()
            .retain(|id, w| running.iter().any(|r| r.0 == *id && r.1 == w.attempt));
        let threshold = self.config.sessions.idle_util_percent;
        for (id, attempt, user, session, gpus, stopping) in running {
            {
                let mut sessions = self.sessions();
                sessions.entry(id).or_insert_with(|| Watched {
                    kind: session.kind,
                    attempt,
                    idle: session
                        .idle_policy(threshold)
                        .map(|p| IdleWatch::new(p, now_ms())),
                    ready: false,
                    busy_kernels: 0,
                    gpu_busy_percent: None,
                    idle_since: None,
                    stop_at: None,
                    clients: Arc::new(AtomicU32::new(0)),
                });
            }
            let look = match session.kind {
                SessionKind::Notebook => {
                    let owner = match self.identity.job_account(&user) {
                        Ok(a) => a.map(|a| a.uid),
                        Err(_) => continue,
                    };
                    crate::sessions::jupyter::kernels(
                        &gpuq_exec::JobDir::new(&self.home, id).session_dir(),
                        owner,
                        &self.notebook_base(id, attempt),
                        &self.jupyter_token(id),
                    )
                    .await
                    .ok()
                }
                SessionKind::Shell => {
                    let socket = gpuq_exec::JobDir::new(&self.home, id).terminal_socket(attempt);
                    socket.exists().then(Vec::new)
                }
            };
            let now = now_ms();
            let gpu = self.session_gpu_activity(&gpus);
            let decision = {
                let mut sessions = self.sessions();
                let Some(w) = sessions.get_mut(&id) else {
                    continue;
                };
                w.ready = look.is_some();
                let kernels = look.unwrap_or_default();
                w.busy_kernels = kernels.iter().filter(|k| k.busy).count() as u32;
                w.gpu_busy_percent = match gpu {
                    GpuActivity::Percent(p) if p >= threshold => Some(p),
                    _ => None,
                };
                let activity = Activity {
                    at: now,
                    busy_kernels: w.busy_kernels,
                    last_execution: kernels.iter().filter_map(|k| k.last_activity).max(),
                    clients: w.clients.load(Ordering::Relaxed),
                    gpus: gpu,
                };
                match w.idle.as_mut() {
                    // Not yet answering: not judged (a slow start is not idleness).
                    Some(watch) if w.ready && !stopping => {
                        let d = watch.observe(&activity);
                        w.idle_since = watch.idle_since();
                        if let IdleDecision::Warn { stop_at, .. } = d {
                            w.stop_at = Some(stop_at);
                        } else if matches!(d, IdleDecision::Active { idle_since: None }) {
                            w.stop_at = None;
                        }
                        Some(d)
                    }
                    _ => None,
                }
            };
            let alert = |message: String| NewAlert {
                at: now,
                kind: AlertKind::SessionIdle,
                job: Some(id),
                user: Some(user.clone()),
                gpu: None,
                message,
            };
            match decision {
                Some(IdleDecision::Warn {
                    idle_since,
                    stop_at,
                }) => self.raise(vec![alert(format!(
                    "{} (job {id}) idle for {}: {}; it stops in {} unless used",
                    describe(session.kind),
                    span(now - idle_since),
                    idle_rule(threshold),
                    span(stop_at - now),
                ))]),
                Some(IdleDecision::Stop { idle_since }) => {
                    let why = format!(
                        "idle for {} ({})",
                        span(now - idle_since),
                        idle_rule(threshold)
                    );
                    self.raise(vec![alert(format!(
                        "{} (job {id}) stopped: {why}; its GPUs are free",
                        describe(session.kind)
                    ))]);
                    self.stop(id, StopCause::Idle { why });
                }
                _ => {}
            }
        }
    }

    /// The busiest of a session's GPUs, as telemetry read them last.
    fn session_gpu_activity(&self, gpus: &[u32]) -> GpuActivity {
        if gpus.is_empty() {
            return GpuActivity::NoGpus;
        }
        let monitor = self.monitor();
        let mut highest: f64 = 0.0;
        for g in gpus {
            match monitor
                .readings()
                .iter()
                .find(|r| r.index == *g)
                .and_then(|r| r.util_percent)
            {
                Some(u) => highest = highest.max(u),
                None => return GpuActivity::Unknown,
            }
        }
        GpuActivity::Percent(highest)
    }
}

/// What keeps a session in use: its clients, its running kernels, its GPUs
/// ("GPU at 90%": a notebook training with no tab open is not idle).
fn in_use_by(w: &Watched, clients: u32) -> Option<String> {
    let mut by = Vec::new();
    if clients > 0 {
        by.push(format!(
            "{} connected",
            gpuq_core::plural(clients.into(), "client")
        ));
    }
    if w.busy_kernels > 0 {
        by.push(format!(
            "{} running",
            gpuq_core::plural(w.busy_kernels.into(), "kernel")
        ));
    }
    if let Some(p) = w.gpu_busy_percent {
        by.push(format!("GPU at {p:.0}%"));
    }
    (!by.is_empty()).then(|| by.join(", "))
}

/// A span in whole seconds (at least one), as messages show it.
fn span(ms: Millis) -> DurationSpec {
    DurationSpec::from_secs(((ms + 500) / 1000).max(1) as u64)
}

fn describe(kind: SessionKind) -> &'static str {
    match kind {
        SessionKind::Notebook => "notebook",
        SessionKind::Shell => "shell",
    }
}

fn idle_rule(threshold: f64) -> String {
    format!(
        "no code ran in its kernels, no client was connected, its GPUs stayed under {threshold}%"
    )
}
