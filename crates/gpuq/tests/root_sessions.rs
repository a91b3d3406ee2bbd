//! Interactive sessions on a daemon run as root, with local accounts: a
//! labmate's shell and notebook run as the labmate; root reaches a notebook
//! only through a socket the labmate owns (a link planted in its place is
//! never followed); a shell's terminal socket is root's alone; nobody but the
//! owner (not root's token, not an admin) gets into a session.
//! Needs root: the `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

const MATE: &str = "gpuqtestb";
const ADMIN: &str = "gpuqtestadm";

fn shared_daemon() -> Daemon {
    let toml = format!("admins = [\"{ADMIN}\"]\n[telemetry]\ninterval = \"100ms\"\n");
    let d = Daemon::start_strict("sim:2", &toml);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn token_for(d: &Daemon, user: &str) -> String {
    d.ok(&["token", "create", "--user", user])
        .trim()
        .to_string()
}

fn get(d: &Daemon, token: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-H"])
        .arg(format!("authorization: Bearer {token}"))
        .arg(format!("{}{path}", d.url))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

/// Where notebook `job` is served (`/sessions/{job}/{capability}/`), as its
/// user (with `token`) learns it.
fn base_of(d: &Daemon, token: &str, job: u64) -> String {
    let (_, status) = get(d, token, &format!("/v1/sessions/{job}"));
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let path = v["path"].as_str().unwrap_or_else(|| panic!("no path: {v}"));
    path.strip_suffix("lab").unwrap().to_string()
}

/// The fake JupyterLab, where every account can run it.
fn fake_jupyter(dir: &std::path::Path) -> String {
    let path = dir.join("jupyter-lab");
    let script =
        std::fs::read_to_string(repo_root().join("tests/notebook/fake_jupyter.py")).unwrap();
    std::fs::write(&path, format!("#!/usr/bin/env python3\n{script}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn notebook_as(d: &Daemon, user: &str, jupyter: &str, env: &[(&str, &str)]) -> u64 {
    let mut spec = serde_json::json!({
        "command": [jupyter], "session": {"kind": "notebook"},
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    });
    for (k, v) in env {
        spec["env"][k] = serde_json::json!(v);
    }
    let body = serde_json::json!({"spec": spec, "cwd": "/tmp", "env": {}, "user": user});
    let answer = d.post_job(&body.to_string());
    serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("{answer}"))
}

#[test]
fn a_labmates_notebook_runs_as_them_and_only_they_get_in() {
    let uid = ensure_user(MATE);
    ensure_user(ADMIN);
    let d = shared_daemon();
    let tools = tempfile::tempdir().unwrap();
    let jupyter = fake_jupyter(tools.path());
    let job = notebook_as(&d, MATE, &jupyter, &[]);
    d.wait_running(job);
    let mate = token_for(&d, MATE);
    assert!(
        eventually(Duration::from_secs(20), || {
            get(&d, &mate, &format!("/v1/sessions/{job}"))
                .1
                .contains("\"ready\":true")
        }),
        "the daemon reached the labmate's JupyterLab"
    );
    // The session directory and the socket are the labmate's, private.
    let session = d.job_dir(job).join("session");
    let meta = std::fs::metadata(&session).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o700));
    // Through the proxy: the labmate's request reaches their JupyterLab, which
    // runs as them and got its token from the daemon. The notebook's path
    // (with its capability) is the labmate's to know: not root's, not an admin's.
    let base = base_of(&d, &mate, job);
    for token in [d.token(), token_for(&d, ADMIN)] {
        let (_, status) = get(&d, &token, &format!("/v1/sessions/{job}"));
        assert!(!status.contains(&base), "{status}");
        assert!(status.contains("\"ready\":true"), "{status}");
    }
    let (code, body) = get(&d, &mate, &format!("{base}whoami"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["uid"],
        uid
    );
    // Root's own token, and an admin's, are refused: a notebook runs code as its user.
    for token in [d.token(), token_for(&d, ADMIN)] {
        let (code, body) = get(&d, &token, &format!("{base}whoami"));
        assert_eq!(code, 403, "{body}");
    }
    // The token and the capability are in the labmate's process environment
    // only: not in its command line, which every account can read.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(!ps.contains("JUPYTER_TOKEN"));
    let capability = base.trim_end_matches('/').rsplit('/').next().unwrap();
    assert!(!ps.contains(capability), "{ps}");
    // The capability dies with the attempt: requeued, the notebook gets a new
    // one, and the old address opens nothing.
    d.ok(&["requeue", &job.to_string()]);
    assert!(
        eventually(Duration::from_secs(30), || {
            let again = base_of(&d, &mate, job);
            again != base && get(&d, &mate, &format!("{again}whoami")).0 == 200
        }),
        "the requeued notebook is up again"
    );
    assert_eq!(d.show(job)["attempt"], 2);
    let again = base_of(&d, &mate, job);
    assert_ne!(again, base);
    let (code, body) = get(&d, &mate, &format!("{base}whoami"));
    assert_eq!(code, 404, "{body}");
    let (code, body) = get(&d, &mate, &format!("{again}whoami"));
    assert_eq!(code, 200, "{body}");
    d.ok(&["cancel", &job.to_string()]);
    d.wait(job);
}

#[test]
fn a_link_planted_for_the_notebook_socket_is_never_followed_by_root() {
    ensure_user(MATE);
    let d = shared_daemon();
    let tools = tempfile::tempdir().unwrap();
    let jupyter = fake_jupyter(tools.path());
    // The labmate's "JupyterLab" puts a link to root's own API socket where
    // its socket should be: root must not connect through it.
    let target = d.path().join("gpuq.sock").display().to_string();
    let job = notebook_as(&d, MATE, &jupyter, &[("GPUQ_FAKE_LINK", &target)]);
    d.wait_running(job);
    let link = d.job_dir(job).join("session/jupyter.sock");
    assert!(
        eventually(Duration::from_secs(10), || link.symlink_metadata().is_ok()),
        "the link is planted"
    );
    std::thread::sleep(Duration::from_secs(2));
    let mate = token_for(&d, MATE);
    let (_, status) = get(&d, &mate, &format!("/v1/sessions/{job}"));
    assert!(status.contains("\"ready\":false"), "{status}");
    let base = base_of(&d, &mate, job);
    let (code, body) = get(&d, &mate, &format!("{base}api/kernels"));
    assert_eq!(code, 503, "{body}");
    d.ok(&["cancel", &job.to_string()]);
    d.wait(job);
}

#[test]
fn a_labmates_shell_runs_as_them_and_its_terminal_socket_is_roots_alone() {
    let uid = ensure_user(MATE);
    let d = shared_daemon();
    let out = as_user(&d, MATE, &["shell", "--", "sh", "-c", "id -u; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).contains(&uid.to_string()), "{}", stdout(&out));
    // A shell waiting for its client: the labmate cannot reach its terminal
    // socket without the daemon, nor can another user.
    let body = serde_json::json!({"spec": {"command": ["sleep", "60"], "session": {"kind": "shell"}},
        "cwd": "/tmp", "env": {}, "user": MATE});
    let job = serde_json::from_str::<serde_json::Value>(&d.post_job(&body.to_string())).unwrap()
        ["id"]
        .as_u64()
        .unwrap();
    d.wait_running(job);
    let socket = d.job_dir(job).join("attempt-1.tty");
    assert!(eventually(Duration::from_secs(10), || socket.exists()));
    let probe = Command::new("runuser")
        .args(["-u", MATE, "--", "python3", "-c"])
        .arg(format!(
            "import socket; s = socket.socket(socket.AF_UNIX); s.connect({:?})",
            socket.display().to_string()
        ))
        .output()
        .unwrap();
    assert!(!probe.status.success());
    assert!(
        String::from_utf8_lossy(&probe.stderr).contains("PermissionError"),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    d.ok(&["cancel", &job.to_string()]);
    d.wait(job);
}
