//! Job arrays on the command line: `ID.K` names task K of array ID; a plain
//! `ID` that is an array's id names the whole array for `cancel`, `hold`,
//! `release`, `requeue`, `wait`, `show`, `explain` and `ls`. The daemon keeps
//! `/v1/jobs/{id}` for one job; this client resolves `ID.K` to the task's job
//! id (`GET /v1/arrays/{id}/tasks/{k}`) and sends whole-array actions to
//! `/v1/arrays/{id}/…`.

use super::CliError;
use gpuq_api::arrays::ArrayDetail;
use gpuq_api::Client;
use gpuq_core::{JobId, JobRef};

/// What an argument names.
pub enum Target {
    /// One job (a plain one, or one task of an array).
    Job(JobId),
    /// A whole array (without its tasks).
    Array(Box<ArrayDetail>),
}

/// Parses `ID` or `ID.K`; bad text is bad usage (exit 2).
pub fn parse_ref(s: &str) -> Result<JobRef, CliError> {
    if !s.contains(['.', '_']) {
        return super::parse_id(s).map(JobRef::Job);
    }
    s.parse::<JobRef>()
        .map_err(|e| CliError::usage(e.to_string()))
}

/// The job an argument names: `ID` is that job (for an array's id, its first
/// task), `ID.K` task K of array ID. For commands about one job (logs, metrics…).
pub async fn job_id(client: &Client, s: &str) -> Result<JobId, CliError> {
    match parse_ref(s)? {
        JobRef::Job(id) => Ok(id),
        JobRef::Task { array, index } => Ok(client.array_task(array, index).await?.id),
    }
}

/// What an argument names for a command that can act on a whole array: a
/// plain `ID` of an array is the array.
pub async fn target(client: &Client, s: &str) -> Result<Target, CliError> {
    match parse_ref(s)? {
        JobRef::Task { array, index } => Ok(Target::Job(client.array_task(array, index).await?.id)),
        JobRef::Job(id) => Ok(match client.array_if_any(id).await? {
            Some(a) => Target::Array(Box::new(a)),
            None => Target::Job(id),
        }),
    }
}

/// How an array is named in listings, as squeue does (`12_[0-99%8]`): its id,
/// the indices and its limit: `12.[0-99%8]`.
pub fn array_label(a: &ArrayDetail) -> String {
    let limit = a.limit.map(|l| format!("%{l}")).unwrap_or_default();
    format!("{}.[{}{limit}]", a.id, a.indices)
}

/// "6 tasks [0-5], at most 2 at once"
pub fn array_shape(a: &ArrayDetail) -> String {
    let limit = a
        .limit
        .map(|l| format!(", at most {l} at once"))
        .unwrap_or_default();
    format!(
        "{} [{}]{limit}",
        gpuq_core::plural(a.size.into(), "task"),
        a.indices
    )
}
