//! `gpuq notebook` with a real JupyterLab (from PyPI, in the test
//! environment `scripts/test` makes): reached only through gpuq's auth at
//! `/sessions/<id>/<capability>/`, a kernel run over its WebSocket on the
//! reserved GPUs, another user refused, the dashboard's cookie with forged
//! same-origin headers refused without the capability, the workspace kept, a
//! missing JupyterLab an error; and the idle stop: not while a client is
//! connected, a cell runs or a GPU is busy, then the stop.
#![cfg(feature = "torch-tests")]

mod common;
mod raw_http;

use common::{eventually, output_within, stderr, stdout, Daemon};
use raw_http::request;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const FAST: &str = "[telemetry]\ninterval = \"200ms\"\n";

fn python() -> String {
    std::env::var("GPUQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The test environment's jupyter-lab, next to its python.
fn jupyter() -> PathBuf {
    let py = PathBuf::from(python());
    let lab = py.with_file_name("jupyter-lab");
    assert!(
        lab.exists(),
        "no {} (scripts/test installs JupyterLab into the test environment)",
        lab.display()
    );
    lab
}

/// Starts a notebook; returns its job id and the printed link.
fn notebook(d: &Daemon, args: &[&str]) -> (u64, Value) {
    let lab = jupyter();
    let mut all = vec!["notebook", "--json", "--jupyter", lab.to_str().unwrap()];
    all.extend_from_slice(args);
    let out =
        output_within(&mut d.cmd(&all), Duration::from_secs(120)).expect("gpuq notebook ends");
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    (v["job"].as_u64().unwrap(), v)
}

/// Where notebook `job` is served, `/sessions/{job}/{capability}/`, as its
/// user learns it from the API.
fn base_of(d: &Daemon, job: u64) -> String {
    let s: Value = serde_json::from_str(&d.get(&format!("/v1/sessions/{job}"))).unwrap();
    let path = s["path"].as_str().unwrap_or_else(|| panic!("no path: {s}"));
    path.strip_suffix("lab").unwrap().to_string()
}

/// Runs code in a new kernel of notebook `job` through the proxy.
fn run_cell(d: &Daemon, job: u64, token: &str, code: &str, extra: &[&str]) -> Value {
    let script = common::repo_root().join("tests/notebook/kernel_client.py");
    let base = base_of(d, job);
    let out = output_within(
        Command::new(python())
            .arg(script)
            .args([&d.url, &base, token, code])
            .args(extra),
        Duration::from_secs(120),
    )
    .expect("the kernel client ends");
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    serde_json::from_str(stdout(&out).trim()).unwrap()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn a_notebook_is_jupyterlab_behind_gpuqs_auth_on_its_reserved_gpus() {
    let d = Daemon::start_with_config("sim:2", FAST);
    let work = tempfile::tempdir().unwrap();
    let (job, link) = notebook(
        &d,
        &[
            "--gpus",
            "1",
            "--idle-stop",
            "off",
            "--dir",
            work.path().to_str().unwrap(),
        ],
    );
    let url = link["url"].as_str().unwrap();
    let base = base_of(&d, job);
    let capability = base
        .strip_prefix(&format!("/sessions/{job}/"))
        .unwrap()
        .trim_end_matches('/');
    assert!(
        capability.len() == 32 && capability.bytes().all(|b| b.is_ascii_hexdigit()),
        "an unguessable capability in the notebook's path: {base}"
    );
    assert_eq!(link["path"], format!("{base}lab"));
    assert!(
        url.starts_with(&format!("{}/login#code=", d.url))
            && url.ends_with(&format!("&next={base}lab")),
        "a login link that opens the notebook: {url}"
    );
    let kernels = format!("{base}api/kernels");

    // No credentials: refused; a browser is sent to log in, and back. Every
    // answer keeps the path out of a Referer.
    let none = request(&d.url, "GET", &kernels, &[], b"");
    assert_eq!(none.status, 401);
    assert_eq!(none.header("referrer-policy"), Some("no-referrer"));
    let page = request(
        &d.url,
        "GET",
        &format!("{base}lab"),
        &[("accept", "text/html")],
        b"",
    );
    assert_eq!(page.status, 303);
    assert_eq!(
        page.header("location"),
        Some(format!("/login#next={base}lab").as_str())
    );

    // The owner's token: JupyterLab answers, and its token is never needed.
    let token = d.token();
    let ok = request(
        &d.url,
        "GET",
        &kernels,
        &[("authorization", &bearer(&token))],
        b"",
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let lab = request(
        &d.url,
        "GET",
        &format!("{base}lab"),
        &[("authorization", &bearer(&token))],
        b"",
    );
    assert_eq!(lab.status, 200);
    assert!(lab.text().contains("JupyterLab"), "the JupyterLab page");
    assert_eq!(lab.header("referrer-policy"), Some("no-referrer"));

    // A cell over the kernel's WebSocket sees the reserved GPUs; it writes a file
    // into the workspace, which outlives the session.
    let gpus: Vec<String> = d.show(job)["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.to_string())
        .collect();
    assert_eq!(gpus.len(), 1);
    let cell = run_cell(
        &d,
        job,
        &token,
        "import os; open('kept.txt', 'w').write('kept'); print(os.environ['GPUQ_GPUS'])",
        &[],
    );
    assert_eq!(cell["status"], "ok", "{cell}");
    assert_eq!(cell["stdout"].as_str().unwrap().trim(), gpus.join(","));

    // Another user (a token of theirs) is refused, as is a job's token.
    let other = if common::running_as_root() {
        common::ensure_user("gpuqtestb");
        "gpuqtestb"
    } else {
        "bob"
    };
    let theirs = d
        .ok(&["token", "create", "--user", other])
        .trim()
        .to_string();
    let refused = request(
        &d.url,
        "GET",
        &kernels,
        &[("authorization", &bearer(&theirs))],
        b"",
    );
    assert_eq!(refused.status, 403, "{}", refused.text());
    let ws = request(
        &d.url,
        "GET",
        &format!(
            "{base}api/kernels/{}/channels",
            cell["kernel"].as_str().unwrap()
        ),
        &[
            ("authorization", &bearer(&theirs)),
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ],
        b"",
    );
    assert_eq!(ws.status, 403, "no WebSocket either");

    // The attack: a labmate's server on another port of this host receives the
    // dashboard's cookie (browsers send a host's cookies to every port) and
    // replays it with whatever headers it likes. Without the capability,
    // nothing opens: not the old paths, not a guess, not this user's other
    // notebook's key; no kernel starts, no WebSocket opens.
    let code = url
        .split("#code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let login = request(
        &d.url,
        "POST",
        "/auth/login",
        &[("content-type", "application/json")],
        format!(r#"{{"code":"{code}"}}"#).as_bytes(),
    );
    assert_eq!(login.status, 200, "{}", login.text());
    let cookie = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let forged = [
        ("cookie", cookie.as_str()),
        ("origin", d.url.as_str()),
        ("sec-fetch-site", "same-origin"),
        ("sec-fetch-mode", "cors"),
        ("content-type", "application/json"),
    ];
    let kernel = cell["kernel"].as_str().unwrap();
    let wrong = format!("/sessions/{job}/{}/", "0".repeat(32));
    for guess in [
        format!("/sessions/{job}/"),
        format!("/sessions/{job}"),
        wrong.clone(),
        format!("/sessions/{job}/{}/", &capability[..16]),
    ] {
        for (method, tail) in [
            ("GET", "api/kernels"),
            ("POST", "api/kernels"),
            ("GET", "lab"),
            ("GET", "api/contents"),
        ] {
            let path = format!("{}/{tail}", guess.trim_end_matches('/'));
            let r = request(&d.url, method, &path, &forged, b"{}");
            assert!(
                r.status == 404 || r.status == 403,
                "{method} {path} with the cookie and forged headers: {} {}",
                r.status,
                r.text()
            );
            assert!(!r.text().contains(kernel), "{path}: {}", r.text());
            assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
        }
    }
    let mut upgrade = forged.to_vec();
    upgrade.extend([
        ("connection", "upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ]);
    for guess in [format!("/sessions/{job}/"), wrong.clone()] {
        let r = request(
            &d.url,
            "GET",
            &format!("{guess}api/kernels/{kernel}/channels"),
            &upgrade,
            b"",
        );
        assert_eq!(r.status, 404, "no WebSocket without the capability");
    }
    // Even the owner's own token needs the path.
    let old = request(
        &d.url,
        "GET",
        &format!("/sessions/{job}/api/kernels"),
        &[("authorization", &bearer(&token))],
        b"",
    );
    assert_eq!(old.status, 404, "{}", old.text());
    // Only one kernel was ever started: the forged POSTs started none.
    let listed = request(
        &d.url,
        "GET",
        &kernels,
        &[("authorization", &bearer(&token))],
        b"",
    );
    assert_eq!(listed.json().unwrap().as_array().unwrap().len(), 1);

    // With the capability (what the dashboard's page holds), the cookie from
    // this origin opens it: JupyterLab's own requests and a WebSocket.
    let same = request(
        &d.url,
        "GET",
        &kernels,
        &[
            ("cookie", &cookie),
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
        ],
        b"",
    );
    assert_eq!(same.status, 200, "{}", same.text());
    let ours = request(&d.url, "POST", &kernels, &forged, b"{}");
    assert_eq!(ours.status, 201, "{}", ours.text());
    // A page on another port that says so is still refused (the second fence).
    let elsewhere = request(
        &d.url,
        "POST",
        &kernels,
        &[
            ("cookie", &cookie),
            ("origin", "http://127.0.0.1:1"),
            ("sec-fetch-site", "same-site"),
            ("content-type", "application/json"),
        ],
        b"{}",
    );
    assert_eq!(elsewhere.status, 403);
    // The cookie alone reads the capability from no API: the API needs the
    // page's CSRF secret, which never leaves this origin.
    let stolen = request(
        &d.url,
        "GET",
        &format!("/v1/sessions/{job}"),
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
        b"",
    );
    assert_eq!(stolen.status, 403, "{}", stolen.text());
    assert!(!stolen.text().contains(capability));

    // The session is listed; JupyterLab's token is in no record a user reads.
    let sessions: Value = serde_json::from_str(&d.get("/v1/sessions")).unwrap();
    assert_eq!(sessions[0]["job"], job);
    assert_eq!(sessions[0]["path"], format!("{base}lab"));
    assert!(!d.get(&format!("/v1/jobs/{job}")).contains("JUPYTER_TOKEN"));
    // Another user sees the session, not its capability; nor does the job's
    // record, its command line or JupyterLab's log.
    let listed_to_other = request(
        &d.url,
        "GET",
        "/v1/sessions",
        &[("authorization", &bearer(&theirs))],
        b"",
    );
    assert_eq!(listed_to_other.status, 200);
    assert!(listed_to_other.text().contains(&format!("\"job\":{job}")));
    assert!(
        !listed_to_other.text().contains(capability),
        "{}",
        listed_to_other.text()
    );
    assert!(!d.get(&format!("/v1/jobs/{job}")).contains(capability));
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(capability));
    let log = d.ok(&["logs", &job.to_string()]);
    assert!(log.contains("Jupyter Server"), "{log}");
    assert!(!log.contains(capability), "{log}");

    d.ok(&["cancel", &job.to_string()]);
    let end = d.wait(job);
    assert_eq!(end["state"], "cancelled");
    assert_eq!(
        std::fs::read_to_string(work.path().join("kept.txt")).unwrap(),
        "kept"
    );
    assert_eq!(
        request(
            &d.url,
            "GET",
            &kernels,
            &[("authorization", &bearer(&token))],
            b""
        )
        .status,
        404
    );
}

#[test]
fn a_missing_jupyterlab_is_an_error_before_anything_is_queued() {
    let d = Daemon::start_with_config("sim:1", FAST);
    let out = d.gpuq(&["notebook", "--jupyter", "/nonexistent/bin/jupyter-lab"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pip install jupyterlab"),
        "{}",
        stderr(&out)
    );
    let out = d
        .cmd(&["notebook"])
        .env("PATH", "/usr/bin:/bin")
        .env_remove("GPUQ_JUPYTER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no jupyter-lab on PATH"),
        "{}",
        stderr(&out)
    );
    let out = d.gpuq(&["notebook", "--jupyter", &python(), "--idle-stop", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        d.json(&["ls", "--json"]),
        serde_json::json!([]),
        "nothing queued"
    );
}

#[test]
fn an_idle_notebook_is_stopped_but_not_while_used_running_a_cell_or_on_a_busy_gpu() {
    let d = Daemon::start_with_config("sim:1", FAST);
    let token = d.token();
    // On a simulated GPU that a job keeps at 90% (in use); and without GPUs,
    // started last so that its clock starts with the checks below.
    let (on_gpu, _) = notebook(&d, &["--idle-stop", "6s", "--gpus", "1"]);
    let (idle, _) = notebook(&d, &["--idle-stop", "6s"]);
    let running = |id: u64| d.show(id)["state"] == "running";
    let stays_running = |id: u64, for_: Duration| {
        let until = Instant::now() + for_;
        while Instant::now() < until {
            assert!(running(id), "stopped while in use: {}", d.show(id));
            std::thread::sleep(Duration::from_millis(250));
        }
    };

    // A client connected (a kernel's WebSocket open) for twice the window.
    let t = std::thread::scope(|s| {
        let h = s.spawn(|| run_cell(&d, idle, &token, "print(1)", &["--keep-open", "13"]));
        stays_running(idle, Duration::from_secs(12));
        h.join().unwrap()
    });
    assert_eq!(t["status"], "ok");
    // A cell that runs for longer than the window, nobody connected.
    run_cell(
        &d,
        idle,
        &token,
        "import time; time.sleep(15)",
        &["--no-wait"],
    );
    assert!(
        eventually(Duration::from_secs(3), || {
            let s: Value = serde_json::from_str(&d.get(&format!("/v1/sessions/{idle}"))).unwrap();
            s["busy_kernels"] == 1 && s["clients"] == 0
        }),
        "the running cell is seen"
    );
    stays_running(idle, Duration::from_secs(11));
    // Then nothing: warned, and stopped after the grace, with the reason.
    let (_, end) = d.wait_within(idle, Duration::from_secs(40));
    assert_eq!(end["state"], "cancelled", "{end}");
    let reason = end["reason"].as_str().unwrap();
    assert!(reason.starts_with("stopped idle: idle for"), "{reason}");
    let alerts = d.json(&["alerts", "--json"]);
    let warned = alerts.as_array().unwrap().iter().any(|a| {
        a["kind"] == "session_idle"
            && a["job"] == idle
            && a["message"].as_str().unwrap().contains("unless used")
    });
    assert!(warned, "{alerts}");
    // The one on a busy GPU is still there.
    assert!(running(on_gpu), "{}", d.show(on_gpu));
    let s: Value = serde_json::from_str(&d.get(&format!("/v1/sessions/{on_gpu}"))).unwrap();
    assert!(s["idle_since"].is_null(), "in use: {s}");
    d.ok(&["cancel", &on_gpu.to_string()]);
    d.wait(on_gpu);
}
