//! What a user reads when they get something slightly wrong, through the real
//! CLI: a negative count, a misspelt sweep key, a GPU model the catalog lacks,
//! an array task's log, an unknown simulator policy, doctor's counts; which
//! ends raise no `job_failed` alert (a shell's last status, doctor's probe);
//! an environment with no uv to build it, a container image not on the node.

mod common;
use common::*;
use std::time::Duration;

/// Runs gpuq; asserts exit status 2 and returns stderr.
fn refused(d: &Daemon, args: &[&str]) -> String {
    let out = d.gpuq(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "gpuq {args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stderr(&out)
}

#[test]
fn a_negative_retry_count_names_the_field_and_what_it_takes() {
    let d = Daemon::start("none");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, "command: [echo, hi]\nretries: -1\n").unwrap();
    let err = refused(&d, &["submit", spec.to_str().unwrap()]);
    assert!(err.contains("retries: "), "{err}");
    assert!(err.contains("a whole number, 0 or more"), "{err}");
    assert!(!err.contains("u32"), "{err}");
    // The same on the command line: read as a value, refused with the fix
    // (not "unexpected argument '-1'" and a tip to put it after `--`).
    for args in [
        &["submit", "--retries", "-1", "--", "echo"][..],
        &["run", "--retries=-1", "--", "echo"],
    ] {
        let err = refused(&d, args);
        assert!(err.contains("--retries"), "{err}");
        assert!(err.contains("whole number, 0 or more"), "{err}");
        assert!(!err.contains("tip:"), "{err}");
    }
    assert_eq!(d.json(&["ls", "--json", "--all"]), serde_json::json!([]));
}

#[test]
fn a_misspelt_sweep_key_is_named_with_the_key_meant() {
    let d = Daemon::start("none");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.yaml");
    std::fs::write(
        &file,
        "name: s\ncommand: [\"true\"]\nparameter:\n  lr: {choice: [1, 2]}\nmetric: {name: loss, goal: minimize}\n\
         searcher: {name: grid, max_trials: 2, max_step: 1}\n",
    )
    .unwrap();
    let err = refused(&d, &["sweep", file.to_str().unwrap()]);
    assert!(
        err.contains("unknown field `parameter`; did you mean `parameters`?"),
        "{err}"
    );
    assert!(!err.contains("parameters: missing"), "{err}");
    assert_eq!(d.json(&["sweep", "ls", "--json"]), serde_json::json!([]));
}

#[test]
fn prices_for_a_gpu_the_catalog_lacks_say_nothing_matched() {
    let d = Daemon::start("none");
    let err = refused(&d, &["prices", "--gpu", "FOO"]);
    assert!(
        err.contains("no price in the catalog matches --gpu \"FOO\""),
        "{err}"
    );
    assert!(err.contains("H100"), "the models it has are listed: {err}");
    let h100 = d.ok(&["prices", "--gpu", "H100"]);
    assert!(h100.contains("H100"), "{h100}");
}

#[test]
fn the_log_of_an_array_task_speaks_of_the_task_as_the_user_named_it() {
    let d = Daemon::start("none");
    let first = d.submit(&["--", "sleep", "30"]);
    let array = d.submit(&[
        "--array",
        "0-2",
        "--after",
        &first.to_string(),
        "--",
        "true",
    ]);
    let task = format!("{array}.1");
    let internal = d.json(&["ls", "--json"]);
    let internal_id = internal
        .as_array()
        .and_then(|jobs| {
            jobs.iter()
                .find(|t| t["array_id"] == array && t["array_index"] == 1)
        })
        .and_then(|t| t["id"].as_u64())
        .unwrap_or_else(|| panic!("task 1 in {internal}"));
    assert_ne!(internal_id, array, "the task has an id of its own");
    let out = d.gpuq(&["logs", &task]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("job {task} has not started")),
        "{err}"
    );
    assert!(!err.contains(&format!("job {internal_id} ")), "{err}");
    let err = refused(&d, &["logs", &task, "--attempt", "3"]);
    assert!(
        err.contains(&format!("job {task} has no attempt 3")),
        "{err}"
    );
    d.ok(&["cancel", &first.to_string()]);
}

