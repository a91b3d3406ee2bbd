//! The dashboard's doors, tested over raw HTTP against a real daemon: what is
//! served without a session, the login link (single use), the session cookie's
//! flags, the CSRF header every request with a cookie needs, token logins,
//! revocation and logout, and what a second user sees and may do. The pages
//! themselves are driven in headless Chromium by tests/browser/.

mod common;
mod raw_http;

use common::Daemon;
use raw_http::{request, Reply};

/// The second user (the account the multi-user tests use).
const BOB: &str = "gpuqtestb";

fn url_code(d: &Daemon) -> (String, String) {
    let url = d.ok(&["dashboard", "--print-url"]).trim().to_string();
    let (base, code) = url.split_once("/login#code=").expect("a login link");
    assert_eq!(base, d.url, "the link points at the daemon: {url}");
    (url.clone(), code.to_string())
}

fn login(d: &Daemon, body: &str) -> Reply {
    request(
        &d.url,
        "POST",
        "/auth/login",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
}

/// A browser's session: its cookie and CSRF secret.
struct Session {
    cookie: String,
    csrf: String,
}

impl Session {
    fn from(reply: &Reply) -> Self {
        assert_eq!(reply.status, 200, "{}", reply.text());
        let set = reply.header("set-cookie").expect("a session cookie");
        let cookie = set.split(';').next().unwrap().to_string();
        let csrf = reply.json().unwrap()["csrf"].as_str().unwrap().to_string();
        Self { cookie, csrf }
    }
    fn get(&self, d: &Daemon, path: &str) -> Reply {
        request(
            &d.url,
            "GET",
            path,
            &[("cookie", &self.cookie), ("x-csrf-token", &self.csrf)],
            b"",
        )
    }
    fn post(&self, d: &Daemon, path: &str) -> Reply {
        request(
            &d.url,
            "POST",
            path,
            &[
                ("cookie", &self.cookie),
                ("x-csrf-token", &self.csrf),
                ("content-type", "application/json"),
            ],
            b"{}",
        )
    }
}

#[test]
fn without_a_session_only_the_login_page_is_served() {
    let d = Daemon::start("sim:1");
    let root = request(&d.url, "GET", "/", &[], b"");
    assert_eq!(root.status, 303);
    assert_eq!(root.header("location"), Some("/login"));
    for path in [
        "/assets/app.js",
        "/assets/vendor/uPlot.iife.min.js",
        "/index.html",
    ] {
        let r = request(&d.url, "GET", path, &[], b"");
        assert!(r.status == 401 || r.status == 303, "{path}: {}", r.status);
    }
    let page = request(&d.url, "GET", "/login", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.content_type.starts_with("text/html"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    for path in ["/assets/login.js", "/assets/app.css"] {
        assert_eq!(request(&d.url, "GET", path, &[], b"").status, 200, "{path}");
    }
    // A cookie that names no session opens nothing either.
    let forged = request(&d.url, "GET", "/", &[("cookie", "gpuq_session_1=abc")], b"");
    assert_eq!(forged.status, 303);
    let api = request(&d.url, "GET", "/v1/jobs", &[], b"");
    assert_eq!(api.status, 401);
}

#[test]
fn a_login_link_works_once_and_sets_a_strict_http_only_cookie() {
    let d = Daemon::start("sim:1");
    let (_, code) = url_code(&d);
    let body = format!("{{\"code\": \"{code}\"}}");
    let first = login(&d, &body);
    let session = Session::from(&first);
    let set = first.header("set-cookie").unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(set.contains(flag), "{flag} missing in {set}");
    }
    let again = login(&d, &body);
    assert_eq!(again.status, 401, "a link works once");
    assert!(again.text().contains("gpuq dashboard"), "{}", again.text());

    let app = request(&d.url, "GET", "/", &[("cookie", &session.cookie)], b"");
    assert_eq!(app.status, 200);
    assert!(app.text().contains("<html"), "{}", app.text());
    let me = session.get(&d, "/auth/session").json().unwrap();
    assert_eq!(
        me["user"],
        d.ok(&["whoami"]).split_whitespace().next().unwrap()
    );
    assert!(
        me.get("csrf").is_none(),
        "the secret is given once, at login"
    );

    // The cookie alone (another origin on this host is sent it too) acts on nothing.
    let id = d.submit(&["--", "sleep", "300"]);
    d.wait_running(id);
    for (method, path) in [
        ("GET", "/v1/jobs".to_string()),
        ("POST", format!("/v1/jobs/{id}/cancel")),
    ] {
        let r = request(&d.url, method, &path, &[("cookie", &session.cookie)], b"");
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        assert!(r.text().contains("X-CSRF-Token"), "{}", r.text());
        let wrong = request(
            &d.url,
            method,
            &path,
            &[("cookie", &session.cookie), ("x-csrf-token", "nope")],
            b"",
        );
        assert_eq!(wrong.status, 403);
    }
    assert_eq!(d.show(id)["state"], "running");
    let cancelled = session.post(&d, &format!("/v1/jobs/{id}/cancel"));
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());

    // A session cannot mint more links; the command line can.
    assert_eq!(session.post(&d, "/v1/login-links").status, 403);

    // Logging out ends it.
    assert_eq!(session.post(&d, "/auth/logout").status, 204);
    assert_eq!(session.get(&d, "/v1/jobs").status, 401);
    assert_eq!(
        request(&d.url, "GET", "/", &[("cookie", &session.cookie)], b"").status,
        303
    );
}

#[test]
fn logins_from_other_sites_and_bad_bodies_are_refused() {
    let d = Daemon::start("sim:1");
    let (_, code) = url_code(&d);
    let body = format!("{{\"code\": \"{code}\"}}");
    let cross = request(
        &d.url,
        "POST",
        "/auth/login",
        &[
            ("content-type", "application/json"),
            ("origin", "http://evil.example"),
        ],
        body.as_bytes(),
    );
    assert_eq!(cross.status, 403, "{}", cross.text());
    let other_port = request(
        &d.url,
        "POST",
        "/auth/login",
        &[
            ("content-type", "application/json"),
            ("sec-fetch-site", "same-site"),
        ],
        body.as_bytes(),
    );
    assert_eq!(other_port.status, 403);
    // The refused tries did not use the link up.
    Session::from(&login(&d, &body));
    for bad in [
        "",
        "{",
        "[]",
        "{\"code\": 5}",
        "{\"code\": \"a\", \"token\": \"b\"}",
        "{}",
        "{\"user\": \"root\"}",
    ] {
        let r = login(&d, bad);
        assert!(
            r.status == 400 || r.status == 401,
            "{bad}: {} {}",
            r.status,
            r.text()
        );
        assert!(
            r.json().is_some_and(|j| j["error"].is_string()),
            "{bad}: {}",
            r.text()
        );
    }
    assert_eq!(login(&d, "{\"token\": \"gpuq_wrong\"}").status, 401);
    assert_eq!(login(&d, "{\"token\": \"gpuqjob_1_x\"}").status, 401);
}

#[test]
fn a_token_login_is_that_users_and_dies_with_the_token() {
    let d = Daemon::start("sim:2");
    // The daemon's own token is its owner.
    let owner = Session::from(&login(&d, &format!("{{\"token\": \"{}\"}}", d.token())));
    assert_eq!(
        owner.get(&d, "/auth/session").json().unwrap()["admin"],
        true
    );

    let secret_job = d.submit(&["--env", "WANDB_API_KEY=hunter2", "--", "sleep", "300"]);
    d.wait_running(secret_job);
    // A daemon run as root serves accounts; any other serves names.
    if common::running_as_root() {
        common::ensure_user(BOB);
    }
    let created: serde_json::Value =
        serde_json::from_str(&d.ok(&["token", "create", "--user", BOB, "--json"])).unwrap();
    let bob = Session::from(&login(
        &d,
        &format!("{{\"token\": \"{}\"}}", created["token"].as_str().unwrap()),
    ));
    let me = bob.get(&d, "/auth/session").json().unwrap();
    assert_eq!(
        (me["user"].as_str(), me["admin"].as_bool()),
        (Some(BOB), Some(false))
    );

    // Bob sees the queue but not the values of another's environment, and cannot act on it.
    let job = bob.get(&d, &format!("/v1/jobs/{secret_job}"));
    assert_eq!(job.status, 200);
    assert!(!job.text().contains("hunter2"), "{}", job.text());
    assert!(!bob.get(&d, "/v1/jobs").text().contains("hunter2"));
    assert!(!bob
        .get(&d, &format!("/v1/jobs/{secret_job}/repro"))
        .text()
        .contains("hunter2"));
    for action in ["cancel", "hold", "requeue"] {
        let r = bob.post(&d, &format!("/v1/jobs/{secret_job}/{action}"));
        assert_eq!(r.status, 403, "{action}: {}", r.text());
    }
    assert_eq!(d.show(secret_job)["state"], "running");
    assert!(owner
        .get(&d, &format!("/v1/jobs/{secret_job}"))
        .text()
        .contains("hunter2"));

    d.ok(&["token", "revoke", &created["id"].to_string()]);
    assert_eq!(
        bob.get(&d, "/auth/session").status,
        401,
        "revoking the token ends its sessions"
    );
    assert_eq!(bob.get(&d, "/v1/jobs").status, 401);
    // Jobs outlive the test's daemon: end them.
    d.ok(&["cancel", &secret_job.to_string()]);
    d.wait(secret_job);
}

#[test]
fn the_queue_pages_on_the_server_and_assets_are_compressed() {
    let d = Daemon::start("sim:1");
    let ids: Vec<u64> = (0..5)
        .map(|i| {
            // One GPU each on a one-GPU daemon: the first runs, the others queue.
            d.submit(&[
                "--gpus",
                "1",
                "--project",
                if i % 2 == 0 { "even" } else { "odd" },
                "--",
                "sleep",
                "300",
            ])
        })
        .collect();
    let token = d.token();
    let page = |q: &str| raw_http::get(&d.url, &token, &format!("/v1/jobs?{q}"));
    let ids_of = |r: &Reply| -> Vec<u64> {
        r.json()
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_u64().unwrap())
            .collect()
    };
    let first = page("limit=2");
    assert_eq!(ids_of(&first), vec![ids[4], ids[3]]);
    assert_eq!(first.header("x-total-count"), Some("5"));
    let next = page(&format!("limit=2&before={}", ids[3]));
    assert_eq!(ids_of(&next), vec![ids[2], ids[1]]);
    let back = page(&format!("limit=2&after={}", ids[2]));
    assert_eq!(
        ids_of(&back),
        vec![ids[4], ids[3]],
        "paging back still reads newest first"
    );
    let even = page("project=even&limit=100");
    assert_eq!(ids_of(&even), vec![ids[4], ids[2], ids[0]]);
    assert_eq!(even.header("x-total-count"), Some("3"));
    assert_eq!(page("user=nobody-here").header("x-total-count"), Some("0"));
    let bad = page("state=sleeping");
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("state"), "{}", bad.text());

    let css = request(
        &d.url,
        "GET",
        "/assets/app.css",
        &[("accept-encoding", "gzip, br")],
        b"",
    );
    assert_eq!(css.header("content-encoding"), Some("gzip"));
    let etag = css.header("etag").unwrap().to_string();
    let again = request(
        &d.url,
        "GET",
        "/assets/app.css",
        &[("if-none-match", &etag)],
        b"",
    );
    assert_eq!(again.status, 304);

    // Explanations for one page of the queue only; JSON compressed for a browser.
    let auth = format!("Bearer {token}");
    let explain = request(
        &d.url,
        "GET",
        &format!("/v1/explain?ids={},{}", ids[3], ids[4]),
        &[("authorization", &auth)],
        b"",
    );
    let explained: Vec<u64> = explain
        .json()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert_eq!(explained, vec![ids[3], ids[4]]);
    assert_eq!(
        raw_http::get(&d.url, &token, "/v1/explain?ids=1,x").status,
        400
    );
    let zipped = request(
        &d.url,
        "GET",
        "/v1/jobs",
        &[("authorization", &auth), ("accept-encoding", "gzip")],
        b"",
    );
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert_eq!(
        first.header("content-encoding"),
        None,
        "only for clients that ask"
    );
    let history = raw_http::get(&d.url, &token, "/v1/gpus/history?max_points=1");
    assert_eq!(history.status, 400);
    assert!(history.text().contains("max_points"));
    // The queued ones first, so that no cancel frees a GPU for the next; then
    // wait: jobs outlive the test's daemon.
    let all: Vec<String> = ids.iter().rev().map(u64::to_string).collect();
    let mut cancel = vec!["cancel"];
    cancel.extend(all.iter().map(String::as_str));
    d.ok(&cancel);
    for id in &ids {
        d.wait(*id);
    }
}

