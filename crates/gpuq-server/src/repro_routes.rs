//! HTTP handlers of reproducibility: a job's record, and running it again.

use super::identity::Caller;
use super::routes::{authorize, parse_body, ApiResult, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gpuq_api::repro::{ReproView, RerunRequest};
use gpuq_core::JobId;

/// Everyone may see what a job ran, as everyone may see the queue; the
/// environment's values, the diff, the untracked names and the packages are
/// the owner's (and admins').
pub async fn repro(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<ReproView>> {
    let job = ctx.service.job(id)?;
    let owner = caller.admin || caller.user == job.user;
    Ok(Json(ctx.service.repro_view(id, owner)?))
}

/// The job's owner or an admin only: a rerun runs the owner's code with the
/// owner's environment.
pub async fn rerun(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<gpuq_core::Job>)> {
    authorize(&ctx, &caller, id, "rerun")?;
    let req: RerunRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RerunRequest::default()
    } else {
        parse_body(&body, "rerun request")?
    };
    Ok((
        StatusCode::CREATED,
        Json(ctx.service.rerun(id, req.repro, &caller)?),
    ))
}
