//! `gpuq notebook`: JupyterLab as a job on reserved GPUs, served by the daemon
//! at `/sessions/<id>/<capability>/` behind gpuq's own login; prints a link that logs in
//! and opens it once JupyterLab answers.

use super::session_args::SessionArgs;
use super::submit::is_executable;
use super::{CliError, CmdResult};
use gpuq_api::Client;
use gpuq_core::session::SessionKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct NotebookArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// The notebook's working directory (its files; default: this directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The JupyterLab to run: a `jupyter-lab` (or `jupyter`) executable, or a
    /// virtual environment's directory. Default: `jupyter-lab` on PATH.
    #[arg(long, env = "GPUQ_JUPYTER")]
    jupyter: Option<PathBuf>,
    /// Print the job id and return at once, without waiting for JupyterLab.
    #[arg(long)]
    no_wait: bool,
    /// Print the session as JSON (job, url, user) once it is ready.
    #[arg(long)]
    json: bool,
}

/// The `jupyter-lab` to run, checked here (a missing one is an error now, not
/// a job that fails later).
fn find_jupyter(asked: Option<&Path>) -> Result<PathBuf, CliError> {
    let not_found = |what: String| {
        CliError::usage(format!(
            "{what}; install JupyterLab (`pip install jupyterlab`, in the environment your notebooks use), \
             or name one with --jupyter /path/to/venv/bin/jupyter-lab (or GPUQ_JUPYTER)"
        ))
    };
    let path = match asked {
        Some(p) if p.is_dir() => p.join("bin").join("jupyter-lab"),
        Some(p) if p.file_name().is_some_and(|n| n == "jupyter") => p.with_file_name("jupyter-lab"),
        Some(p) => p.to_path_buf(),
        None => {
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| d.join("jupyter-lab"))
                .find(|p| is_executable(p))
                .ok_or_else(|| {
                    not_found("JupyterLab was not found: no jupyter-lab on PATH".into())
                })?
        }
    };
    let path = std::path::absolute(&path).unwrap_or(path);
    if !is_executable(&path) {
        return Err(not_found(format!(
            "--jupyter: {} is not an executable jupyter-lab",
            path.display()
        )));
    }
    Ok(path)
}

/// Runs `jupyter-lab --version`: an environment whose JupyterLab is broken
/// (a missing module) says so now.
async fn check_runs(jupyter: &Path) -> Result<(), CliError> {
    let run = tokio::process::Command::new(jupyter)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .map_err(|_| {
            CliError::usage(format!(
                "{} --version did not answer within 60 s",
                jupyter.display()
            ))
        })?
        .map_err(|e| CliError::usage(format!("cannot run {}: {e}", jupyter.display())))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").trim();
        return Err(CliError::usage(format!(
            "{} does not run ({last}); reinstall JupyterLab there (`pip install jupyterlab`), or name another with --jupyter",
            jupyter.display()
        )));
    }
    Ok(())
}

pub async fn run(client: &Client, args: NotebookArgs) -> CmdResult {
    let jupyter = find_jupyter(args.jupyter.as_deref())?;
    check_runs(&jupyter).await?;
    let dir = match &args.dir {
        Some(d) => {
            let abs = std::path::absolute(d).unwrap_or_else(|_| d.clone());
            if !abs.is_dir() {
                return Err(CliError::usage(format!(
                    "--dir: {} is not a directory; create it first, or leave --dir out to use this one",
                    d.display()
                )));
            }
            Some(abs.display().to_string())
        }
        None => None,
    };
    let mut spec = args.session.spec(SessionKind::Notebook, "notebook")?;
    spec.command = Some(vec![jupyter.display().to_string()]);
    spec.cwd = dir;
    let job = super::session_args::submit(client, spec).await?;
    if args.no_wait {
        outln!("{}", job.id);
        return Ok(0);
    }
    errln!(
        "gpuq: notebook job {} queued (JupyterLab {})",
        job.id,
        jupyter.display()
    );
    let up = super::session_args::wait_ready(client, job.id).await?;
    if let super::session_args::Up::Ended(s) = &up {
        let log = super::session_args::log_text(client, job.id).await;
        let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(4096)..]);
        return Err(CliError::failure(format!(
            "job {} ended before JupyterLab was up: {} ({}); the end of its log:\n{}",
            job.id,
            s.state,
            s.reason,
            tail.trim_end()
        )));
    }
    // The notebook's path holds its capability: the daemon tells it to its user only.
    let path = match up {
        super::session_args::Up::Ready(s) => s.path.unwrap_or_default(),
        super::session_args::Up::Ended(_) => String::new(),
    };
    let link = client.login_link().await?;
    let url = format!("{}&next={path}", link.url);
    if args.json {
        super::output::print_json(&serde_json::json!({
            "job": job.id,
            "url": url,
            "path": path,
            "user": link.user,
            "expires_at": link.expires_at,
        }));
    } else {
        outln!("{url}");
        errln!(
            "gpuq: JupyterLab is ready. The link logs you in once, within 2 minutes; afterwards the \
             dashboard's Sessions page opens it. `gpuq cancel {}` ends it (open notebooks are saved).",
            job.id
        );
    }
    Ok(0)
}
