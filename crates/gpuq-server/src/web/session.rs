//! Browser sessions. `gpuq dashboard` asks for a login link (a single-use code
//! that lives two minutes); the login page trades the code, or an API token,
//! for a session: an HttpOnly, SameSite=Strict cookie plus a CSRF secret that
//! the page keeps in its own origin's storage and sends as `X-CSRF-Token` with
//! every request. Cookies are not isolated by port (RFC 6265 §8.5), so another
//! server on this host may be sent the cookie; without the secret, which only
//! this origin's page holds, the cookie alone opens nothing.

use crate::auth::Credential;
use crate::identity::{constant_time_eq, hash_token, Caller};
use crate::routes::{ApiError, ApiResult, AppState};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine;
use gpuq_api::home::now_ms;
use gpuq_api::web::{EndSessions, LinkInfo, LoginLink, LoginRequest, SessionInfo, SessionsEnded};
use gpuq_store::web::WebSession;

/// How long a login link works.
pub const LINK_LIFETIME_MS: i64 = 2 * 60 * 1000;
/// How long a session lasts from login.
pub const SESSION_LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;
/// The header a page sends its session's CSRF secret in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Login links one user may have open (not used, not expired) at once.
pub const MAX_LIVE_LINKS: u32 = 20;
/// Cookies of our name looked at in one request: another server on this host
/// can set more of them (with longer paths, sent first) to push ours out.
const MAX_COOKIES: usize = 4;

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

/// The values of the request's cookies named `name` (the first few, each of a
/// sane length), in the order the browser sent them.
pub fn cookie_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, v)| *k == name && !v.is_empty() && v.len() <= 128)
        .map(|(_, v)| v.to_string())
        .take(MAX_COOKIES)
        .collect()
}

/// The live sessions behind the request's cookies, with their ids.
fn live_sessions(ctx: &AppState, headers: &HeaderMap) -> ApiResult<Vec<(String, WebSession)>> {
    let now = now_ms();
    let mut live = Vec::new();
    for id in cookie_values(headers, &ctx.web.cookie) {
        let hash = hash_token(&id);
        if let Some(session) = ctx.service.with_store(|s| s.web_session(&hash, now))? {
            live.push((id, session));
        }
    }
    Ok(live)
}

/// The first live session behind the request's cookies (the CSRF secret not
/// checked: for the pages themselves, which a navigation loads without headers).
pub fn session_of(ctx: &AppState, headers: &HeaderMap) -> ApiResult<Option<(String, WebSession)>> {
    Ok(live_sessions(ctx, headers)?.into_iter().next())
}

/// The live session whose CSRF secret the request carries: `None` without a
/// live session, an error when there is one but the request lacks its secret
/// (a page of another site, or another origin on this host).
fn checked_session(ctx: &AppState, headers: &HeaderMap) -> ApiResult<Option<(String, WebSession)>> {
    let live = live_sessions(ctx, headers)?;
    if live.is_empty() {
        return Ok(None);
    }
    let presented = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    live.into_iter()
        .find(|(_, s)| constant_time_eq(presented.as_bytes(), s.csrf.as_bytes()))
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "this request has a dashboard session cookie but not its CSRF token (X-CSRF-Token): \
                 only the dashboard's own pages may act with a session; reload it, or log in again",
            )
        })
}

/// The caller of a request that carries a session cookie and its CSRF secret.
pub fn browser_caller(ctx: &AppState, headers: &HeaderMap) -> ApiResult<Option<Caller>> {
    Ok(checked_session(ctx, headers)?.map(|(_, s)| web_caller(ctx, &s.user)))
}

/// A dashboard user acts as themselves, never as the daemon's owner account.
pub fn web_caller(ctx: &AppState, user: &str) -> Caller {
    ctx.identity.caller(user.to_string())
}

/// A login from a page of another site (or a script that says it is one) is refused.
pub fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    match (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) {
        // The daemon serves plain HTTP: its pages' origin is exactly this.
        (Some(origin), Some(host)) => origin == format!("http://{host}"),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// `POST /v1/login-links`: a single-use link that logs the caller in. Made
/// from the socket or an API token; a job's token or a browser session makes
/// none (a job's token dies with its job; a session would outlive it).
pub async fn create_link(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    credential: Option<Extension<Credential>>,
) -> ApiResult<Json<LoginLink>> {
    let token_id = match credential.map(|Extension(c)| c) {
        Some(Credential::Browser) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "login links are made with `gpuq dashboard` (the socket or an API token), not from a browser session",
            ))
        }
        Some(Credential::JobToken) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "a job's token makes no login link (a session would outlive the job): \
                 run `gpuq dashboard` as yourself",
            ))
        }
        Some(Credential::UserToken(id)) => Some(id),
        Some(Credential::DaemonToken) | None => None,
    };
    let code = secret()?;
    let now = now_ms();
    let expires_at = now + LINK_LIFETIME_MS;
    let hash = hash_token(&code);
    let user = caller.user.clone();
    let made = ctx.service.with_store_mut(|s| {
        s.create_web_link(&hash, &user, token_id, expires_at, now, MAX_LIVE_LINKS)
    })?;
    if made.is_none() {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{user} has {MAX_LIVE_LINKS} login links not yet used: use one, or wait two minutes for them to expire"
            ),
        ));
    }
    Ok(Json(LoginLink {
        url: format!("{}/login#code={code}", ctx.web.url),
        user: caller.user,
        expires_at,
    }))
}

