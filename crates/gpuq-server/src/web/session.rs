//! Browser sessions. `gpuq dashboard` asks for a login link (a single-use code
//! that lives two minutes); the login page trades the code, or an API token,
//! for a session: an HttpOnly, SameSite=Strict cookie plus a CSRF secret that
//! the page keeps in its own origin's storage and sends as `X-CSRF-Token` with
//! every request. Cookies are not isolated by port (RFC 6265 §8.5), so another
//! server on this host may be sent the cookie; without the secret, which only
//! this origin's page holds, the cookie alone opens nothing.

use crate::identity::{constant_time_eq, hash_token, Caller};
use crate::routes::{ApiError, ApiResult, AppState};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine;
use gpuq_api::home::now_ms;
use gpuq_api::web::{LoginLink, LoginRequest, SessionInfo};
use gpuq_store::web::WebSession;

/// How long a login link works.
pub const LINK_LIFETIME_MS: i64 = 2 * 60 * 1000;
/// How long a session lasts from login.
pub const SESSION_LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;
/// The header a page sends its session's CSRF secret in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Marks a request authenticated by a browser session (not a token or the socket).
#[derive(Clone, Copy)]
pub struct ViaBrowser;

/// What the web layer needs to know about the daemon.
pub struct WebConfig {
    /// The daemon's TCP address as a browser reaches it.
    pub url: String,
    /// The session cookie's name: one per port, so two daemons on one host
    /// keep their sessions apart.
    pub cookie: String,
}

impl WebConfig {
    pub fn new(url: &str) -> Self {
        let port = url.rsplit(':').next().unwrap_or("").trim_end_matches('/');
        Self {
            url: url.to_string(),
            cookie: format!("gpuq_session_{port}"),
        }
    }
}

fn secret() -> ApiResult<String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("no randomness: {e}"),
        )
    })?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn bad_request(why: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, why)
}

/// The session id in the request's cookie named `name`, if any.
pub fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

/// The live session behind the request's cookie (the CSRF secret not checked).
pub fn session_of(ctx: &AppState, headers: &HeaderMap) -> ApiResult<Option<(String, WebSession)>> {
    let Some(id) = cookie_value(headers, &ctx.web.cookie) else {
        return Ok(None);
    };
    let hash = hash_token(&id);
    let session = ctx.service.with_store(|s| s.web_session(&hash, now_ms()))?;
    Ok(session.map(|s| (id, s)))
}

/// The caller of a request that carries a session cookie: `None` without a
/// (live) session, an error when the session is live but the request lacks
/// its CSRF secret (a page of another site, or another origin on this host).
pub fn browser_caller(ctx: &AppState, headers: &HeaderMap) -> ApiResult<Option<Caller>> {
    let Some((_, session)) = session_of(ctx, headers)? else {
        return Ok(None);
    };
    let presented = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !constant_time_eq(presented.as_bytes(), session.csrf.as_bytes()) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this request has a dashboard session cookie but not its CSRF token (X-CSRF-Token): \
             only the dashboard's own pages may act with a session; reload it, or log in again",
        ));
    }
    Ok(Some(web_caller(ctx, &session.user)))
}

/// A dashboard user acts as themselves, never as the daemon's owner account.
fn web_caller(ctx: &AppState, user: &str) -> Caller {
    ctx.identity.caller(user.to_string())
}

/// A login from a page of another site (or a script that says it is one) is refused.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    match (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) {
        (Some(origin), Some(host)) => origin.split_once("://").is_some_and(|(_, h)| h == host),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// `POST /v1/login-links`: a single-use link that logs the caller in.
pub async fn create_link(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    via_browser: Option<Extension<ViaBrowser>>,
) -> ApiResult<Json<LoginLink>> {
    if via_browser.is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "login links are made with `gpuq dashboard` (the socket or an API token), not from a browser session",
        ));
    }
    let code = secret()?;
    let expires_at = now_ms() + LINK_LIFETIME_MS;
    let hash = hash_token(&code);
    let user = caller.user.clone();
    ctx.service
        .with_store_mut(|s| s.create_web_link(&hash, &user, expires_at))?;
    Ok(Json(LoginLink {
        url: format!("{}/login#code={code}", ctx.web.url),
        user: caller.user,
        expires_at,
    }))
}

