//! What a job's token may do. A job gets a token (MLFLOW_TRACKING_TOKEN,
//! GPUQ_TRIAL_TOKEN) that acts as its user while it runs; it is for tracking,
//! so it writes only the job's own run and the runs nested under it, reads
//! tracking data, and asks at a sweep trial's rung. Anything else (submitting,
//! cancelling, making tokens or experiments) needs the user's own credentials.

use super::{MlflowError, MlflowResult};
use crate::identity::Caller;
use crate::routes::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use gpuq_core::JobId;

/// Put on a request authenticated by a job's token: the job it was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobScope(pub JobId);

/// The caller of a tracking endpoint, with the job its token is scoped to.
#[derive(Debug, Clone)]
pub struct Writer {
    pub caller: Caller,
    pub job: Option<JobId>,
}

impl std::ops::Deref for Writer {
    type Target = Caller;
    fn deref(&self) -> &Caller {
        &self.caller
    }
}

#[axum::async_trait]
impl<S: Send + Sync> FromRequestParts<S> for Writer {
    type Rejection = MlflowError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let caller = parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            MlflowError::new(
                StatusCode::UNAUTHORIZED,
                "UNAUTHENTICATED",
                "no credentials: set MLFLOW_TRACKING_TOKEN to a gpuq token",
            )
        })?;
        let job = parts.extensions.get::<JobScope>().map(|s| s.0);
        Ok(Self { caller, job })
    }
}

/// MLflow endpoints that only read, though the client POSTs to them.
const READS: [&str; 3] = ["runs/search", "experiments/search", "logged-models/search"];

/// Why a job's token may not make this request, or `None` when it may: the
/// handlers then check which run it writes (`may_write`).
pub fn refusal(job: JobId, method: &Method, path: &str) -> Option<String> {
    let tracking = ["/api/2.0/mlflow/", "/ajax-api/2.0/mlflow/"]
        .iter()
        .find_map(|p| path.strip_prefix(p));
    let artifacts = [
        "/api/2.0/mlflow-artifacts/",
        "/ajax-api/2.0/mlflow-artifacts/",
    ]
    .iter()
    .any(|p| path.starts_with(p));
    let allowed = match tracking {
        _ if method == Method::GET || method == Method::HEAD => tracking.is_some() || artifacts,
        Some(endpoint) => READS.contains(&endpoint) || endpoint.starts_with("runs/"),
        None => artifacts || path == format!("/v1/jobs/{job}/rung"),
    };
    (!allowed).then(|| {
        format!(
            "this is job {job}'s token (MLFLOW_TRACKING_TOKEN): it only tracks job {job}'s run (and runs \
             nested under it) and reads tracking data; {method} {path} needs your own credentials \
             (the gpuq command over the unix socket, or a token from `gpuq token create`)"
        )
    })
}

/// How deep a chain of nested runs is followed up to the job's run.
const MAX_NESTING: usize = 16;

/// A job's token writes its job's run and the runs nested under it (the
/// MLflow client's `start_run(nested=True)`); other credentials are not limited here.
pub fn may_write(ctx: &AppState, writer: &Writer, run: &str) -> MlflowResult<()> {
    let Some(job) = writer.job else {
        return Ok(());
    };
    let own = job.to_string();
    let mut at = run.to_string();
    for _ in 0..MAX_NESTING {
        if at == own {
            return Ok(());
        }
        let parent = ctx
            .service
            .with_tracking(|t| t.run(&at))?
            .and_then(|r| r.tags.get("mlflow.parentRunId").cloned());
        match parent {
            Some(p) => at = p,
            None => break,
        }
    }
    Err(MlflowError::denied(format!(
        "this is job {job}'s token: it writes only job {job}'s run {own} and the runs nested under it, \
         not run {run}; use your own token for other runs"
    )))
}

/// A run a job's token creates must be nested under a run it may write.
pub fn may_create(ctx: &AppState, writer: &Writer, tags: &[(String, String)]) -> MlflowResult<()> {
    let Some(job) = writer.job else {
        return Ok(());
    };
    match tags.iter().find(|(k, _)| k == "mlflow.parentRunId") {
        Some((_, parent)) => may_write(ctx, writer, parent),
        None => Err(MlflowError::denied(format!(
            "this is job {job}'s token: it creates only runs nested under job {job}'s run \
             (mlflow.start_run(nested=True) inside the job); use your own token for other runs"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_token_reaches_tracking_and_its_own_rung_only() {
        let may = |m: Method, p: &str| refusal(7, &m, p).is_none();
        assert!(may(Method::GET, "/api/2.0/mlflow/runs/get"));
        assert!(may(Method::POST, "/api/2.0/mlflow/runs/log-batch"));
        assert!(may(Method::POST, "/ajax-api/2.0/mlflow/runs/search"));
        assert!(may(
            Method::PUT,
            "/api/2.0/mlflow-artifacts/artifacts/runs/7/a"
        ));
        assert!(may(Method::POST, "/v1/jobs/7/rung"));
        assert!(!may(Method::POST, "/v1/jobs/8/rung"));
        assert!(!may(Method::POST, "/v1/jobs"));
        assert!(!may(Method::POST, "/v1/jobs/3/cancel"));
        assert!(!may(Method::GET, "/v1/jobs"));
        assert!(!may(Method::POST, "/v1/tokens"));
        assert!(!may(Method::POST, "/api/2.0/mlflow/experiments/create"));
        assert!(!may(Method::POST, "/api/2.0/mlflow/experiments/delete"));
        let why = refusal(7, &Method::POST, "/v1/jobs").unwrap();
        assert!(
            why.contains("job 7's token") && why.contains("POST /v1/jobs"),
            "{why}"
        );
    }
}