#[test]
fn a_long_log_can_be_read_from_its_tail() {
    let d = Daemon::start("sim:1");
    let id = d.submit(&["--", "sh", "-c", "seq 1 20000"]);
    d.wait(id);
    let token = d.token();
    let whole = raw_http::get(&d.url, &token, &format!("/v1/jobs/{id}/log"));
    let size = whole.body.len();
    assert!(size > 100_000, "{size}");
    let tail = raw_http::get(&d.url, &token, &format!("/v1/jobs/{id}/log?tail=100"));
    assert_eq!(tail.status, 200);
    assert!(tail.body.len() <= 100, "{}", tail.body.len());
    assert!(tail.text().ends_with("19999\n20000\n"), "{}", tail.text());
    assert_eq!(
        tail.header("x-gpuq-log-offset"),
        Some(size.to_string().as_str())
    );
    // Bytes go as they are, even to a client that takes gzip (only JSON is compressed).
    let auth = format!("Bearer {token}");
    let raw = request(
        &d.url,
        "GET",
        &format!("/v1/jobs/{id}/log"),
        &[("authorization", &auth), ("accept-encoding", "gzip")],
        b"",
    );
    assert_eq!(raw.header("content-encoding"), None);
    assert_eq!(raw.body.len(), size);
    // A reader already past the tail's start keeps its place.
    let on = raw_http::get(
        &d.url,
        &token,
        &format!("/v1/jobs/{id}/log?tail=100000000&offset={}", size - 6),
    );
    assert_eq!(on.text(), "20000\n");
}

