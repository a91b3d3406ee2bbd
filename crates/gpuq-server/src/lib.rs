//! `gpuq server`: the daemon. Opens the store, discovers GPUs, recovers what a
//! previous daemon left running, then serves the API and runs the scheduler.

mod array_routes;
mod auth;
pub mod config;
mod cost_routes;
mod env_routes;
mod feed;
pub mod identity;
mod listen;
mod metrics;
mod mlflow;
mod notify;
pub mod pricing;
mod profile_routes;
mod rejections;
mod repro_routes;
mod routes;
mod sampler;
pub mod service;
mod sessions;
mod sweep_routes;
mod tracking_routes;
mod web;

use anyhow::{bail, Context, Result};
use axum::routing::{get, post};
use axum::Router;
use gpuq_api::home::{self, DaemonFile};
use gpuq_api::ServerInfo;
use gpuq_exec::LocalExecutor;
use gpuq_gpu::GpuSource;
use gpuq_store::Store;
use routes::AppContext;
use service::Service;
use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

/// Default listen address of `gpuq server`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8585";

pub struct ServerOptions {
    pub listen: Option<SocketAddr>,
    pub gpus: GpuSource,
    pub slots: Option<u32>,
    pub home: PathBuf,
    pub config: crate::config::Config,
    /// Where the config is (or would be): named in messages that ask for a change.
    pub config_path: PathBuf,
    pub pricing: crate::pricing::Pricing,
    /// Called once the home is checked and locked, before anything is logged:
    /// the caller's logging and records of this daemon (a daemon refused
    /// because another serves the home must not touch them).
    pub on_start: Option<OnStart>,
    /// Where `gpus` came from when no flag chose it (gpuq.toml, the last
    /// daemon's settings): said with the GPUs (`gpuq doctor`, an autostart's message).
    pub gpus_from: Option<String>,
}

/// See `ServerOptions::on_start`; given the (resolved) home.
pub type OnStart = Box<dyn FnOnce(&std::path::Path) -> Result<()> + Send>;

pub fn router(ctx: Arc<AppContext>) -> Router {
    let api = Router::new()
        .route("/v1/info", get(routes::info))
        .route("/v1/jobs", post(routes::submit).get(routes::list))
        .route("/v1/jobs/:id", get(routes::show))
        .route("/v1/jobs/:id/cancel", post(routes::cancel))
        .route("/v1/jobs/:id/requeue", post(routes::requeue))
        .route("/v1/jobs/:id/hold", post(routes::hold))
        .route("/v1/jobs/:id/release", post(routes::release))
        .route("/v1/jobs/:id/explain", get(routes::explain))
        .route("/v1/explain", get(routes::explain_queued))
        .route("/v1/usage", get(routes::usage))
        .route("/v1/whoami", get(routes::whoami))
        .route(
            "/v1/tokens",
            post(routes::create_token).get(routes::list_tokens),
        )
        .route("/v1/tokens/:id/revoke", post(routes::revoke_token))
        .route("/v1/queue", get(routes::queue))
        .route("/v1/queue/drain", post(routes::drain))
        .route("/v1/queue/undrain", post(routes::undrain))
        .route("/v1/jobs/:id/wait", get(routes::wait))
        .route("/v1/jobs/:id/log", get(routes::log))
        .route("/v1/gpus", get(routes::gpus))
        .route("/v1/gpus/history", get(routes::gpu_history))
        .route("/v1/alerts", get(routes::alerts))
        .route("/v1/cost", get(cost_routes::cost))
        .route(
            "/v1/autostop",
            get(cost_routes::autostop).post(cost_routes::set_autostop),
        )
        .route("/v1/schedules", get(cost_routes::schedules))
        .route("/v1/prices", get(cost_routes::prices))
        .route("/v1/jobs/:id/advice", get(cost_routes::advice))
        .route("/v1/jobs/:id/metrics", get(tracking_routes::metrics))
        .route("/v1/jobs/:id/run", get(tracking_routes::run))
        .route("/v1/jobs/:id/repro", get(repro_routes::repro))
        .route("/v1/jobs/:id/rerun", post(repro_routes::rerun))
        .route(
            "/v1/sweeps",
            post(sweep_routes::create).get(sweep_routes::list),
        )
        .route("/v1/sweeps/:id", get(sweep_routes::show))
        .route("/v1/sweeps/:id/cancel", post(sweep_routes::cancel))
        .route("/v1/jobs/:id/rung", post(sweep_routes::rung))
        .route("/v1/jobs/:id/attach", get(sessions::attach::attach))
        .route("/v1/jobs/:id/profile", post(profile_routes::request))
        .route("/v1/jobs/:id/cpu", get(profile_routes::cpu))
        .route("/v1/envs", get(env_routes::list))
        .route("/v1/envs/:key/log", get(env_routes::log))
        .route("/v1/jobs/:id/profile/:request", get(profile_routes::status))
        .route("/v1/sessions", get(sessions::list))
        .route("/v1/sessions/:id", get(sessions::show))
        .route("/v1/events", get(feed::events))
        .route("/v1/login-links", post(web::session::create_link))
        .route(
            "/v1/dashboard-sessions/end",
            post(web::session::end_sessions),
        )
        .route("/metrics", get(metrics::metrics))
        .route("/openapi.json", get(routes::openapi))
        .merge(mlflow::router())
        .merge(array_routes::router())
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            auth::authenticate,
        ));
    Router::new()
        .route("/health", get(routes::health))
        .merge(web::router())
        .merge(api)
        // JupyterLab's answers go as they are: `json_errors` and compression
        // leave /sessions/ alone, and the proxy reads no body (no body limit).
        .merge(sessions::proxy_router())
        .layer(axum::extract::DefaultBodyLimit::max(rejections::MAX_BODY))
        .layer(axum::middleware::from_fn(rejections::json_errors))
        // JSON answers gzip-compressed for clients that ask (the dashboard's
        // browser; the CLI does not): a page of 100 jobs is ~48 KB raw. Only
        // JSON: logs, artifacts and event streams go as they are (a client
        // that reads an artifact's raw bytes, as MLflow's does, must get them).
        .layer(
            tower_http::compression::CompressionLayer::new().compress_when(json_worth_compressing),
        )
        .with_state(ctx)
}

