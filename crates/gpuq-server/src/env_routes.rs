//! `GET /v1/envs` and `GET /v1/envs/{key}/log`: the cached Python environments.

use super::identity::Caller;
use super::routes::{ApiError, ApiResult, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};

/// Everyone may see the list, as everyone sees the queue.
pub async fn list(State(ctx): State<AppState>) -> ApiResult<Json<Vec<gpuq_api::envs::EnvView>>> {
    Ok(Json(ctx.service.env_views()?))
}

/// A build's log: its user's or an admin's to read (a setup script may print anything).
pub async fn log(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
) -> ApiResult<String> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no environment {key:?}; `gpuq envs` lists them"),
        )
    };
    if key.is_empty() || key.len() > 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(not_found());
    }
    let view = ctx
        .service
        .env_views()?
        .into_iter()
        .find(|e| e.key == key)
        .ok_or_else(not_found)?;
    if !(caller.admin || caller.user == view.user) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "environment {key} is {}'s: only they or an admin may read its log",
                view.user
            ),
        ));
    }
    ctx.service.env_log(&key).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("environment {key} has no build log"),
        )
    })
}
