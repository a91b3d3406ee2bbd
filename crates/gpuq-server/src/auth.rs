//! Authentication of TCP requests: `Authorization: Bearer <token>`, either the
//! daemon's own token (`$GPUQ_HOME/token`, its owner, an admin) or a per-user
//! token (`gpuq token create`), or a dashboard session (its cookie plus its
//! CSRF header, see `web::session`). Requests over the unix socket arrive with
//! their `Caller` already set from the peer's credentials.

use super::identity::{constant_time_eq, hash_token, Caller};
use super::routes::{ApiError, AppState};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

/// How a TCP request proved who it is (requests over the socket have none:
/// the kernel said). Some things only some credentials may do: a login link
/// or an API token is never made by a job's token or from a browser session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    DaemonToken,
    /// A per-user token, by id: what it makes (a login link's session) dies with it.
    UserToken(i64),
    JobToken,
    Browser,
}

pub async fn authenticate(
    State(ctx): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if req.extensions().get::<Caller>().is_some() {
        return Ok(next.run(req).await);
    }
    let presented = bearer(req.headers()).to_string();
    if presented.is_empty() {
        if let Some(caller) = crate::web::browser_caller(&ctx, req.headers())? {
            if let Err(why) = crate::listen::authenticated(&req, &caller) {
                return Ok(too_many(&req, why));
            }
            req.extensions_mut().insert(caller);
            req.extensions_mut().insert(Credential::Browser);
            return Ok(next.run(req).await);
        }
    }
    let found = token_caller(&ctx, &presented)?;
    if let Some((_, Credential::JobToken)) = found {
        // A job's token tracks its job's run; it is no way to act as the user.
        if let Some(job) = ctx.service.job_of_token(&presented) {
            let path = req.uri().path();
            if let Some(why) = crate::mlflow::scope::refusal(job, req.method(), path) {
                return Err(if crate::mlflow::is_mlflow_path(path) {
                    ApiError::mlflow(StatusCode::FORBIDDEN, why)
                } else {
                    ApiError::new(StatusCode::FORBIDDEN, why)
                });
            }
            req.extensions_mut()
                .insert(crate::mlflow::scope::JobScope(job));
        }
    }
    let caller = found.map(|(caller, credential)| {
        req.extensions_mut().insert(credential);
        caller
    });
    let Some(caller) = caller else {
        if crate::mlflow::is_mlflow_path(req.uri().path()) {
            return Err(ApiError::mlflow(
                StatusCode::UNAUTHORIZED,
                "missing, wrong or revoked API token: set MLFLOW_TRACKING_TOKEN to a gpuq token \
                 (`gpuq token create`), or inside a job use the one gpuq sets",
            ));
        }
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing, wrong or revoked API token; send `Authorization: Bearer <token>` (the daemon's is in \
             $GPUQ_HOME/token; `gpuq token create --user NAME` makes one per user)",
        ));
    };
    // Its connection is no longer one of the unauthenticated few, and counts
    // against its user (see `listen.rs`).
    if let Err(why) = crate::listen::authenticated(&req, &caller) {
        return Ok(too_many(&req, why));
    }
    req.extensions_mut().insert(caller);
    Ok(next.run(req).await)
}

/// `503` for a caller who holds too many TCP connections; this one is closed
/// after the answer (it is not counted, so it must not stay).
pub(crate) fn too_many(req: &Request, why: String) -> Response {
    use axum::response::IntoResponse;
    let err = if crate::mlflow::is_mlflow_path(req.uri().path()) {
        ApiError::mlflow(StatusCode::SERVICE_UNAVAILABLE, why)
    } else {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why)
    };
    let mut resp = err.into_response();
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    resp
}

/// Who a presented bearer token is: the daemon's own, a job's or a user's.
pub fn token_caller(
    ctx: &AppState,
    presented: &str,
) -> Result<Option<(Caller, Credential)>, ApiError> {
    Ok(
        if constant_time_eq(presented.as_bytes(), ctx.token.as_bytes()) {
            Some((ctx.identity.owner_caller(), Credential::DaemonToken))
        } else if presented.is_empty() {
            None
        } else if presented.starts_with("gpuqjob_") {
            ctx.service
                .job_token_caller(presented)
                .map(|c| (c, Credential::JobToken))
        } else {
            let hash = hash_token(presented);
            ctx.service
                .token_user(&hash)?
                .filter(|(_, _, stored)| constant_time_eq(stored, &hash))
                .map(|(id, user, _)| (ctx.identity.caller(user), Credential::UserToken(id)))
        },
    )
}

/// The bearer token of a request ("" without one).
pub fn bearer(headers: &axum::http::HeaderMap) -> &str {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}
