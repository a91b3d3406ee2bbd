//! `gpuq server`: run the daemon in the foreground; `gpuq server stop`: stop
//! the daemon of `GPUQ_HOME`.

use super::{daemon_log, daemon_settings, CliError, CmdResult};
use gpuq_api::home::{self, DaemonFile};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServerArgs {
    #[command(subcommand)]
    action: Option<ServerAction>,
    /// Address to listen on [default: `[server] listen` in gpuq.toml, else 127.0.0.1:8585].
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// GPUs to schedule: auto (NVML), none, or sim:N simulated GPUs
    /// [default: `[server] gpus` in gpuq.toml, else auto].
    #[arg(long)]
    gpus: Option<String>,
    /// Jobs that may run at once [default: `[scheduler] slots` in gpuq.toml, else
    /// 4 per CPU core, at least 8].
    #[arg(long)]
    slots: Option<u32>,
    /// Configuration file (shares, quotas) [default: $GPUQ_HOME/gpuq.toml if present].
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Print the log to stderr too (it always goes to $GPUQ_HOME/daemon.log).
    #[arg(short = 'v', long, visible_alias = "verbose")]
    foreground: bool,
    /// Started by a command that found no daemon: settings the flags and
    /// gpuq.toml leave open are the home's last daemon's (daemon.settings).
    #[arg(long, hide = true)]
    autostart: bool,
}

#[derive(clap::Subcommand, Debug)]
enum ServerAction {
    /// Stop the daemon of GPUQ_HOME (SIGTERM; running jobs continue under their supervisors).
    Stop,
}

/// How long a stopping daemon may take before `gpuq server stop` gives up waiting.
const STOP_WAIT: Duration = Duration::from_secs(30);

pub fn run(args: ServerArgs) -> CmdResult {
    if let Some(ServerAction::Stop) = args.action {
        return stop();
    }
    let home = home::resolve_home();
    super::connect::check_root_home(&home)?;
    let config = gpuq_server::config::Config::load(args.config.as_deref(), &home)
        .map_err(CliError::usage)?;
    let last = if args.autostart {
        daemon_settings::read(&home)
    } else {
        None
    };
    let last = last.as_ref();
    let (gpus_text, gpus_from) = daemon_settings::pick(
        args.gpus.clone(),
        config.server.gpus.clone(),
        last.map(|l| l.gpus.clone()),
    );
    let gpus_text = gpus_text.unwrap_or_else(|| "auto".into());
    let gpus = gpus_text.parse().map_err(|e: gpuq_gpu::GpuSourceError| {
        let from = match gpus_from {
            daemon_settings::Source::Config => " ([server] gpus in gpuq.toml)",
            daemon_settings::Source::LastDaemon => " (daemon.settings)",
            _ => "",
        };
        CliError::usage(format!("{e}{from}"))
    })?;
    let (listen, listen_from) = daemon_settings::pick(
        args.listen,
        config.server.listen,
        last.and_then(|l| l.listen),
    );
    let (slots, slots_from) = daemon_settings::pick(
        args.slots,
        config.scheduler.slots,
        last.and_then(|l| l.slots),
    );
    let pricing = gpuq_server::pricing::Pricing::resolve(&config.cost).map_err(CliError::usage)?;
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(|| home.join("gpuq.toml"));
    let log_max = config.server.log_max_size.mib() * 1024 * 1024;
    let settings = daemon_settings::Settings {
        gpus: gpus_text,
        listen,
        slots,
    };
    let (foreground, autostart) = (args.foreground, args.autostart);
    let gpus_note = match gpus_from {
        daemon_settings::Source::Config => Some(format!("--gpus {} from gpuq.toml", settings.gpus)),
        daemon_settings::Source::LastDaemon => Some(format!(
            "--gpus {} from daemon.settings, as the home's last daemon ran",
            settings.gpus
        )),
        _ => None,
    };
    let on_start: gpuq_server::OnStart = Box::new(move |home: &std::path::Path| {
        let log = home::daemon_log(home);
        daemon_log::init(&log, log_max, foreground).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot open {}: {e}", log.display()))
        })?;
        if !foreground && !autostart {
            // The one line a daemon started with `&` prints: where to look.
            errln!(
                "gpuq: daemon for {}; its log is {}",
                home.display(),
                log.display()
            );
        }
        tracing::info!(
            "settings: gpus {} ({}), listen {} ({}), slots {} ({})",
            settings.gpus,
            gpus_from.describe(),
            settings.listen.map_or_else(
                || gpuq_server::DEFAULT_LISTEN.to_string(),
                |l| l.to_string()
            ),
            listen_from.describe(),
            settings.slots.map_or_else(
                || "4 per CPU core, at least 8".to_string(),
                |s| s.to_string()
            ),
            slots_from.describe(),
        );
        // What the next autostart of this home runs with (see daemon_settings).
        if let Err(e) = daemon_settings::write(home, &settings) {
            tracing::warn!(
                "cannot record this daemon's settings in {}: {e}",
                daemon_settings::path(home).display()
            );
        }
        Ok(())
    });
    let opts = gpuq_server::ServerOptions {
        pricing,
        config,
        config_path,
        listen,
        gpus,
        // gpuq.toml's `[scheduler] slots` is the daemon's to read.
        slots: slots.filter(|_| slots_from != daemon_settings::Source::Config),
        home,
        on_start: Some(on_start),
        gpus_from: gpus_note,
    };
    gpuq_server::run(opts).map_err(|e| {
        // Into the log too, when it is open: a daemon that stopped says why there.
        tracing::error!("the daemon stopped: {e:#}");
        CliError::failure(format!("{e:#}"))
    })?;
    Ok(0)
}

/// SIGTERM to the daemon named in the home's daemon file, then waits until it
/// has let go of the home's lock: then it has exited.
fn stop() -> CmdResult {
    let home = home::resolve_home();
    let none = || {
        CliError::failure(format!(
            "no gpuq daemon is running for GPUQ_HOME={}",
            home.display()
        ))
    };
    if !home::daemon_running(&home) {
        return Err(none());
    }
    let daemon = DaemonFile::read(&home).ok_or_else(|| {
        CliError::failure(format!(
            "the daemon of {} is still starting (no {} yet); try again in a moment",
            home.display(),
            home::daemon_file(&home).display()
        ))
    })?;
    let pid = daemon.pid as libc::pid_t;
    // SAFETY: plain syscall; the pid is the daemon's, which holds the home's lock.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) => none(),
            Some(libc::EPERM) => CliError::failure(format!(
                "cannot stop the daemon of {} (pid {pid}): it runs as another user; ask its owner (or use sudo)",
                home.display()
            )),
            _ => CliError::failure(format!("cannot signal pid {pid}: {e}")),
        });
    }
    let deadline = Instant::now() + STOP_WAIT;
    while home::daemon_running(&home) {
        if Instant::now() >= deadline {
            return Err(CliError::failure(format!(
                "sent SIGTERM to the daemon of {} (pid {pid}), but it still runs after {} s; see {}",
                home.display(),
                STOP_WAIT.as_secs(),
                home::daemon_log(&home).display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    outln!(
        "stopped the gpuq daemon of {} (pid {pid}); running jobs continue under their supervisors",
        home.display()
    );
    Ok(0)
}