/// `POST /auth/login` with `{"code"}` (from a link) or `{"token"}` (an API token).
pub async fn login(
    State(ctx): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    if !same_origin(&headers) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "logins come from the dashboard's own login page, not from another site",
        ));
    }
    let req: LoginRequest = serde_json::from_slice(&body).map_err(|e| {
        bad_request(format!(
            "the body must be JSON {{\"code\": …}} or {{\"token\": …}}: {e}"
        ))
    })?;
    let now = now_ms();
    let (user, token_id) = match (req.code.as_deref(), req.token.as_deref()) {
        (Some(code), None) => {
            let hash = hash_token(code.trim());
            let user = ctx
                .service
                .with_store_mut(|s| s.redeem_web_link(&hash, now))?
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "this login link was used already or has expired (links work once, for two minutes): \
                         run `gpuq dashboard` again",
                    )
                })?;
            (user, None)
        }
        (None, Some(token)) => token_login(&ctx, token.trim())?,
        _ => {
            return Err(bad_request(
                "give either code (from `gpuq dashboard`) or token, not both",
            ))
        }
    };
    let id = secret()?;
    let session = WebSession {
        user,
        csrf: secret()?,
        expires_at: now + SESSION_LIFETIME_MS,
    };
    let hash = hash_token(&id);
    ctx.service
        .with_store_mut(|s| s.create_web_session(&hash, &session, token_id, now))?;
    let cookie = format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        ctx.web.cookie,
        SESSION_LIFETIME_MS / 1000
    );
    let info = session_info(&ctx, &session, true);
    let mut response = Json(info).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| bad_request(e.to_string()))?,
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Who an API token is: the daemon's own, or a per-user one (whose id the
/// session keeps, so revoking the token ends the session). Job tokens do not log in.
fn token_login(ctx: &AppState, token: &str) -> ApiResult<(String, Option<i64>)> {
    let refused = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "that token is not valid: paste an API token from `gpuq token create` (or use `gpuq dashboard`)",
        )
    };
    if token.is_empty() {
        return Err(refused());
    }
    if constant_time_eq(token.as_bytes(), ctx.token.as_bytes()) {
        return Ok((ctx.identity.owner.clone(), None));
    }
    if token.starts_with("gpuqjob_") {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a job's token does not open the dashboard: use your own (`gpuq token create`)",
        ));
    }
    let hash = hash_token(token);
    let found = ctx
        .service
        .token_user(&hash)?
        .filter(|(_, _, stored)| constant_time_eq(stored, &hash));
    found
        .map(|(id, user, _)| (user, Some(id)))
        .ok_or_else(refused)
}

fn session_info(ctx: &AppState, session: &WebSession, with_csrf: bool) -> SessionInfo {
    let caller = web_caller(ctx, &session.user);
    SessionInfo {
        user: caller.user,
        admin: caller.admin,
        expires_at: session.expires_at,
        csrf: with_csrf.then(|| session.csrf.clone()),
    }
}

/// `GET /auth/session`: who the session is (the CSRF secret checked, not returned).
pub async fn current(
    State(ctx): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Json<SessionInfo>> {
    let unauthorized = || ApiError::new(StatusCode::UNAUTHORIZED, "not logged in: open /login");
    browser_caller(&ctx, &headers)?.ok_or_else(unauthorized)?;
    let (_, session) = session_of(&ctx, &headers)?.ok_or_else(unauthorized)?;
    Ok(Json(session_info(&ctx, &session, false)))
}

/// `POST /auth/logout`: ends the session and clears its cookie.
pub async fn logout(State(ctx): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    browser_caller(&ctx, &headers)?;
    if let Some((id, _)) = session_of(&ctx, &headers)? {
        let hash = hash_token(&id);
        ctx.service
            .with_store_mut(|s| s.delete_web_session(&hash))?;
    }
    let cookie = format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        ctx.web.cookie
    );
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| bad_request(e.to_string()))?,
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_exact_name_and_bounded() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; gpuq_session_8585x=2; gpuq_session_8585=abc"),
        );
        assert_eq!(
            cookie_value(&h, "gpuq_session_8585").as_deref(),
            Some("abc")
        );
        assert_eq!(cookie_value(&h, "gpuq_session_1"), None);
        let long = format!("gpuq_session_1={}", "x".repeat(200));
        h.insert(header::COOKIE, HeaderValue::from_str(&long).unwrap());
        assert_eq!(cookie_value(&h, "gpuq_session_1"), None);
        assert_eq!(
            WebConfig::new("http://127.0.0.1:8585").cookie,
            "gpuq_session_8585"
        );
    }

    #[test]
    fn logins_from_other_sites_are_refused() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            same_origin(&h)
        };
        assert!(with(&[]));
        assert!(with(&[
            ("origin", "http://127.0.0.1:8585"),
            ("host", "127.0.0.1:8585")
        ]));
        assert!(!with(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8585")
        ]));
        assert!(!with(&[
            ("origin", "http://127.0.0.1:9999"),
            ("host", "127.0.0.1:8585")
        ]));
        assert!(!with(&[("sec-fetch-site", "cross-site")]));
        assert!(!with(&[("sec-fetch-site", "same-site")]));
        assert!(with(&[("sec-fetch-site", "same-origin")]));
    }
}
