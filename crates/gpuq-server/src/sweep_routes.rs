//! Sweeps: create, list, show, cancel. Readable by every caller, like the
//! queue; a sweep is cancelled by its owner or an admin.

use super::identity::Caller;
use super::routes::{parse_body, ApiResult, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gpuq_api::sweep::{RungAnswer, SweepDetail, SweepRequest, SweepSummary};

pub async fn create(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<SweepDetail>)> {
    let req: SweepRequest = parse_body(&body, "sweep request")?;
    let service = ctx.service.clone();
    let detail = tokio::task::spawn_blocking(move || service.create_sweep(req, &caller))
        .await
        .map_err(|e| {
            crate::routes::ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        })??;
    Ok((StatusCode::CREATED, Json(detail)))
}

pub async fn list(State(ctx): State<AppState>) -> ApiResult<Json<Vec<SweepSummary>>> {
    Ok(Json(ctx.service.sweep_list()?))
}

pub async fn show(
    State(ctx): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<SweepDetail>> {
    Ok(Json(ctx.service.sweep_detail(id)?))
}

pub async fn cancel(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<i64>,
) -> ApiResult<Json<SweepDetail>> {
    Ok(Json(ctx.service.cancel_sweep(id, &caller)?))
}

/// A trial at its rung asks whether it trains on (with its job token).
pub async fn rung(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<gpuq_core::JobId>,
) -> ApiResult<Json<RungAnswer>> {
    let service = ctx.service.clone();
    let answer = tokio::task::spawn_blocking(move || service.trial_at_rung(id, &caller))
        .await
        .map_err(|e| {
            crate::routes::ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        })??;
    Ok(Json(answer))
}
