//! HTTP handlers of job arrays: `/v1/arrays/{id}…` (an array as a whole, and
//! one task by its index) and `/v1/listing` (the queue with each array as one
//! row). The same owner-or-admin rule as for jobs: every task of an array has
//! the array's user, checked on its first task (whose id is the array's).

use super::identity::Caller;
use super::routes::{authorize, redact, ApiError, ApiResult, AppState};
use super::service::arrays::detail_of;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use gpuq_api::arrays::{ArrayDetail, ListRow};
use gpuq_core::{Job, JobId};
use serde::Deserialize;
use std::time::Duration;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/arrays/:id", get(show))
        .route("/v1/arrays/:id/tasks/:index", get(task))
        .route("/v1/arrays/:id/cancel", post(cancel))
        .route("/v1/arrays/:id/hold", post(hold))
        .route("/v1/arrays/:id/release", post(release))
        .route("/v1/arrays/:id/requeue", post(requeue))
        .route("/v1/arrays/:id/wait", get(wait))
        .route("/v1/listing", get(listing))
}

/// 404 for an id that is not an array's, saying what it is instead.
fn not_an_array(ctx: &AppState, id: JobId) -> ApiError {
    let what = match ctx.service.job(id) {
        Ok(job) => match job.reference() {
            gpuq_core::JobRef::Task { array, index } => format!(
                "job {id} is not an array: it is task {index} of array {array} (gpuq show {array}.{index})"
            ),
            gpuq_core::JobRef::Job(_) => format!("job {id} is not an array (gpuq show {id})"),
        },
        Err(_) => format!("array {id} does not exist (see gpuq ls)"),
    };
    ApiError::new(StatusCode::NOT_FOUND, what)
}

/// The array with its tasks as `caller` may see them (environment values are the owner's).
fn detail(ctx: &AppState, caller: &Caller, id: JobId, with_tasks: bool) -> ApiResult<ArrayDetail> {
    if !with_tasks {
        return ctx
            .service
            .array_summary(id)?
            .ok_or_else(|| not_an_array(ctx, id));
    }
    let now = gpuq_api::home::now_ms();
    let tasks: Vec<Job> = ctx
        .service
        .array_tasks(id)?
        .into_iter()
        .map(|mut t| {
            ctx.service.add_live_state(&mut t, now);
            redact(t, caller)
        })
        .collect();
    detail_of(tasks, true).ok_or_else(|| not_an_array(ctx, id))
}

#[derive(Deserialize)]
pub struct ShowQuery {
    /// Include the tasks (default true).
    tasks: Option<bool>,
}

pub async fn show(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
    Query(q): Query<ShowQuery>,
) -> ApiResult<Json<ArrayDetail>> {
    Ok(Json(detail(&ctx, &caller, id, q.tasks.unwrap_or(true))?))
}

pub async fn task(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, index)): Path<(JobId, u32)>,
) -> ApiResult<Json<Job>> {
    if let Some(mut job) = ctx.service.array_task(id, index)? {
        ctx.service
            .add_live_state(&mut job, gpuq_api::home::now_ms());
        return Ok(Json(redact(job, &caller)));
    }
    let array = detail(&ctx, &caller, id, false)?;
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "array {id} has no task {index}; its tasks are {} (gpuq ls {id})",
            array.indices
        ),
    ))
}

/// Runs `act` on array `id` for its owner or an admin; answers with the array
/// and the indices acted on.
fn act(
    ctx: &AppState,
    caller: &Caller,
    id: JobId,
    verb: &str,
    act: impl FnOnce() -> Result<Vec<u32>, super::service::ServiceError>,
) -> ApiResult<Json<ArrayDetail>> {
    // The array's existence first: a plain job's id is refused as not an array.
    detail(ctx, caller, id, false)?;
    authorize(ctx, caller, id, verb)?;
    let acted = act()?;
    let mut array = detail(ctx, caller, id, false)?;
    array.acted_on = Some(acted);
    Ok(Json(array))
}

pub async fn cancel(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<ArrayDetail>> {
    act(&ctx, &caller, id, "cancel", || {
        ctx.service.cancel_array(id, &caller.user)
    })
}

pub async fn hold(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<ArrayDetail>> {
    act(&ctx, &caller, id, "hold", || {
        ctx.service.hold_array(id, true, &caller.user)
    })
}

pub async fn release(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<ArrayDetail>> {
    act(&ctx, &caller, id, "release", || {
        ctx.service.hold_array(id, false, &caller.user)
    })
}

pub async fn requeue(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<ArrayDetail>> {
    act(&ctx, &caller, id, "requeue", || {
        ctx.service.requeue_array(id, &caller.user)
    })
}

#[derive(Deserialize)]
pub struct WaitQuery {
    /// Seconds to hold the request at most (default 30, at most 300).
    timeout: Option<u64>,
}

pub async fn wait(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
    Query(q): Query<WaitQuery>,
) -> ApiResult<Json<ArrayDetail>> {
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(q.timeout.unwrap_or(30).min(300));
    let mut changes = ctx.service.subscribe();
    loop {
        changes.borrow_and_update();
        let array = detail(&ctx, &caller, id, false)?;
        if array.ended()
            || tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
        {
            return Ok(Json(array));
        }
    }
}

pub async fn listing(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<crate::routes::ListQuery>,
) -> ApiResult<Json<Vec<ListRow>>> {
    let filter = crate::routes::list_filter(&q)?;
    let now = gpuq_api::home::now_ms();
    let rows = ctx.service.listing(&filter)?;
    Ok(Json(
        rows.into_iter()
            .map(|mut row| {
                ctx.service.add_live_state(&mut row.job, now);
                row.job = redact(row.job, &caller);
                row
            })
            .collect(),
    ))
}