/// POSTs `body` as JSON with a bearer token.
fn post_as(d: &Daemon, token: &str, path: &str, body: &str) -> Reply {
    raw_http::post_json(&d.url, token, path, body.as_bytes())
}

#[test]
fn job_tokens_and_sessions_mint_nothing_that_outlives_them() {
    let d = Daemon::start("sim:1");
    // A job's own token (MLflow's variable) is in its environment: print it.
    let job = d.submit(&[
        "--",
        "sh",
        "-c",
        "echo token=$MLFLOW_TRACKING_TOKEN; sleep 300",
    ]);
    let log = d.wait_for_log(job, "token=gpuqjob_", std::time::Duration::from_secs(20));
    let job_token = log
        .split("token=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let refused = post_as(&d, &job_token, "/v1/login-links", "{}");
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(refused.text().contains("job"), "{}", refused.text());

    // A browser session makes neither links nor API tokens.
    let owner = Session::from(&login(&d, &format!("{{\"token\": \"{}\"}}", d.token())));
    let r = request(
        &d.url,
        "POST",
        "/v1/tokens",
        &[
            ("cookie", &owner.cookie),
            ("x-csrf-token", &owner.csrf),
            ("content-type", "application/json"),
        ],
        b"{\"user\": \"root\"}",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(owner.post(&d, "/v1/login-links").status, 403);
    d.ok(&["cancel", &job.to_string()]);
    d.wait(job);
}

#[test]
fn a_link_asked_for_with_a_token_dies_with_the_token_and_sessions_can_be_ended() {
    let d = Daemon::start("sim:1");
    if common::running_as_root() {
        common::ensure_user(BOB);
    }
    let created: serde_json::Value =
        serde_json::from_str(&d.ok(&["token", "create", "--user", BOB, "--json"])).unwrap();
    let bob_token = created["token"].as_str().unwrap().to_string();
    let link = post_as(&d, &bob_token, "/v1/login-links", "{}")
        .json()
        .unwrap();
    assert_eq!(link["user"], BOB);
    let code = link["url"]
        .as_str()
        .unwrap()
        .split("#code=")
        .nth(1)
        .unwrap()
        .to_string();
    // The login page asks whose a link is without using it up.
    let peek = request(
        &d.url,
        "POST",
        "/auth/link",
        &[("content-type", "application/json")],
        format!("{{\"code\": \"{code}\"}}").as_bytes(),
    );
    assert_eq!(peek.json().unwrap()["user"], BOB, "{}", peek.text());
    let bob = Session::from(&login(&d, &format!("{{\"code\": \"{code}\"}}")));
    assert_eq!(bob.get(&d, "/auth/session").status, 200);
    d.ok(&["token", "revoke", &created["id"].to_string()]);
    assert_eq!(
        bob.get(&d, "/auth/session").status,
        401,
        "the link's session dies with its token"
    );

    // Sessions made over the socket end on demand: one's own, or (admins) anyone's.
    let (_, code) = url_code(&d);
    let mine = Session::from(&login(&d, &format!("{{\"code\": \"{code}\"}}")));
    let ended = post_as(
        &d,
        &d.token(),
        "/v1/dashboard-sessions/end",
        "{\"all\": true}",
    );
    assert_eq!(ended.status, 200, "{}", ended.text());
    assert!(ended.json().unwrap()["ended"].as_u64().unwrap() >= 1);
    assert_eq!(mine.get(&d, "/v1/jobs").status, 401);
    let out = d.ok(&["dashboard", "--end-sessions"]);
    assert!(out.contains("ended 0"), "{out}");
}

#[test]
fn cookies_tossed_in_from_another_port_do_not_lock_a_user_out() {
    let d = Daemon::start("sim:1");
    let (_, code) = url_code(&d);
    let s = Session::from(&login(&d, &format!("{{\"code\": \"{code}\"}}")));
    let name = s.cookie.split('=').next().unwrap();
    let tossed = format!("{name}={}; {name}=junk; {}", "x".repeat(300), s.cookie);
    let r = request(
        &d.url,
        "GET",
        "/auth/session",
        &[("cookie", &tossed), ("x-csrf-token", &s.csrf)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Logins are JSON only: a form of another site cannot send one.
    let form = request(
        &d.url,
        "POST",
        "/auth/login",
        &[("content-type", "text/plain")],
        format!("{{\"code\": \"{code}\"}}").as_bytes(),
    );
    assert_eq!(form.status, 415, "{}", form.text());
}

#[test]
fn the_command_prints_the_link_without_a_display_and_keeps_it_out_of_argv_with_one() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start("sim:1");
    // No display: the link on stdout (for a pipe), what to do with it on stderr.
    let out = d
        .cmd(&["dashboard"])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("BROWSER")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.trim().starts_with(&format!("{}/login#code=", d.url)),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 minutes"));
    let json: serde_json::Value = serde_json::from_str(&d.ok(&["dashboard", "--json"])).unwrap();
    assert!(json["url"].as_str().unwrap().contains("#code=") && json["expires_at"].is_i64());

    // A browser is started with a private page that forwards to the link: the
    // code never appears on a command line (which `ps` shows every user).
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("argv");
    let browser = dir.path().join("browser");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\necho \"$@\" > {}\n", seen.display()),
    )
    .unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = d
        .cmd(&["dashboard"])
        .env("BROWSER", &browser)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("#code="));
    assert!(common::eventually(
        std::time::Duration::from_secs(5),
        || seen.exists()
    ));
    let argv = std::fs::read_to_string(&seen).unwrap();
    assert!(
        !argv.contains("code="),
        "the code is on a command line: {argv}"
    );
    let page = std::path::PathBuf::from(argv.trim());
    let meta = std::fs::metadata(&page).unwrap();
    assert_eq!(meta.permissions().mode() & 0o077, 0, "the page is private");
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .contains("/login#code="));
}
