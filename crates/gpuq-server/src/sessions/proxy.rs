//! `/sessions/{id}/…`: a notebook's JupyterLab, proxied (HTTP and WebSocket)
//! after gpuq's own auth. Only the job's user gets through (an admin neither:
//! a notebook runs code as its user). The user never sees JupyterLab's token:
//! the proxy adds it to every request it forwards.
//!
//! A browser comes with the dashboard's session cookie. Navigations cannot
//! carry the dashboard's CSRF header, and cookies reach every port of the
//! host, so a cookie-borne request must also come from this origin: the
//! browser's `Sec-Fetch-Site` and `Origin` say so. A page elsewhere (another
//! port of the host included) may at most navigate to a notebook (a GET);
//! it cannot post to it, open its WebSockets, or load it as a resource.

use crate::auth::{bearer, token_caller, Credential};
use crate::identity::Caller;
use crate::routes::{ApiError, AppState};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use gpuq_core::session::SessionKind;
use gpuq_core::JobId;

/// Headers that belong to one connection, never forwarded as they are.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

pub async fn proxy(State(ctx): State<AppState>, req: Request) -> Response {
    match forward(ctx, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The job id of `/sessions/{id}` or `/sessions/{id}/…`, and whether the path went on.
fn session_path(path: &str) -> Option<(JobId, bool)> {
    let rest = path.strip_prefix("/sessions/")?;
    let (id, tail) = match rest.split_once('/') {
        Some((id, _)) => (id, true),
        None => (rest, false),
    };
    if id.is_empty() || id.len() > 19 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id.parse().ok()?, tail))
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
}

/// A cookie-borne request comes from this origin, or is a plain navigation.
fn browser_may(headers: &HeaderMap, method: &Method) -> bool {
    let get = method == Method::GET || method == Method::HEAD;
    let upgrade = is_upgrade(headers);
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let navigation = get && !upgrade && text("sec-fetch-mode") == Some("navigate");
    if let Some(site) = text("sec-fetch-site") {
        if site != "same-origin" && site != "none" && !navigation {
            return false;
        }
    }
    match (text("origin"), text("host")) {
        (Some(origin), Some(host)) => origin == format!("http://{host}"),
        (Some(_), None) => false,
        // Browsers send an Origin with every WebSocket and every request that
        // changes something; one without it is no browser's same-origin request.
        (None, _) => get && !upgrade,
    }
}

/// Who is asking: the socket's peer, a token's user, or a dashboard session.
fn caller(ctx: &AppState, req: &Request) -> Result<Caller, ApiError> {
    if let Some(c) = req.extensions().get::<Caller>() {
        return Ok(c.clone());
    }
    let presented = bearer(req.headers());
    if !presented.is_empty() {
        return match token_caller(ctx, presented)? {
            Some((_, Credential::JobToken)) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "a job's token does not open interactive sessions; use your own (gpuq token create)",
            )),
            Some((caller, _)) => Ok(caller),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing, wrong or revoked API token",
            )),
        };
    }
    if let Some((_, session)) = crate::web::session::session_of(ctx, req.headers())? {
        if !browser_may(req.headers(), req.method()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "a page of another origin may not use this notebook; open it from the dashboard",
            ));
        }
        return Ok(crate::web::session::web_caller(ctx, &session.user));
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "log in first: `gpuq notebook` prints a link that logs you in, or open the dashboard \
         (`gpuq dashboard`); scripts send `Authorization: Bearer <token>`",
    ))
}

