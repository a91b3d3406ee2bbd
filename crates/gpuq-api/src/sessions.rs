//! Interactive sessions (`gpuq notebook`, `gpuq shell`): `GET /v1/sessions`,
//! `GET /v1/sessions/{id}`; a notebook is served at `/sessions/{id}/`, a
//! shell's terminal is `GET /v1/jobs/{id}/attach` (an HTTP upgrade to
//! [`TERMINAL_PROTOCOL`]).

use gpuq_core::session::SessionKind;
use gpuq_core::JobState;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `Upgrade` protocol of a shell's terminal stream.
pub const TERMINAL_PROTOCOL: &str = "gpuq-terminal";

/// One interactive session, as the daemon sees it now.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SessionStatus {
    pub job: u64,
    pub kind: SessionKind,
    pub user: String,
    pub name: Option<String>,
    pub state: JobState,
    /// JupyterLab answers (a notebook), or the terminal is up (a shell).
    pub ready: bool,
    /// Where a notebook opens in the browser: `/sessions/{id}/{capability}/lab` (on the daemon's address). Only the notebook's user sees it: the capability is its door key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The session's GPUs (indices on its node).
    pub gpus: Vec<u32>,
    /// Clients connected now (browser tabs with a kernel or terminal open, attached shells).
    pub clients: u32,
    /// Kernels running code now.
    pub busy_kernels: u32,
    /// The utilisation of its busiest GPU when that keeps the session in use
    /// (at or above the idle threshold); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busy_percent: Option<f64>,
    /// `--idle-stop`, in ms (`None`: never stopped for being idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_stop_ms: Option<u64>,
    /// Since when the session has been idle (epoch ms); `None`: in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<i64>,
    /// When the idle stop is due, once the session was warned (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<i64>,
    /// The job's reason (why it waits, or how it ended).
    pub reason: String,
}