/// Refuses a login request from another origin, or one that is not JSON (a
/// form of another site cannot send JSON without asking first).
fn check_login_request(headers: &HeaderMap) -> ApiResult<()> {
    if !same_origin(headers) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "logins come from the dashboard's own login page, not from another site",
        ));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim() == "application/json");
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the login as JSON (Content-Type: application/json)",
        ));
    }
    Ok(())
}

fn used_link() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this login link was used already or has expired (links work once, for two minutes): \
         run `gpuq dashboard` again",
    )
}

/// `POST /auth/link` with `{"code"}`: whose the link is, without using it up,
/// so that the login page asks "log in as …?" before a link replaces a session.
pub async fn link_info(
    State(ctx): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<LinkInfo>> {
    check_login_request(&headers)?;
    let req: LoginRequest = serde_json::from_slice(&body)
        .map_err(|e| bad_request(format!("the body must be JSON {{\"code\": …}}: {e}")))?;
    let code = req
        .code
        .ok_or_else(|| bad_request("code: give the link's code"))?;
    let hash = hash_token(code.trim());
    let user = ctx
        .service
        .with_store(|s| s.web_link_user(&hash, now_ms()))?
        .ok_or_else(used_link)?;
    Ok(Json(LinkInfo { user }))
}

/// `POST /auth/login` with `{"code"}` (from a link) or `{"token"}` (an API token).
pub async fn login(
    State(ctx): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    check_login_request(&headers)?;
    let req: LoginRequest = serde_json::from_slice(&body).map_err(|e| {
        bad_request(format!(
            "the body must be JSON {{\"code\": …}} or {{\"token\": …}}: {e}"
        ))
    })?;
    let now = now_ms();
    let (user, token_id) = match (req.code.as_deref(), req.token.as_deref()) {
        (Some(code), None) => {
            let hash = hash_token(code.trim());
            ctx.service
                .with_store_mut(|s| s.redeem_web_link(&hash, now))?
                .ok_or_else(used_link)?
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
    let (_, session) = checked_session(&ctx, &headers)?
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "not logged in: open /login"))?;
    Ok(Json(session_info(&ctx, &session, false)))
}

/// `POST /auth/logout`: ends the session and clears its cookie.
pub async fn logout(State(ctx): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if let Some((id, _)) = checked_session(&ctx, &headers)? {
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

/// `POST /v1/dashboard-sessions/end`: ends browser sessions: the caller's own,
/// another user's or everyone's (admins). Rotating a token does not end the
/// sessions made with a link it did not ask for; this does.
pub async fn end_sessions(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(req): Json<EndSessions>,
) -> ApiResult<Json<SessionsEnded>> {
    let user = match (req.all, req.user.as_deref()) {
        (true, Some(_)) => return Err(bad_request("give user or all, not both")),
        (true, None) => None,
        (false, Some(u)) => Some(u.to_string()),
        (false, None) => Some(caller.user.clone()),
    };
    if user.as_deref() != Some(caller.user.as_str()) && !caller.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "only an admin ends other users' dashboard sessions",
        ));
    }
    let ended = ctx
        .service
        .with_store_mut(|s| s.end_web_sessions(user.as_deref()))?;
    Ok(Json(SessionsEnded { ended }))
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
        assert_eq!(cookie_values(&h, "gpuq_session_8585"), vec!["abc"]);
        assert!(cookie_values(&h, "gpuq_session_1").is_empty());
        // Cookies tossed in by another server on this host do not push ours out.
        let tossed = format!(
            "gpuq_session_1={}; gpuq_session_1=junk; gpuq_session_1=ours",
            "x".repeat(200)
        );
        h.insert(header::COOKIE, HeaderValue::from_str(&tossed).unwrap());
        assert_eq!(cookie_values(&h, "gpuq_session_1"), vec!["junk", "ours"]);
        let many: Vec<String> = (0..10).map(|i| format!("gpuq_session_1=v{i}")).collect();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&many.join("; ")).unwrap(),
        );
        assert_eq!(cookie_values(&h, "gpuq_session_1").len(), MAX_COOKIES);
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
        assert!(!with(&[
            ("origin", "https://127.0.0.1:8585"),
            ("host", "127.0.0.1:8585")
        ]));
        assert!(!with(&[("origin", "null"), ("host", "127.0.0.1:8585")]));
        assert!(!with(&[("sec-fetch-site", "cross-site")]));
        assert!(!with(&[("sec-fetch-site", "same-site")]));
        assert!(with(&[("sec-fetch-site", "same-origin")]));
    }
}
