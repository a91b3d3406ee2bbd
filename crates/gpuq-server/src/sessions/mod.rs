//! Interactive sessions on the HTTP side: a notebook's JupyterLab proxied at
//! `/sessions/{id}/` (`proxy.rs`, reaching it through `jupyter.rs`), a
//! shell's terminal at `/v1/jobs/{id}/attach` (`attach.rs`), and their status
//! for `gpuq notebook` and the dashboard. What the daemon does around them
//! (launch, idle stop) is in `service/sessions.rs`.

pub mod attach;
pub mod jupyter;
pub mod proxy;

use crate::auth::Credential;
use crate::identity::Caller;
use crate::routes::{ApiError, ApiResult, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::any;
use axum::Extension;
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

/// A notebook's path holds its capability: only its user sees it, and not
/// through a job's token (a job gets no way into a notebook).
fn for_caller(
    mut s: SessionStatus,
    caller: &Caller,
    credential: Option<&Credential>,
) -> SessionStatus {
    if s.user != caller.user || matches!(credential, Some(Credential::JobToken)) {
        s.path = None;
    }
    s
}

/// `GET /v1/sessions`: every running session.
pub async fn list(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    credential: Option<Extension<Credential>>,
) -> Json<Vec<SessionStatus>> {
    let ctx2 = ctx.clone();
    let sessions = tokio::task::spawn_blocking(move || ctx2.service.running_sessions())
        .await
        .unwrap_or_default();
    let credential = credential.map(|Extension(c)| c);
    Json(
        sessions
            .into_iter()
            .map(|s| for_caller(s, &caller, credential.as_ref()))
            .collect(),
    )
}

/// `GET /v1/sessions/{id}`: one session, running or not.
pub async fn show(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    credential: Option<Extension<Credential>>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<SessionStatus>> {
    match ctx.service.session_status(id)? {
        Some(s) => Ok(Json(for_caller(
            s,
            &caller,
            credential.as_ref().map(|Extension(c)| c),
        ))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("job {id} is not an interactive session"),
        )),
    }
}
