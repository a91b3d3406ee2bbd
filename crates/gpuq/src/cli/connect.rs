//! Finding the daemon: `--url`/`GPUQ_URL`, else the daemon of `GPUQ_HOME`,
//! started in the background when none answers (unless `GPUQ_NO_AUTOSTART=1`).

use super::CliError;
use gpuq_api::home::{self, DaemonFile};
use gpuq_api::Client;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

pub async fn connect(url: Option<String>) -> Result<Client, CliError> {
    let home = home::resolve_home();
    if let Some(url) = url.filter(|u| !u.trim().is_empty()) {
        let token = home::read_token(&home).unwrap_or_default();
        return Ok(Client::new(&url, &token));
    }
    if let Some(client) = running_daemon(&home).await? {
        return Ok(client);
    }
    if std::env::var("GPUQ_NO_AUTOSTART").is_ok_and(|v| v == "1") {
        return Err(CliError::failure(format!(
            "no gpuq daemon is running for GPUQ_HOME={}; start one with `gpuq server` (or unset GPUQ_NO_AUTOSTART to let gpuq start it)",
            home.display()
        )));
    }
    let pid = start_daemon(&home)?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Some(client) = running_daemon(&home).await? {
            say_started(&client, &home, pid).await;
            return Ok(client);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(CliError::failure(format!(
        "started a gpuq daemon but it did not answer within 15 s; see {}",
        home::daemon_log(&home).display()
    )))
}

/// The daemon of `home` if one answers; an error when one answers but refuses
/// (it runs: starting another would only fail on its lock).
async fn running_daemon(home: &std::path::Path) -> Result<Option<Client>, CliError> {
    // The unix socket first: the daemon knows who we are without a token (and a
    // daemon run as root for everyone has a token only root can read).
    let socket = home::socket_path(home);
    if socket.exists() {
        let token = home::read_token(home).unwrap_or_default();
        let client = Client::unix(&socket, &token);
        match client.health().await {
            Ok(()) => return Ok(Some(client)),
            Err(e @ gpuq_api::ApiError::Refused { .. }) => {
                return Err(CliError::failure(e.to_string()))
            }
            Err(_) => {}
        }
    }
    let Some((daemon, token)) = DaemonFile::read(home).zip(home::read_token(home)) else {
        return Ok(None);
    };
    let client = Client::new(&daemon.url, &token);
    Ok(client.health().await.is_ok().then_some(client))
}

/// What was started, and with how many GPUs: a daemon without any refuses every
/// `--gpus N`, so say at once how to try gpuq with simulated ones.
async fn say_started(client: &Client, home: &std::path::Path, pid: u32) {
    let started = format!(
        "gpuq: started a daemon for {} (pid {pid}, log {})",
        home.display(),
        home::daemon_log(home).display()
    );
    match client.info().await {
        Ok(info) if info.gpus == 0 => errln!(
            "{started} with 0 GPUs: {}; to try gpuq with simulated GPUs: \
             `gpuq server stop`, then `gpuq server --gpus sim:4 &`",
            info.gpu_discovery
        ),
        Ok(info) => errln!(
            "{started} with {}: {}",
            gpuq_core::plural(info.gpus as u64, "GPU"),
            info.gpu_discovery
        ),
        Err(_) => errln!("{started}"),
    }
}

/// As root, makes GPUQ_HOME only along a route no other account controls
/// (every component checked, links included), else refuses with exit status 2.
pub fn check_root_home(home: &std::path::Path) -> Result<(), CliError> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    gpuq_exec::safe_fs::make_trusted_dir(home, 0)
        .map(|_| ())
        .map_err(|e| {
            CliError::usage(format!(
                "GPUQ_HOME {} is not safe for a daemon run as root: {e}",
                home.display()
            ))
        })
}

fn start_daemon(home: &std::path::Path) -> Result<u32, CliError> {
    check_root_home(home)?;
    std::fs::create_dir_all(home)
        .map_err(|e| CliError::failure(format!("cannot create {}: {e}", home.display())))?;
    let log_path = home::daemon_log(home);
    // Private and never through a link, as the daemon itself opens it.
    let log = super::daemon_log::open_append(&log_path)
        .map_err(|e| CliError::failure(format!("cannot open {}: {e}", log_path.display())))?;
    let log_err = log
        .try_clone()
        .map_err(|e| CliError::failure(e.to_string()))?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::failure(format!("cannot find the gpuq binary: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    // `--autostart`: what gpuq.toml leaves open is what the home's last daemon
    // ran with (its simulated GPUs, say), not the defaults. Its stderr is the
    // log too, for what goes wrong before the daemon opens the log itself.
    cmd.args(["server", "--autostart"])
        .env("GPUQ_HOME", home)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    // SAFETY: setsid is async-signal-safe; the daemon leaves the client's session and terminal.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| CliError::failure(format!("cannot start the gpuq daemon: {e}")))?;
    Ok(child.id())
}
