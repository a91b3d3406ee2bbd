//! What `gpuq notebook` and `gpuq shell` share: the reservation's flags, the
//! submit, and waiting until the session is up.

use super::CliError;
use gpuq_api::Client;
use gpuq_core::session::{SessionKind, SessionSpec};
use gpuq_core::{DurationSpec, Job, JobSpec, JobState};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct SessionArgs {
    /// GPUs to reserve, all on one node.
    #[arg(long, default_value_t = 0)]
    gpus: u32,
    /// Only GPUs whose model contains this, e.g. A100 or L4.
    #[arg(long)]
    gpu_type: Option<String>,
    /// Only GPUs with at least this much memory, e.g. 40G.
    #[arg(long)]
    gpu_mem: Option<String>,
    /// CPU cores reserved for the session [default: the daemon's share per
    /// GPU; none without GPUs].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    cpus: Option<String>,
    /// Host memory reserved for the session, its limit, e.g. 16G.
    #[arg(long, value_name = "SIZE")]
    mem: Option<String>,
    /// End the session after this long, idle or not (e.g. 8h).
    #[arg(long)]
    time_limit: Option<String>,
    /// Stop the session once it was idle this long (no code ran, no client was
    /// connected, its GPUs under the idle threshold), or `off`.
    #[arg(long, default_value = "30m")]
    idle_stop: String,
    /// Project its GPU-hours and cost count against.
    #[arg(long)]
    project: Option<String>,
    /// A name for listings.
    #[arg(long)]
    name: Option<String>,
}

impl SessionArgs {
    pub fn spec(&self, kind: SessionKind, default_name: &str) -> Result<JobSpec, CliError> {
        let duration = |flag: &str, text: &str| {
            text.parse::<DurationSpec>()
                .map_err(|e| CliError::usage(format!("{flag}: {e}")))
        };
        let idle_stop = match self.idle_stop.as_str() {
            "off" | "never" | "0" => None,
            t => Some(duration("--idle-stop", t)?),
        };
        let spec = JobSpec {
            name: Some(self.name.clone().unwrap_or_else(|| default_name.into())),
            gpus: self.gpus,
            gpu_type: self.gpu_type.clone(),
            gpu_mem: self
                .gpu_mem
                .as_deref()
                .map(|m| {
                    m.parse()
                        .map_err(|e| CliError::usage(format!("--gpu-mem: {e}")))
                })
                .transpose()?,
            cpus: self
                .cpus
                .as_deref()
                .map(super::submit::parse_cpus)
                .transpose()?,
            memory: self
                .mem
                .as_deref()
                .map(super::submit::parse_mem)
                .transpose()?,
            time_limit: self
                .time_limit
                .as_deref()
                .map(|t| duration("--time-limit", t))
                .transpose()?,
            project: self.project.clone(),
            session: Some(SessionSpec { kind, idle_stop }),
            ..Default::default()
        };
        Ok(spec)
    }
}

/// Submits a job gpuq itself composed (a session, a doctor's or a tune's
/// trial) with the caller's directory and environment, no repro capture.
pub async fn submit(client: &Client, spec: JobSpec) -> Result<Job, CliError> {
    let (cwd, env) = super::submit::submitter_context()?;
    let req = gpuq_api::SubmitRequest {
        spec,
        cwd,
        env,
        user: gpuq_api::home::current_user(),
        idempotency_key: None,
        repro: None,
    };
    Ok(client.submit(&req).await?)
}

/// How waiting for a session ended.
pub enum Up {
    /// Up: its status (a notebook's carries its path, capability included).
    Ready(Box<gpuq_api::sessions::SessionStatus>),
    /// The job ended first (a shell's short command, a JupyterLab that failed).
    Ended(gpuq_api::sessions::SessionStatus),
}

/// Waits until the session is up, saying why it waits meanwhile.
pub async fn wait_ready(client: &Client, id: u64) -> Result<Up, CliError> {
    let mut said = String::new();
    loop {
        let s = client.session(id).await?;
        if s.state == JobState::Running && s.ready {
            return Ok(Up::Ready(Box::new(s)));
        }
        if s.state.is_terminal() {
            return Ok(Up::Ended(s));
        }
        let now = match s.state {
            JobState::Running => "starting".to_string(),
            state if s.reason.is_empty() => state.to_string(),
            state => format!("{state}: {}", s.reason),
        };
        if now != said {
            errln!("gpuq: job {id} {now}");
            said = now;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The job's whole log (its first attempt's and later ones', as the daemon serves it).
pub async fn log_text(client: &Client, id: u64) -> Vec<u8> {
    client
        .log(id, None, 0, false)
        .await
        .map(|c| c.data)
        .unwrap_or_default()
}
