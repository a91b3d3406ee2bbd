//! `gpuq profile`: `POST /v1/jobs/{id}/profile`, `GET /v1/jobs/{id}/profile/{request}`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileRequest {
    /// Steps to capture (1 to 500), counted by the job's calls of `gpuq.should_stop()`.
    pub steps: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProfileStatus {
    pub job: u64,
    /// The request's number (`GET …/profile/{request}` follows it).
    pub request: i64,
    pub steps: u32,
    /// The job wrote its capture.
    pub done: bool,
    /// The trace file (Chrome trace JSON: Perfetto, chrome://tracing, TensorBoard), in the job's outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The top operators and kernels, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}