/// A browser that is not logged in goes to the login page, which comes back here.
fn to_login(req: &Request, back: &str) -> Option<Response> {
    let html = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if !html || req.method() != Method::GET {
        return None;
    }
    let to = HeaderValue::from_str(&format!("/login#next={back}")).ok()?;
    Some((StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response())
}

async fn forward(ctx: AppState, mut req: Request) -> Result<Response, ApiError> {
    let path = req.uri().path().to_string();
    let Some((id, tail)) = session_path(&path) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no such session: /sessions/{job id}/",
        ));
    };
    if !tail {
        let to = format!("/sessions/{id}/lab");
        return Ok((StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response());
    }
    let who = match caller(&ctx, &req) {
        Ok(c) => c,
        Err(e) if e.status() == StatusCode::UNAUTHORIZED => {
            let back = format!("/sessions/{id}/lab");
            return Ok(to_login(&req, &back).unwrap_or_else(|| e.into_response()));
        }
        Err(e) => return Err(e),
    };
    let Some(session) = ctx.service.live_session(id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("job {id} is not a running notebook (gpuq show {id} says why)"),
        ));
    };
    if session.user != who.user {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "job {id} is {}'s notebook: only {} may open it",
                session.user, session.user
            ),
        ));
    }
    if session.kind != SessionKind::Notebook {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("job {id} is a shell, not a notebook: `gpuq shell --attach {id}` reaches it"),
        ));
    }
    if !session.ready {
        let mut r = (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("JupyterLab of job {id} is starting; this page reloads by itself"),
        )
            .into_response();
        r.headers_mut()
            .insert("refresh", HeaderValue::from_static("2"));
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        return Ok(r);
    }
    let owner = ctx
        .identity
        .job_account(&session.user)
        .map_err(|e| ApiError::new(StatusCode::FORBIDDEN, e))?
        .map(|a| a.uid);
    let upgrade = is_upgrade(req.headers());
    let downstream = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut out = hyper::Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map_or(path.clone(), |p| p.to_string()),
    );
    let headers = out.headers_mut().expect("a fresh builder has headers");
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if n == "authorization" || n == "cookie" || n == crate::web::session::CSRF_HEADER {
            continue;
        }
        if !upgrade && HOP_BY_HOP.contains(&n) {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    // The browser's other cookies (JupyterLab's own _xsrf) go on; the dashboard's do not.
    if let Some(cookies) = kept_cookies(&parts.headers, &ctx.web.cookie) {
        headers.insert(header::COOKIE, cookies);
    }
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("token {}", ctx.service.jupyter_token(id)))
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
    );
    let out = out
        .body(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    let dir = gpuq_exec::JobDir::new(ctx.service.home(), id).session_dir();
    let mut resp = crate::sessions::jupyter::send(&dir, owner, out)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!("JupyterLab of job {id} does not answer: {e}"),
            )
        })?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let (Some(downstream), Some(guard)) = (downstream, ctx.service.session_client(id)) else {
            return Err(ApiError::new(StatusCode::BAD_GATEWAY, "the session ended"));
        };
        let upstream = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let _guard = guard;
            if let (Ok(down), Ok(up)) = (downstream.await, upstream.await) {
                let mut down = hyper_util::rt::TokioIo::new(down);
                let mut up = hyper_util::rt::TokioIo::new(up);
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            }
        });
        let (parts, _) = resp.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }
    let (mut parts, body) = resp.into_parts();
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// The request's cookies without the dashboard's session cookie.
fn kept_cookies(headers: &HeaderMap, ours: &str) -> Option<HeaderValue> {
    let kept: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && c.split('=').next() != Some(ours))
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join("; ")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("gpu1:8585"));
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn session_paths_name_a_job() {
        assert_eq!(session_path("/sessions/12/lab"), Some((12, true)));
        assert_eq!(session_path("/sessions/12"), Some((12, false)));
        for bad in [
            "/sessions/",
            "/sessions/x/",
            "/sessions/-1/",
            "/sessions/99999999999999999999/",
            "/other/1/",
        ] {
            assert_eq!(session_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_this_origins_pages_may_use_a_notebook_with_the_cookie() {
        let get = Method::GET;
        let post = Method::POST;
        // The dashboard's and JupyterLab's own requests.
        assert!(browser_may(
            &headers(&[
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://gpu1:8585")
            ]),
            &post
        ));
        assert!(browser_may(
            &headers(&[("sec-fetch-site", "same-origin")]),
            &get
        ));
        // A link followed from elsewhere, or the address typed.
        assert!(browser_may(
            &headers(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "navigate")
            ]),
            &get
        ));
        assert!(browser_may(
            &headers(&[("sec-fetch-site", "none"), ("sec-fetch-mode", "navigate")]),
            &get
        ));
        // Another port of this host (same site, another origin): no posts, no
        // WebSockets, no loading as a resource.
        assert!(!browser_may(
            &headers(&[
                ("sec-fetch-site", "same-site"),
                ("origin", "http://gpu1:9999")
            ]),
            &post
        ));
        assert!(!browser_may(
            &headers(&[("origin", "http://gpu1:9999"), ("upgrade", "websocket")]),
            &get
        ));
        assert!(!browser_may(
            &headers(&[
                ("sec-fetch-site", "same-site"),
                ("sec-fetch-mode", "no-cors")
            ]),
            &get
        ));
        assert!(!browser_may(
            &headers(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "navigate")
            ]),
            &post
        ));
        // Without an Origin, only reads.
        assert!(!browser_may(&headers(&[]), &post));
        assert!(!browser_may(&headers(&[("upgrade", "websocket")]), &get));
    }

    #[test]
    fn the_dashboards_cookie_never_reaches_jupyterlab() {
        let h = headers(&[("cookie", "gpuq_session_8585=secret; _xsrf=abc; other=1")]);
        assert_eq!(
            kept_cookies(&h, "gpuq_session_8585").unwrap(),
            "_xsrf=abc; other=1"
        );
        let h = headers(&[("cookie", "gpuq_session_8585=secret")]);
        assert!(kept_cookies(&h, "gpuq_session_8585").is_none());
    }
}
