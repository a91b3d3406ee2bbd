//! `gpuq server`: run the daemon in the foreground; `gpuq server stop`: stop
//! the daemon of `GPUQ_HOME`.

use super::{CliError, CmdResult};
use gpuq_api::home::{self, DaemonFile};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServerArgs {
    #[command(subcommand)]
    action: Option<ServerAction>,
    /// Address to listen on [default: 127.0.0.1:8585].
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// GPUs to schedule: auto (NVML), none, or sim:N simulated GPUs.
    #[arg(long, default_value = "auto")]
    gpus: String,
    /// Jobs that may run at once [default: 4 per CPU core, at least 8].
    #[arg(long)]
    slots: Option<u32>,
    /// Configuration file (shares, quotas) [default: $GPUQ_HOME/gpuq.toml if present].
    #[arg(long)]
    config: Option<std::path::PathBuf>,
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
    let gpus = args
        .gpus
        .parse()
        .map_err(|e: gpuq_gpu::GpuSourceError| CliError::usage(e.to_string()))?;
    let home = home::resolve_home();
    super::connect::check_root_home(&home)?;
    let config = gpuq_server::config::Config::load(args.config.as_deref(), &home)
        .map_err(CliError::usage)?;
    let pricing = gpuq_server::pricing::Pricing::resolve(&config.cost).map_err(CliError::usage)?;
    init_logging();
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(|| home.join("gpuq.toml"));
    let opts = gpuq_server::ServerOptions {
        pricing,
        config,
        config_path,
        listen: args.listen,
        gpus,
        slots: args.slots,
        home,
    };
    gpuq_server::run(opts).map_err(|e| CliError::failure(format!("{e:#}")))?;
    Ok(0)
}

fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("GPUQ_LOG").unwrap_or_else(|_| "info".into());
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
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