/// A JSON answer of more than a kilobyte.
fn json_worth_compressing(
    _: axum::http::StatusCode,
    _: axum::http::Version,
    headers: &axum::http::HeaderMap,
    _: &axum::http::Extensions,
) -> bool {
    let json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let small = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n < 1024);
    json && !small
}

pub fn run(mut opts: ServerOptions) -> Result<()> {
    raise_descriptor_limit();
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Root makes nothing before every component of the path is checked: a
        // link in a labmate's directory would choose where root creates its home.
        gpuq_exec::safe_fs::make_trusted_dir(&opts.home, 0).map_err(|e| {
            anyhow::anyhow!(
                "GPUQ_HOME {} is not safe for a daemon run as root: {e}",
                opts.home.display()
            )
        })?;
    }
    std::fs::create_dir_all(&opts.home)
        .with_context(|| format!("cannot create GPUQ_HOME {}", opts.home.display()))?;
    // Absolute and without links from here on: the supervisors and every record
    // path derive from it.
    opts.home = std::fs::canonicalize(&opts.home)
        .with_context(|| format!("cannot resolve GPUQ_HOME {}", opts.home.display()))?;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Root writes records, reads exit codes and hands out the socket here: no
        // other account may be able to swap a file or directory under it.
        gpuq_exec::safe_fs::check_trusted(&opts.home, 0).map_err(|e| {
            anyhow::anyhow!(
                "GPUQ_HOME {} is not safe for a daemon run as root: {e}",
                opts.home.display()
            )
        })?;
    }
    let _lock = lock_home(&opts.home)?;
    if let Some(on_start) = opts.on_start.take() {
        on_start(&opts.home)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(opts))
}

/// Every connection, log stream and job record costs a descriptor: take the
/// hard limit as the soft one (systemd's default soft limit, 1024, is for
/// programs that still use select(2); this one does not).
fn raise_descriptor_limit() {
    // SAFETY: getrlimit/setrlimit on our own process with a struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// One daemon per home: an exclusive lock held for the daemon's life.
fn lock_home(home: &std::path::Path) -> Result<std::fs::File> {
    let path = home::daemon_lock(home);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    // A daemon that was just killed can hold the lock for a moment longer (a child
    // it was spawning still has the descriptor until its exec): wait briefly
    // before deciding another daemon is alive.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    // SAFETY: flock on a file descriptor we own.
    let try_lock = || unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    let mut locked = try_lock();
    while !locked && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        locked = try_lock();
    }
    if !locked {
        let pid = DaemonFile::read(home)
            .map(|d| format!(" (pid {})", d.pid))
            .unwrap_or_default();
        bail!(
            "another gpuq daemon already serves {}{pid}; stop it first or use another GPUQ_HOME",
            home.display()
        );
    }
    Ok(file)
}

