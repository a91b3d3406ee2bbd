//! `gpuq shell` on a real pseudo-terminal, as a person types into it: output,
//! input, the window size and its changes, Ctrl-C reaching the job, Ctrl-D
//! ending it, the exit status coming back, the GPUs freed; piped input, TCP
//! as well as the socket; another user refused; a shell nobody attached to
//! stopped when idle, and one whose GPU is busy kept.

mod common;
mod raw_http;

use common::{eventually, output_within, stderr, Daemon, GPUQ};
use gpuq_exec::pty::{self, WindowSize};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FAST: &str = "[telemetry]\ninterval = \"200ms\"\n";

/// `gpuq shell …` running on a terminal of the test's, and what it printed.
struct Typed {
    child: std::process::Child,
    input: std::fs::File,
    master: std::os::fd::OwnedFd,
    seen: Arc<Mutex<String>>,
}

impl Typed {
    fn start(d: &Daemon, args: &[&str]) -> Self {
        Self::run(d.cmd(args))
    }
    fn run(mut cmd: Command) -> Self {
        let tty = pty::open(WindowSize { rows: 24, cols: 80 }).unwrap();
        pty::attach(&mut cmd, &tty.slave).unwrap();
        let child = cmd.spawn().unwrap();
        drop(tty.slave);
        let master = tty.master;
        let input = std::fs::File::from(master.try_clone().unwrap());
        let mut output = std::fs::File::from(master.try_clone().unwrap());
        let seen = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = output.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            child,
            input,
            master,
            seen,
        }
    }
    fn type_in(&mut self, keys: &str) {
        self.input.write_all(keys.as_bytes()).unwrap();
    }
    fn seen(&self) -> String {
        self.seen.lock().unwrap().clone()
    }
    /// Waits for `text` to appear after what was seen before `from` bytes.
    fn expect_after(&self, from: usize, text: &str) -> usize {
        let found = eventually(Duration::from_secs(30), || {
            self.seen().get(from..).is_some_and(|s| s.contains(text))
        });
        assert!(
            found,
            "no {text:?} on the terminal; it shows:\n{}",
            self.seen()
        );
        self.seen().len()
    }
    fn exit_status(&mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "gpuq shell did not end:\n{}",
                self.seen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Typed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Submits a session job straight through the API (no client attaches to it).
fn submit_session(d: &Daemon, spec: serde_json::Value) -> u64 {
    let user = d.json(&["whoami", "--json"])["user"]
        .as_str()
        .unwrap()
        .to_string();
    let body = serde_json::json!({"spec": spec, "cwd": "/tmp", "env": {}, "user": user});
    let answer = d.post_job(&body.to_string());
    serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("the session was not accepted: {answer}"))
}

fn only_job(d: &Daemon) -> u64 {
    let jobs = d.json(&["ls", "--json"]);
    jobs[0]["id"].as_u64().expect("a job")
}