#[test]
fn an_unknown_simulator_policy_is_refused_with_all_among_the_choices() {
    let trace = repo_root().join("crates/gpuq-sim/tests/fixtures/philly-sample.csv");
    let out = std::process::Command::new(GPUQ)
        .args(["sim", trace.to_str().unwrap(), "--policy", "lifo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("fifo, gpuq, sjf-oracle, tiresias, or all"),
        "{err}"
    );
}

fn failed_alert_jobs(d: &Daemon) -> Vec<u64> {
    d.json(&["alerts", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "job_failed")
        .filter_map(|a| a["job"].as_u64())
        .collect()
}

#[test]
fn a_shells_last_status_and_a_failed_doctor_probe_raise_no_failure_alert() {
    let d = Daemon::start("none");
    // Leaving a shell whose last command failed: the status is the user's, at their terminal.
    let out = d.gpuq(&["shell", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // A doctor whose probe cannot run: said at the terminal, with the fix.
    let out = d.gpuq(&["doctor", "--python", "/nonexistent/python3"]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let jobs: Vec<u64> = d
        .json(&["ls", "--json", "--all"])
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(jobs.len(), 2, "a shell and a doctor's job: {jobs:?}");
    for id in &jobs {
        let end = d.wait(*id);
        assert_eq!(end["state"], "failed", "{end}");
    }
    // An ordinary job failing, after them, still raises its alert: once it is
    // there, theirs would have been too.
    let plain = d.submit(&["--", "sh", "-c", "exit 4"]);
    assert!(
        eventually(Duration::from_secs(30), || failed_alert_jobs(&d)
            .contains(&plain)),
        "an ordinary failure alerts: {}",
        d.ok(&["alerts"])
    );
    let alerted = failed_alert_jobs(&d);
    for id in jobs {
        assert!(!alerted.contains(&id), "job {id} alerted: {alerted:?}");
    }
}

#[test]
fn doctor_counts_read_naturally_without_gpus() {
    let d = Daemon::start("none");
    let mut c = d.cmd(&["doctor"]);
    c.current_dir("/tmp");
    let out = output_within(&mut c, Duration::from_secs(180)).expect("doctor ends");
    let text = stdout(&out);
    assert!(text.contains("CPU cores and memory"), "{text}");
    assert!(!text.contains("(s)"), "{text}");
    assert!(!text.contains("0 GPU"), "{text}");
    // "1 warning", "2 warnings": the summary agrees with its numbers.
    let summary = text
        .lines()
        .find(|l| l.contains(" ok, "))
        .unwrap_or_else(|| panic!("no summary: {text}"));
    for noun in ["warning", "failure"] {
        let words: Vec<&str> = summary.split([',', ' ']).collect();
        let at = words
            .iter()
            .position(|w| w.starts_with(noun))
            .unwrap_or_else(|| panic!("{noun} in {summary}"));
        let n: u32 = words[at - 1].parse().unwrap();
        assert_eq!(words[at] == noun, n == 1, "{summary}");
    }
}

// ------------------------------------------ environments without their tools

/// A submit of a job with a Python environment, from `dir` with `path` as PATH.
fn submit_with_env(d: &Daemon, dir: &std::path::Path, path: &str) -> std::process::Output {
    std::fs::write(dir.join("requirements.txt"), "numpy\n").unwrap();
    d.cmd(&["submit", "--requirements", "requirements.txt", "--", "true"])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn an_environment_without_uv_is_refused_at_submit_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    // The setting names a uv that is not there.
    let d = Daemon::start_with_config("none", "[envs]\nuv = \"/nonexistent/bin/uv\"\n");
    let out = submit_with_env(&d, dir.path(), &std::env::var("PATH").unwrap());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("python: "), "{err}");
    assert!(
        err.contains("/nonexistent/bin/uv, which does not exist"),
        "{err}"
    );
    assert!(
        err.contains("pip install uv") && err.contains("[envs]"),
        "{err}"
    );
    assert_eq!(d.json(&["ls", "--json", "--all"]), serde_json::json!([]));

    // No setting, and neither the daemon's PATH nor the submitter's has uv.
    let empty = tempfile::tempdir().unwrap();
    let bare = empty.path().to_str().unwrap();
    let d = Daemon::start_configured("none", None, &[("PATH", bare)]);
    let out = submit_with_env(&d, dir.path(), bare);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no `uv` on the daemon's PATH or yours"),
        "{err}"
    );
    assert!(err.contains("pip install uv"), "{err}");
    assert_eq!(d.json(&["ls", "--json", "--all"]), serde_json::json!([]));

    // A uv on the submitter's PATH is the one the build uses: accepted.
    let tools = tempfile::tempdir().unwrap();
    let uv = tools.path().join("uv");
    std::fs::write(&uv, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&uv, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = submit_with_env(&d, dir.path(), tools.path().to_str().unwrap());
    assert!(out.status.success(), "{}", stderr(&out));
}

fn podman_ready() -> bool {
    let ok = std::process::Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "podman is missing: scripts/test installs it"
        );
        eprintln!("skipped: podman is missing");
    }
    ok
}

#[test]
fn a_container_job_whose_image_is_missing_says_so_everywhere() {
    if !podman_ready() {
        return;
    }
    let d = Daemon::start("none");
    let image = "localhost/gpuq-no-such-image:1";
    let id = d.submit(&["--image", image, "--retries", "2", "--", "true"]);
    let (_, end) = d.wait_within(id, Duration::from_secs(120));
    assert_eq!(end["state"], "failed", "{end}");
    let reason = end["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!("image {image} is not on this node")),
        "{reason}"
    );
    assert!(reason.contains(&format!("podman pull {image}")), "{reason}");
    assert!(!reason.starts_with("exit 125"), "{reason}");
    assert_eq!(end["attempt"], 1, "not retried: {end}");
    let listing = d.ok(&["ls", "--all"]);
    let row = listing
        .lines()
        .find(|l| l.starts_with(&format!("{id} ")))
        .unwrap();
    assert!(
        row.contains("image") && row.contains("not on this node"),
        "{row}"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            d.json(&["alerts", "--json"])
                .as_array()
                .unwrap()
                .iter()
                .any(|a| {
                    a["kind"] == "job_failed"
                        && a["job"] == id
                        && a["message"]
                            .as_str()
                            .unwrap()
                            .contains("is not on this node")
                })
        }),
        "{}",
        d.ok(&["alerts"])
    );
}