async fn serve(opts: ServerOptions) -> Result<()> {
    let home = opts.home.clone();
    let token = home::load_or_create_token(&home)?;
    let store = Store::open(&home.join("gpuq.db")).context("cannot open the job database")?;
    // The database holds every job's environment: only the daemon's user reads it.
    for name in ["gpuq.db", "gpuq.db-wal", "gpuq.db-shm"] {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(home.join(name), std::fs::Permissions::from_mode(0o600));
    }
    let slurm_mode = opts.config.backend == crate::config::BackendKind::Slurm;
    let (gpu_source, mut discovery) = if slurm_mode {
        // Slurm places jobs on its nodes' GPUs; this host's GPUs are not scheduled.
        let d = gpuq_gpu::Discovery {
            gpus: vec![],
            links: vec![],
            summary: String::new(),
            driver: Default::default(),
        };
        (gpuq_gpu::GpuSource::None, d)
    } else {
        (opts.gpus.clone(), gpuq_gpu::discover(&opts.gpus))
    };
    if let Some(from) = &opts.gpus_from {
        discovery.summary = format!("{} ({from})", discovery.summary);
    }

    let explicit = opts.listen.is_some();
    let addr = opts
        .listen
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default address"));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        // A client-started daemon must not fail because another home's daemon has the default port.
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::info!("{addr} is in use; listening on a free loopback port instead");
            tokio::net::TcpListener::bind("127.0.0.1:0").await?
        }
        Err(e) => bail!("cannot listen on {addr}: {e}"),
    };
    let local = listener.local_addr()?;
    let url = format!("http://{local}");

    let node = hostname();
    let slots = opts
        .slots
        .or(opts.config.scheduler.slots)
        .unwrap_or_else(default_slots);
    let exe = std::env::current_exe().context("cannot find the gpuq binary for the supervisor")?;
    let output = &opts.config.output;
    let executor = LocalExecutor::new(&home, exe, url.clone(), token.clone()).with_log_limits(
        gpuq_exec::log_pipe::LogLimits {
            max_bytes: output.log_max_size.mib() * 1024 * 1024,
            reserve_bytes: service::output_limits::disk_space(&home)
                .map_or(0, |(_, total)| output.reserve_bytes(total)),
        },
    );
    // Real GPUs (NVML): the nvidia-uvm major must exist before a confined
    // job's group is made, or the job gets no rule for it.
    if !slurm_mode && discovery.driver.version.is_some() && !discovery.gpus.is_empty() {
        tracing::info!("{}", gpuq_exec::cgroup::devices::load_uvm());
    }
    // Jobs' cgroups: found (and the daemon's subtree set up) before any job starts.
    let confinement = Arc::new(if slurm_mode {
        gpuq_exec::cgroup::Confinement::off("jobs run under Slurm, whose cgroups confine them")
    } else {
        gpuq_exec::cgroup::Confinement::detect(&opts.config.confinement)
            .map_err(|e| anyhow::anyhow!("{}: {e}", opts.config_path.display()))?
    });
    tracing::info!("job confinement: {}", confinement.describe());
    let executor = executor.with_confinement(
        confinement.clone(),
        discovery
            .gpus
            .iter()
            .map(|g| {
                let device = gpuq_exec::GpuDevice {
                    minor: g.minor,
                    uuid: g.uuid.clone(),
                    local_cpus: g
                        .bus_id
                        .as_deref()
                        .map(gpuq_exec::cgroup::cpus::local_to)
                        .unwrap_or_default(),
                };
                (g.index, device)
            })
            .collect(),
    );
    let identity = Arc::new(identity::Identity::new(identity::AccountRules {
        admins: &opts.config.admins,
        single_user: opts.config.single_user,
        allow_root_jobs: opts.config.allow_root_jobs,
        min_job_uid: opts.config.min_job_uid(),
        config_path: &opts.config_path,
    }));
    // The one place that knows which backend runs: everything above it sees a `dyn Backend`.
    let backend: Arc<dyn gpuq_exec::Backend> = if slurm_mode {
        let c = &opts.config.slurm;
        use sha2::Digest;
        let tag: String = sha2::Sha256::digest(home.display().to_string().as_bytes())
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect();
        let commands = gpuq_exec::slurm::SlurmCommands::new(
            &home,
            gpuq_exec::slurm::SlurmDefaults {
                partition: c.partition.clone(),
                account: c.account.clone(),
                qos: c.qos.clone(),
                extra_args: c.extra_args.clone(),
            },
            tag,
        );
        let shape = gpuq_exec::slurm_cluster::ClusterShape {
            max_gpus: c.max_gpus,
            slots: slots.max(c.max_gpus),
        };
        let cluster = tokio::task::block_in_place(|| {
            gpuq_exec::SlurmCluster::new(commands, executor, shape, c.poll_interval.as_std())
        });
        discovery.summary = gpuq_exec::Backend::info(&cluster).summary.clone();
        Arc::new(cluster)
    } else {
        let capacity = opts.config.resources.local_capacity();
        let node = gpuq_core::Node {
            name: node.clone(),
            gpus: discovery.gpus.iter().map(|g| g.index).collect(),
            slots,
            attrs: discovery
                .gpus
                .iter()
                .map(|g| gpuq_core::scheduler::GpuAttrs {
                    model: g.model.clone(),
                    memory_mib: g.memory_mib,
                })
                .collect(),
            links: discovery.links.clone(),
            interconnect: String::new(),
            // The cores and memory jobs may reserve (`[resources]`).
            cpus: capacity.cpus,
            memory_mib: capacity.memory_mib,
        };
        // All jobs together stay within the node's allocatable memory: none
        // of them can take the daemon's.
        if let Err(e) = confinement.limit_all_jobs_memory(node.memory_mib) {
            tracing::warn!("cannot limit the jobs' memory together: {e}");
        }
        Arc::new(gpuq_exec::LocalBackend::new(
            executor,
            node,
            discovery.summary.clone(),
        ))
    };
    tracing::info!("{}", backend.info().summary);
    let mut limits = opts.config.connections.clone();
    listen::fit_descriptor_limit(&mut limits);
    let alert_out = notify::spawn(opts.config.alerts.webhooks.clone(), node.clone());
    let interval = opts.config.telemetry.interval.as_std();
    let service = Service::new(
        store,
        backend,
        home.clone(),
        discovery.gpus.clone(),
        opts.config,
        identity.clone(),
        service::Extras {
            alert_out,
            pricing: opts.pricing,
            tracking: gpuq_store::tracking::Tracking::open(&home.join("gpuq.db"))
                .context("cannot open the tracking database")?,
            link: service::TrackingLink::new(url.clone(), &token),
            driver: discovery.driver.clone(),
        },
    )?;
    service.recover()?;
    tokio::spawn(service.clone().scheduler_loop());
    tokio::spawn(service.clone().housekeeping_loop());
    tokio::spawn(service.clone().envs_loop());
    tokio::spawn(service.clone().watch_sessions());
    sampler::spawn(
        service.clone(),
        gpu_source,
        discovery.gpus.clone(),
        interval,
    );

    // A daemon listening on every address is reached by its host's name.
    let web_url = if local.ip().is_unspecified() {
        format!("http://{node}:{}", local.port())
    } else {
        url.clone()
    };
    let info = ServerInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        node,
        gpus: service.gpu_count(),
        gpu_discovery: discovery.summary,
        slots,
        home: home.display().to_string(),
        pid: std::process::id(),
        driver_version: discovery.driver.version.clone(),
        driver_cuda_version: discovery.driver.cuda_version.clone(),
        nvml: discovery.driver.version.is_some(),
        confinement: Some(confinement.describe()),
    };
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(AppContext {
        stopping,
        service,
        token,
        info,
        identity: identity.clone(),
        // A daemon listening on every address is reached by its host's name.
        web: web::WebConfig::new(&web_url),
    });
    let app = router(ctx);
    let socket = home::socket_path(&home);
    let uds = bind_socket(&socket, identity.multi_user())?;
    tokio::spawn(listen::serve_socket(
        uds,
        app.clone(),
        identity,
        limits.clone(),
    ));
    let daemon_file = DaemonFile {
        url: url.clone(),
        pid: std::process::id(),
    };
    gpuq_exec::layout::write_atomically(
        &home::daemon_file(&home),
        &serde_json::to_vec(&daemon_file)?,
    )?;
    tracing::info!(
        "gpuq daemon listening on {url} (home {}, {slots} job slots; job confinement: {})",
        home.display(),
        confinement.describe()
    );

    listen::serve_tcp(listener, app, limits, async move {
        shutdown_signal().await;
        // Ends the event streams, which would otherwise hold the shutdown open.
        let _ = stopping_tx.send(true);
    })
    .await;
    let _ = std::fs::remove_file(home::daemon_file(&home));
    let _ = std::fs::remove_file(&socket);
    tracing::info!("gpuq daemon stopped; running jobs continue under their supervisors");
    Ok(())
}

/// The unix socket local users connect to. A daemon run as root serves every
/// local user (mode 0666: the kernel says who connects); any other daemon serves
/// only its own user (mode 0600).
fn bind_socket(path: &std::path::Path, multi_user: bool) -> Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    // We hold the home's lock: a socket file left here is stale.
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    let mode = if multi_user { 0o666 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// Concurrent jobs per node: GPU jobs are bounded by GPUs; this bounds CPU-only ones.
fn default_slots() -> u32 {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    (cores * 4).max(8)
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(s) = std::str::from_utf8(&buf[..end]) {
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    "localhost".into()
}
