//! `/sessions/{id}/{capability}/…`: a notebook's JupyterLab, proxied (HTTP and
//! WebSocket) after gpuq's own auth. Only the job's user gets through (an
//! admin neither: a notebook runs code as its user). The user never sees
//! JupyterLab's token: the proxy adds it to every request it forwards.
//!
//! Every request needs the notebook's capability in its path (see
//! `Service::notebook_base`), checked in constant time, and a credential of
//! the notebook's user. A browser comes with the dashboard's session cookie,
//! but browsers send a host's cookies to every port, and navigations cannot
//! carry the dashboard's CSRF header; headers such as `Origin` or
//! `Sec-Fetch-Site` prove nothing either (a server that received the cookie
//! sends what it likes). The path does not travel to another port: only the
//! user's own API calls learn it, and every answer here says
//! `Referrer-Policy: no-referrer`, so no link followed from JupyterLab
//! carries it elsewhere. The origin check on cookie-borne requests stays, as
//! a second fence for browsers.

use crate::auth::{bearer, token_caller, Credential};
use crate::identity::{constant_time_eq, Caller};
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
    let mut r = match forward(ctx, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    // JupyterLab's pages link elsewhere (its help menu): a Referer would carry
    // the notebook's path, capability included, to that site.
    r.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// The job id of `/sessions/{id}/…` and the capability segment that follows it
/// (empty when there is none). The capability goes on to JupyterLab as part
/// of its base URL.
fn session_path(path: &str) -> Option<(JobId, &str)> {
    let rest = path.strip_prefix("/sessions/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if id.is_empty() || id.len() > 19 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let capability = tail.split('/').next().unwrap_or("");
    Some((id.parse().ok()?, capability))
}

/// Whether `path` lies under `base` (`/sessions/{id}/{capability}/`), compared
/// in constant time: a wrong guess says nothing about how close it was.
fn under_base(path: &str, base: &str) -> bool {
    let (p, b) = (path.as_bytes(), base.as_bytes());
    // `/sessions/{id}/{capability}`, without its last slash.
    if p.len() + 1 == b.len() {
        return constant_time_eq(p, &b[..p.len()]);
    }
    p.len() >= b.len() && constant_time_eq(&p[..b.len()], b)
}

fn no_such_notebook(id: JobId) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no notebook at this address: open job {id} from the dashboard's Sessions page, \
             or with the link `gpuq notebook` printed (its address changes with each start)"
        ),
    )
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
    let Some((id, capability)) = session_path(&path) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no such session: /sessions/{job id}/{its capability}/",
        ));
    };
    let Some(session) = ctx.service.live_session(id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("job {id} is not a running notebook (gpuq show {id} says why)"),
        ));
    };
    // The capability before anything else: without it, no credential (a
    // cookie, forged headers, even a token) learns more than "not here".
    let base = ctx.service.notebook_base(id, session.attempt);
    if capability.is_empty() || !under_base(&path, &base) {
        return Err(no_such_notebook(id));
    }
    if path.len() < base.len() {
        let to = format!("{base}lab");
        return Ok((StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response());
    }
    let who = match caller(&ctx, &req) {
        Ok(c) => c,
        Err(e) if e.status() == StatusCode::UNAUTHORIZED => {
            let back = format!("{base}lab");
            return Ok(to_login(&req, &back).unwrap_or_else(|| e.into_response()));
        }
        Err(e) => return Err(e),
    };
    if let Err(why) = crate::listen::authenticated(&req, &who) {
        return Ok(crate::auth::too_many(&req, why));
    }
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
    fn session_paths_name_a_job_and_a_capability() {
        assert_eq!(session_path("/sessions/12/abc/lab"), Some((12, "abc")));
        assert_eq!(session_path("/sessions/12/abc"), Some((12, "abc")));
        assert_eq!(session_path("/sessions/12/lab"), Some((12, "lab")));
        assert_eq!(session_path("/sessions/12/"), Some((12, "")));
        assert_eq!(session_path("/sessions/12"), Some((12, "")));
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
    fn only_paths_under_the_notebooks_capability_get_through() {
        let base = "/sessions/12/0123456789abcdef0123456789abcdef/";
        for ok in [
            "/sessions/12/0123456789abcdef0123456789abcdef/lab",
            "/sessions/12/0123456789abcdef0123456789abcdef/api/kernels",
            "/sessions/12/0123456789abcdef0123456789abcdef/",
            "/sessions/12/0123456789abcdef0123456789abcdef",
        ] {
            assert!(under_base(ok, base), "{ok}");
        }
        // What the old paths were, a guess, a prefix of the key, another
        // notebook's key, another job: refused, whatever came with them.
        for bad in [
            "/sessions/12/lab",
            "/sessions/12/api/kernels",
            "/sessions/12/",
            "/sessions/12/0123456789abcdef0123456789abcdee/lab",
            "/sessions/12/0123456789abcdef/lab",
            "/sessions/12/0123456789abcdef0123456789abcdef0/lab",
            "/sessions/13/0123456789abcdef0123456789abcdef/lab",
            "/sessions/12/0123456789ABCDEF0123456789ABCDEF/lab",
        ] {
            assert!(!under_base(bad, base), "{bad}");
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
