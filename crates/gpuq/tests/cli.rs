//! The command line's contract: bad input, authentication, autostart, completions.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn bad_input_gets_a_clear_message_and_status_2() {
    let d = Daemon::start("sim:4");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, "name: x\ncommand: [echo, hi]\ngpu: 2\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["submit", spec.to_str().unwrap()],
            "unknown field `gpu`",
        ),
        (
            vec!["submit", "--time-limit", "soon", "--", "true"],
            "--time-limit",
        ),
        (vec!["submit", "--"], "no command"),
        (vec!["submit", "--", ""], "the command is empty"),
        (
            vec!["submit", "--gpus", "9", "--", "true"],
            "job asks for 9 GPUs; the largest node has 4",
        ),
        (
            vec!["submit", "--priority", "urgent", "--", "true"],
            "use low, normal or high",
        ),
        (
            vec!["submit", "--env", "NOEQUALS", "--", "true"],
            "KEY=VALUE",
        ),
        (
            vec!["submit", "--after", "42", "--", "true"],
            "job 42 does not exist",
        ),
        (
            vec!["submit", "--cwd", "/no/such/dir", "--", "true"],
            "not a directory",
        ),
        (vec!["show", "42"], "job 42 does not exist"),
        (vec!["show", "abc"], "not a job id"),
        (vec!["logs", "42"], "job 42 does not exist"),
        (vec!["cancel", "42"], "job 42 does not exist"),
        (vec!["ls", "--state", "sleeping"], "unknown job state"),
    ];
    for (args, want) in cases {
        let out = d.gpuq(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(want),
            "{args:?}: expected {want:?} in {}",
            stderr(&out)
        );
    }
    assert!(
        stderr(&d.gpuq(&["submit", spec.to_str().unwrap()])).contains("line 3"),
        "names the line"
    );
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&d.ok(&["ls", "--json"])).unwrap();
    assert!(jobs.is_empty(), "nothing was half-written: {jobs:?}");
}

#[test]
fn unreachable_daemon_with_autostart_off_says_how_to_start_one() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(GPUQ)
        .args(["ls"])
        .env("GPUQ_HOME", home.path())
        .env_remove("GPUQ_URL")
        .env("GPUQ_NO_AUTOSTART", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "gpuq's own failure, not bad input"
    );
    assert!(stderr(&out).contains("gpuq server"), "{}", stderr(&out));
}

#[test]
fn exit_statuses_follow_the_readme_table() {
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, "command: [true]\ngpu: 1\n").unwrap();
    let spec = spec.to_str().unwrap();
    let nowhere = |args: &[&str]| {
        Command::new(GPUQ)
            .args(args)
            .env("GPUQ_HOME", dir.path())
            .env("GPUQ_URL", "http://127.0.0.1:9")
            .env("GPUQ_NO_AUTOSTART", "1")
            .output()
            .unwrap()
    };
    let cases: Vec<(&str, std::process::Output, i32)> = vec![
        ("success", d.gpuq(&["ls"]), 0),
        ("a bad flag", d.gpuq(&["ls", "--bogus"]), 2),
        (
            "a bad value",
            d.gpuq(&["submit", "--gpus", "two", "--", "true"]),
            2,
        ),
        ("a bad spec", d.gpuq(&["submit", spec]), 2),
        ("a missing spec file", d.gpuq(&["submit", "nope.yaml"]), 2),
        ("an unknown job", d.gpuq(&["show", "4242"]), 2),
        ("an unreachable daemon", nowhere(&["ls"]), 1),
        ("no daemon to stop", nowhere(&["server", "stop"]), 1),
    ];
    for (what, out, want) in cases {
        assert_eq!(out.status.code(), Some(want), "{what}: {}", stderr(&out));
    }
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let table = &readme[readme
        .find("## Exit status")
        .expect("an exit status section")..];
    for row in [
        "| 0 |",
        "| 1 | gpuq could not do it",
        "| 2 | bad input",
        "| 141 |",
    ] {
        assert!(table.contains(row), "README's table lacks {row:?}");
    }
}

