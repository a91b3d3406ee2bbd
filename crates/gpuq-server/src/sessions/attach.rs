//! `GET /v1/jobs/{id}/attach`: a shell's terminal. The client asks for an
//! upgrade to `gpuq-terminal`; after gpuq's auth (only the job's user) the
//! daemon connects to the supervisor's terminal socket and copies bytes both
//! ways. It never reads the stream: the frames are the supervisor's
//! (`gpuq_exec::terminal`).

use crate::auth::Credential;
use crate::identity::Caller;
use crate::routes::{ApiError, ApiResult, AppState};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use gpuq_api::sessions::TERMINAL_PROTOCOL;
use gpuq_core::session::SessionKind;
use gpuq_core::JobId;

pub async fn attach(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    credential: Option<Extension<Credential>>,
    Path(id): Path<JobId>,
    mut req: Request,
) -> ApiResult<Response> {
    if matches!(
        credential.map(|c| c.0),
        Some(Credential::JobToken | Credential::Browser)
    ) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "a shell is attached with your own credentials (the socket or your API token), \
             not a job's token or a browser session",
        ));
    }
    let asked = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !asked.eq_ignore_ascii_case(TERMINAL_PROTOCOL) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("attach is an upgrade: send `Connection: upgrade` and `Upgrade: {TERMINAL_PROTOCOL}` (gpuq shell does)"),
        ));
    }
    let Some(session) = ctx.service.live_session(id) else {
        let job = ctx.service.job(id)?;
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "job {id} is {} ({}), not a running shell",
                job.state.as_str(),
                job.reason.unwrap_or_default()
            ),
        ));
    };
    if session.user != caller.user {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "job {id} is {}'s shell: only {} may attach to it",
                session.user, session.user
            ),
        ));
    }
    if session.kind != SessionKind::Shell {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "job {id} is a notebook, not a shell: open it with `gpuq notebook {id}` or from the \
                 dashboard's Sessions page"
            ),
        ));
    }
    let socket = gpuq_exec::JobDir::new(ctx.service.home(), id).terminal_socket(session.attempt);
    let (Some(guard), true) = (ctx.service.session_client(id), session.ready) else {
        return Err(starting(id));
    };
    let Ok(terminal) = tokio::net::UnixStream::connect(&socket).await else {
        return Err(starting(id));
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let _guard = guard;
        if let Ok(client) = upgrade.await {
            let mut client = hyper_util::rt::TokioIo::new(client);
            let mut terminal = terminal;
            let _ = tokio::io::copy_bidirectional(&mut client, &mut terminal).await;
        }
    });
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    resp.headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static(TERMINAL_PROTOCOL));
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    Ok(resp)
}

fn starting(id: JobId) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the terminal of job {id} is not up yet; try again in a moment"),
    )
}