#[test]
fn a_shell_on_a_real_terminal_passes_keys_size_and_exit_status_through() {
    let d = Daemon::start_with_config("sim:2", FAST);
    let mut t = Typed::start(&d, &["shell", "--gpus", "1", "--", "bash", "--norc", "-i"]);
    let at = t.expect_after(0, "attached to job");
    t.type_in("echo sum=$((6*7)) gpus=$GPUQ_GPUS\r");
    let at = t.expect_after(at, "sum=42 gpus=");
    let id = only_job(&d);
    let job = d.show(id);
    assert_eq!(job["state"], "running");
    let gpus = job["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "one GPU reserved: {job}");
    t.expect_after(0, &format!("sum=42 gpus={}\r\n", gpus[0]));

    // The window's size, and a change of it, reach the job's terminal.
    t.type_in("stty size\r");
    let at = t.expect_after(at, "24 80");
    pty::resize(
        t.master.as_fd(),
        WindowSize {
            rows: 33,
            cols: 101,
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    t.type_in("stty size\r");
    let at = t.expect_after(at, "33 101");

    // Ctrl-C interrupts what runs in the shell, not the shell.
    t.type_in("sleep 60; echo not-$((1+1))-interrupted\r");
    std::thread::sleep(Duration::from_millis(500));
    let interrupted = Instant::now();
    t.type_in("\x03");
    t.type_in("echo after-interrupt\r");
    let at = t.expect_after(at, "after-interrupt\r\n");
    assert!(interrupted.elapsed() < Duration::from_secs(20));
    assert!(
        !t.seen().contains("not-2-interrupted"),
        "the sleep was interrupted"
    );

    // The exit status comes back, and the GPU is free again.
    t.type_in("exit 7\r");
    let _ = at;
    assert_eq!(t.exit_status(), 7, "{}", t.seen());
    let end = d.show(id);
    assert_eq!(end["state"], "failed");
    assert_eq!(end["exit_code"], 7);
    let free = d.json(&["gpus", "--json"]);
    assert!(
        free.as_array()
            .unwrap()
            .iter()
            .all(|g| g["job"].is_null() || g["job"].as_u64() != Some(id)),
        "the GPU is free: {free}"
    );
}

#[test]
fn ctrl_d_ends_the_shell_and_a_closed_terminal_hangs_it_up() {
    let d = Daemon::start_with_config("sim:1", FAST);
    let mut t = Typed::start(&d, &["shell", "--", "bash", "--norc", "-i"]);
    let at = t.expect_after(0, "attached to job");
    t.type_in("echo ready\r");
    t.expect_after(at, "ready\r\n");
    t.type_in("\x04");
    assert_eq!(t.exit_status(), 0, "{}", t.seen());
    let first = only_job(&d);
    assert_eq!(d.show(first)["state"], "succeeded");

    // The client killed (its terminal closed): the job is hung up, its GPUs freed.
    let mut t = Typed::start(&d, &["shell", "--gpus", "1", "--", "bash", "--norc", "-i"]);
    t.expect_after(0, "attached to job");
    let second = only_job(&d);
    assert_ne!(second, first);
    t.child.kill().unwrap();
    let (_, end) = d.wait_within(second, Duration::from_secs(30));
    assert_eq!(end["state"], "failed", "{end}");
    assert_eq!(end["signal"], libc::SIGHUP, "{end}");
}

#[test]
fn piped_input_works_over_tcp_and_another_user_cannot_attach() {
    let d = Daemon::start_with_config("sim:1", FAST);
    // Over TCP (--url), with input from a pipe: the job reads it, then its end.
    let mut cmd = Command::new(GPUQ);
    cmd.env("GPUQ_HOME", d.path())
        .args(["--url", &d.url, "shell", "--", "bash", "--norc"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo from-a-pipe $((2+3))\nexit 5\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}\n{}", stderr(&out));
    assert!(text.contains("from-a-pipe 5"), "{text}");

    // A shell of the tests' user: another user's token reaches neither the
    // terminal nor the status of attaching.
    let id = d
        .ok(&["submit", "--", "sleep", "60"])
        .trim()
        .parse::<u64>()
        .unwrap();
    let shell = submit_session(
        &d,
        serde_json::json!({"command": ["sleep", "120"], "session": {"kind": "shell"}}),
    );
    d.wait_running(shell);
    // Another account (a real one where the tests run as root, as in CI).
    let other = if common::running_as_root() {
        common::ensure_user("gpuqtestb");
        "gpuqtestb"
    } else {
        "bob"
    };
    let bob = d
        .ok(&["token", "create", "--user", other])
        .trim()
        .to_string();
    let attach = |token: &str, job: u64| {
        raw_http::request(
            &d.url,
            "GET",
            &format!("/v1/jobs/{job}/attach"),
            &[
                ("authorization", &format!("Bearer {token}")),
                ("connection", "upgrade"),
                ("upgrade", "gpuq-terminal"),
            ],
            b"",
        )
    };
    let refused = attach(&bob, shell);
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(refused.text().contains("only"), "{}", refused.text());
    let not_a_shell = attach(&d.token(), id);
    assert_eq!(not_a_shell.status, 409, "{}", not_a_shell.text());
    let no_upgrade = raw_http::request(
        &d.url,
        "GET",
        &format!("/v1/jobs/{shell}/attach"),
        &[("authorization", &format!("Bearer {}", d.token()))],
        b"",
    );
    assert_eq!(no_upgrade.status, 400, "{}", no_upgrade.text());
    // Bob's own CLI says the same, with exit status 2.
    let out = output_within(
        Command::new(GPUQ)
            .env("GPUQ_HOME", d.path())
            .env("GPUQ_TOKEN", &bob)
            .args(["--url", &d.url, "shell", "--attach", &shell.to_string()])
            .stdin(Stdio::null()),
        Duration::from_secs(30),
    )
    .expect("gpuq shell --attach ends");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    for job in [id, shell] {
        d.ok(&["cancel", &job.to_string()]);
        d.wait(job);
    }
}

#[test]
fn a_shell_left_idle_is_stopped_but_not_while_its_gpu_is_busy() {
    let d = Daemon::start_with_config("sim:2", FAST);
    let submit = |gpus: u32, env: serde_json::Value| {
        submit_session(
            &d,
            serde_json::json!({"command": ["sleep", "120"], "gpus": gpus, "env": env,
                "session": {"kind": "shell", "idle_stop": "2s"}}),
        )
    };
    // Nobody attached, no GPU: idle. A GPU at 0%: idle. A GPU at 90% (the
    // simulated GPUs' load of a job that sets none): in use.
    let no_gpu = submit(0, serde_json::json!({}));
    let cold = submit(1, serde_json::json!({"GPUQ_SIM_UTIL": "0"}));
    let busy = submit(1, serde_json::json!({}));
    for id in [no_gpu, cold, busy] {
        d.wait_running(id);
    }
    for id in [no_gpu, cold] {
        let (_, end) = d.wait_within(id, Duration::from_secs(30));
        assert_eq!(end["state"], "cancelled", "{end}");
        let reason = end["reason"].as_str().unwrap();
        assert!(reason.starts_with("stopped idle: idle for"), "{reason}");
    }
    let alerts = d.json(&["alerts", "--json"]);
    let about = |id: u64| {
        alerts
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["kind"] == "session_idle" && a["job"] == id)
            .count()
    };
    assert_eq!(about(no_gpu), 2, "a warning, then the stop: {alerts}");
    assert_eq!(about(cold), 2, "{alerts}");
    assert_eq!(d.show(busy)["state"], "running", "a busy GPU is not idle");
    let listing = d.ok(&["ls"]);
    // What keeps it in use is said: its GPU, not "0 clients".
    assert!(listing.contains("shell in use: GPU at "), "{listing}");
    assert_eq!(about(busy), 0);
    d.ok(&["cancel", &busy.to_string()]);
    d.wait(busy);
}

#[test]
fn a_shell_outlives_its_daemon_killed_with_sigkill() {
    let mut d = Daemon::start_with_config("sim:1", FAST);
    // Over the daemon's socket, as a local user's gpuq finds it (the test
    // daemon's TCP port changes with a restart; a real one's does not).
    let mut cmd = d.cmd(&["shell", "--", "bash", "--norc", "-i"]);
    cmd.env_remove("GPUQ_URL");
    let mut t = Typed::run(cmd);
    let at = t.expect_after(0, "attached to job");
    t.type_in("X=before-the-crash\r");
    std::thread::sleep(Duration::from_millis(300));
    d.kill();
    d.restart();
    let at = t.expect_after(at, "attaching again");
    // The same shell, its variable still set: typed after the new daemon is up.
    assert!(
        eventually(Duration::from_secs(20), || {
            t.type_in("echo got-$X\r");
            std::thread::sleep(Duration::from_millis(500));
            t.seen()[at..].contains("got-before-the-crash")
        }),
        "{}",
        t.seen()
    );
    t.type_in("exit 4\r");
    assert_eq!(t.exit_status(), 4, "{}", t.seen());
}
