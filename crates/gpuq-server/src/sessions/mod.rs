//! Interactive sessions on the HTTP side: a notebook's JupyterLab proxied at
//! `/sessions/{id}/` (`proxy.rs`, reaching it through `jupyter.rs`), a
//! shell's terminal at `/v1/jobs/{id}/attach` (`attach.rs`), and their status
//! for `gpuq notebook` and the dashboard. What the daemon does around them
//! (launch, idle stop) is in `service/sessions.rs`.

pub mod attach;
pub mod jupyter;
pub mod proxy;

use crate::routes::{ApiError, ApiResult, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::any;
use axum::{Json, Router};
use gpuq_api::sessions::SessionStatus;
use gpuq_core::JobId;

/// The proxy's routes: outside the API's layers (JSON errors, body limit,
/// compression), which are not JupyterLab's.
pub fn proxy_router() -> Router<AppState> {
    Router::new()
        .route("/sessions/:id", any(proxy::proxy))
        .route("/sessions/:id/*rest", any(proxy::proxy))
}

/// `GET /v1/sessions`: every running session.
pub async fn list(State(ctx): State<AppState>) -> Json<Vec<SessionStatus>> {
    let ctx2 = ctx.clone();
    let sessions = tokio::task::spawn_blocking(move || ctx2.service.running_sessions())
        .await
        .unwrap_or_default();
    Json(sessions)
}

/// `GET /v1/sessions/{id}`: one session, running or not.
pub async fn show(
    State(ctx): State<AppState>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<SessionStatus>> {
    match ctx.service.session_status(id)? {
        Some(s) => Ok(Json(s)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("job {id} is not an interactive session"),
        )),
    }
}