#[test]
fn every_endpoint_but_health_needs_the_token() {
    let d = Daemon::start("none");
    let mode = std::fs::metadata(d.path().join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let status = |path: &'static str, token: Option<String>| {
            let mut req = http.get(format!("{}{path}", d.url));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            async move { req.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status("/health", None).await, 200);
        for path in [
            "/v1/jobs",
            "/v1/gpus",
            "/v1/info",
            "/openapi.json",
            "/v1/jobs/1",
        ] {
            assert_eq!(status(path, None).await, 401, "{path}");
            assert_eq!(status(path, Some("wrong".into())).await, 401, "{path}");
        }
        assert_eq!(status("/v1/jobs", Some(d.token())).await, 200);
        // Garbage bodies get a 400 in the API's error shape, never a crash.
        for body in [
            "",
            "{",
            "[]",
            "{\"spec\": 5}",
            "{\"spec\": {\"command\": [\"x\"], \"gpu\": 1}, \"cwd\": \"/\", \"user\": \"u\"}",
        ] {
            let resp = http
                .post(format!("{}/v1/jobs", d.url))
                .bearer_auth(d.token())
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 400, "{body}");
            let err: serde_json::Value = resp.json().await.unwrap();
            assert!(
                err["error"]
                    .as_str()
                    .unwrap()
                    .starts_with("invalid submit request"),
                "{err}"
            );
        }
        assert_eq!(status("/health", None).await, 200, "still serving");
        assert_eq!(status("/openapi.json", Some(d.token())).await, 200);
    });
}

#[test]
fn a_fresh_home_gets_a_daemon_started_in_the_background() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    let run = |args: &[&str]| {
        Command::new(GPUQ)
            .args(args)
            .env("GPUQ_HOME", home.path())
            .env_remove("GPUQ_URL")
            .env_remove("GPUQ_NO_AUTOSTART")
            .output()
            .unwrap()
    };
    let out = run(&["run", "--", "echo", "hi"]);
    assert_eq!(stdout(&out), "hi\n", "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("started a daemon"), "{said}");
    // It says what it found; with nothing, how to try gpuq anyway.
    assert!(said.contains(" with ") && said.contains(" GPU"), "{said}");
    if said.contains("with 0 GPUs") {
        assert!(said.contains("`gpuq server --gpus sim:4 &`"), "{said}");
    }
    let again = run(&["ls", "--json"]);
    assert!(
        !stderr(&again).contains("started a daemon"),
        "the second client finds the running daemon"
    );
    let daemon: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("daemon.json")).unwrap())
            .unwrap();
    let pid = daemon["pid"].as_i64().unwrap() as i32;
    let stopped = run(&["server", "stop"]);
    assert_eq!(stopped.status.code(), Some(0), "{}", stderr(&stopped));
    assert!(
        stdout(&stopped).contains(&format!("(pid {pid})")),
        "{}",
        stdout(&stopped)
    );
    // Gone, or a zombie its new parent has not reaped yet.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(") ").next().unwrap_or("").chars().next();
    assert!(
        matches!(state, None | Some('Z') | Some('X')),
        "the daemon has exited: {stat}"
    );
    assert!(!home.path().join("daemon.json").exists());
}

#[test]
fn a_second_daemon_on_the_same_home_is_refused() {
    let d = Daemon::start("none");
    let out = Command::new(GPUQ)
        .args(["server", "--listen", "127.0.0.1:0"])
        .env("GPUQ_HOME", d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("another gpuq daemon already serves"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn completions_are_generated_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(GPUQ)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(stdout(&out).contains("submit"), "{shell}");
    }
    let bad = Command::new(GPUQ)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn gpus_lists_holders_and_json_fields_are_stable() {
    let d = Daemon::start("sim:2");
    let id = d.submit(&["--gpus", "1", "--name", "holder", "--", "sleep", "2"]);
    assert!(eventually(std::time::Duration::from_secs(10), || d
        .show(id)["state"]
        == "running"));
    let gpus: Vec<serde_json::Value> = serde_json::from_str(&d.ok(&["gpus", "--json"])).unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0]["job"], id);
    assert_eq!(gpus[0]["job_name"], "holder");
    assert!(gpus[1]["job"].is_null());
    let table = d.ok(&["gpus"]);
    assert!(table.lines().nth(1).unwrap().contains("holder"), "{table}");
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&d.ok(&["ls", "--json"])).unwrap();
    for field in [
        "id",
        "name",
        "state",
        "user",
        "project",
        "gpus",
        "exit_code",
        "attempt",
        "submitted_at",
        "started_at",
        "ended_at",
    ] {
        assert!(jobs[0].get(field).is_some(), "ls --json lacks {field}");
    }
    let cancelled: Vec<serde_json::Value> =
        serde_json::from_str(&d.ok(&["cancel", "--json", &id.to_string()])).unwrap();
    assert_eq!(cancelled[0]["id"], id);
    let queue: serde_json::Value = serde_json::from_str(&d.ok(&["drain", "--json"])).unwrap();
    assert_eq!(queue["drained"], true);
}
