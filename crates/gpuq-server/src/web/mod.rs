//! The dashboard: static pages at `/`, `/login` and `/assets/…`, and the login
//! routes under `/auth/`. The pages hold no data: everything they show they
//! fetch from the public API, as their user (see [`session`]).
//!
//! Architecture Invariant: without a live session only the login page and the
//! files it loads are served; the app's pages answer with a redirect to it.

mod assets;
pub mod session;

use crate::routes::AppState;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

pub use session::{browser_caller, WebConfig};

/// No inline script or style, nothing from another origin, never in a frame.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
                   form-action 'self'";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(app))
        .route("/index.html", get(app))
        .route("/login", get(login_page))
        .route("/assets/*path", get(asset))
        .route("/auth/link", post(session::link_info))
        .route("/auth/login", post(session::login))
        .route("/auth/session", get(session::current))
        .route("/auth/logout", post(session::logout))
}

fn has_session(ctx: &AppState, headers: &HeaderMap) -> bool {
    matches!(session::session_of(ctx, headers), Ok(Some(_)))
}

async fn app(State(ctx): State<AppState>, headers: HeaderMap) -> Response {
    if !has_session(&ctx, &headers) {
        let mut r = StatusCode::SEE_OTHER.into_response();
        r.headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static("/login"));
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return r;
    }
    serve("index.html", &headers)
}

async fn login_page(headers: HeaderMap) -> Response {
    serve("login.html", &headers)
}

async fn asset(
    State(ctx): State<AppState>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    if path.ends_with(".html") {
        return StatusCode::NOT_FOUND.into_response();
    }
    if !assets::PUBLIC.contains(&path.as_str()) && !has_session(&ctx, &headers) {
        return (StatusCode::UNAUTHORIZED, "log in first: /login").into_response();
    }
    serve(&path, &headers)
}

/// One embedded file with its security and caching headers; gzip-compressed
/// when the browser takes it; `304` when it still has this version.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(asset) = assets::get(name) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == asset.etag));
    let gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else if gzip {
        let mut r = asset.gzip.clone().into_response();
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        asset.body.into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    if let Ok(etag) = HeaderValue::from_str(&asset.etag) {
        h.insert(header::ETAG, etag);
    }
    // Pages are re-checked every time (a new daemon brings new files); the ETag keeps that cheap.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::VARY,
        HeaderValue::from_static("Accept-Encoding, Cookie"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}
