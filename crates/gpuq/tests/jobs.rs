//! End to end: a real daemon, real jobs, driven through the CLI.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn concurrent_jobs_get_disjoint_gpus() {
    let d = Daemon::start("sim:4");
    let ids: Vec<u64> = (0..6)
        .map(|_| {
            d.submit(&[
                "--gpus",
                "2",
                "--",
                "sh",
                "-c",
                // The indices (CUDA_VISIBLE_DEVICES holds UUIDs where devices are confined).
                "echo \"gpus=$GPUQ_GPUS\"; sleep 0.4",
            ])
        })
        .collect();
    let jobs: Vec<serde_json::Value> = ids.iter().map(|&id| d.wait(id)).collect();
    for (a, ja) in jobs.iter().enumerate() {
        assert_eq!(ja["state"], "succeeded", "{ja}");
        let log = d.ok(&["logs", &ids[a].to_string()]);
        let gpus: Vec<u32> = ja["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(gpus.len(), 2);
        let listed = gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            log.trim(),
            format!("gpus={listed}"),
            "the job saw exactly its own GPUs"
        );
        for jb in &jobs[a + 1..] {
            let overlap = ja["started_at"].as_i64() < jb["ended_at"].as_i64()
                && jb["started_at"].as_i64() < ja["ended_at"].as_i64();
            if overlap {
                let other: Vec<u32> = jb["gpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| g.as_u64().unwrap() as u32)
                    .collect();
                assert!(
                    gpus.iter().all(|g| !other.contains(g)),
                    "jobs {} and {} ran at once on shared GPUs",
                    ja["id"],
                    jb["id"]
                );
            }
        }
    }
    // Four GPUs, two per job: at most two ran at once, so at least three waves.
    let starts: std::collections::BTreeSet<i64> = jobs
        .iter()
        .map(|j| j["started_at"].as_i64().unwrap())
        .collect();
    assert!(starts.len() >= 3);
}

#[test]
fn exit_codes_pass_through_run_and_wait() {
    let d = Daemon::start("none");
    let run = d.gpuq(&["run", "--", "sh", "-c", "echo before; exit 7"]);
    assert_eq!(run.status.code(), Some(7));
    assert_eq!(stdout(&run), "before\n");

    let ok = d.submit(&["--", "true"]);
    let bad = d.submit(&["--", "sh", "-c", "exit 3"]);
    let killed = d.submit(&["--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(d.gpuq(&["wait", &ok.to_string()]).status.code(), Some(0));
    assert_eq!(d.gpuq(&["wait", &bad.to_string()]).status.code(), Some(3));
    assert_eq!(
        d.gpuq(&["wait", &killed.to_string()]).status.code(),
        Some(128 + 9)
    );
    assert_eq!(
        d.gpuq(&["wait", &ok.to_string(), &bad.to_string()])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        d.gpuq(&["wait", &ok.to_string(), &ok.to_string()])
            .status
            .code(),
        Some(0)
    );
    let k = d.show(killed);
    assert_eq!(
        (k["state"].as_str(), k["signal"].as_i64()),
        (Some("failed"), Some(9))
    );
    assert!(
        k["reason"].as_str().unwrap().contains("killed by signal 9"),
        "{k}"
    );
}

#[test]
fn logs_are_complete_and_interleave_stdout_and_stderr() {
    let d = Daemon::start("none");
    let script = "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; echo to-stderr >&2; echo last";
    let run = d.gpuq(&["run", "--", "sh", "-c", script]);
    assert!(run.status.success(), "{}", stderr(&run));
    let streamed = stdout(&run);
    let lines: Vec<&str> = streamed.lines().collect();
    assert_eq!(lines.len(), 20002, "run streamed every line");
    assert_eq!(lines[0], "line 0");
    assert_eq!(lines[19999], "line 19999");
    assert_eq!(&lines[20000..], ["to-stderr", "last"]);
    let logged = d.ok(&["logs", "1"]);
    assert_eq!(logged, streamed, "the stored log equals what was streamed");
    assert!(d.job_dir(1).join("attempt-1.log").is_file());
}

#[test]
fn follow_streams_while_the_job_runs() {
    let d = Daemon::start("none");
    let id = d.submit(&["--", "sh", "-c", "echo first; sleep 0.5; echo second"]);
    let out = d.gpuq(&["logs", "-f", &id.to_string()]);
    assert_eq!(stdout(&out), "first\nsecond\n");
    assert_eq!(
        d.show(id)["state"],
        "succeeded",
        "logs -f returned only after the end"
    );
}

#[test]
fn job_sees_the_contract_environment() {
    let d = Daemon::start("sim:2");
    let work = tempfile::tempdir().unwrap();
    let script = "echo CVD=$CUDA_VISIBLE_DEVICES; echo GPUS=$GPUQ_GPUS; echo ORDER=$CUDA_DEVICE_ORDER; echo ID=$GPUQ_JOB_ID; \
                  echo ATTEMPT=$GPUQ_ATTEMPT; echo CKPT=$GPUQ_CHECKPOINT_DIR; test -d $GPUQ_CHECKPOINT_DIR && echo CKPT_EXISTS; \
                  echo OUT=$GPUQ_OUTPUT_DIR; echo METRICS=$GPUQ_METRICS_FILE; echo MINE=$MY_SETTING; echo OVER=$OVERRIDE; \
                  echo PWD=$(pwd); test -n \"$GPUQ_URL\" && echo HAS_URL";
    let out = d
        .cmd(&[
            "run",
            "--gpus",
            "1",
            "--env",
            "OVERRIDE=from-flag",
            "--",
            "sh",
            "-c",
            script,
        ])
        .current_dir(work.path())
        .env("MY_SETTING", "captured-at-submit")
        .env("OVERRIDE", "from-env")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let job_dir = d.job_dir(1);
    // GPU 0 by index; by UUID where the daemon confines devices (as root).
    let cvd = if running_as_root() {
        "CVD=GPU-51570000-0000-4000-8000-000000000000"
    } else {
        "CVD=0"
    };
    for want in [
        cvd.to_string(),
        "GPUS=0".into(),
        "ORDER=PCI_BUS_ID".into(),
        "ID=1".into(),
        "ATTEMPT=1".into(),
        format!("CKPT={}", job_dir.join("checkpoints").display()),
        "CKPT_EXISTS".into(),
        format!("OUT={}", job_dir.join("outputs").display()),
        format!("METRICS={}", job_dir.join("metrics.jsonl").display()),
        "MINE=captured-at-submit".into(),
        "OVER=from-flag".into(),
        format!("PWD={}", work.path().canonicalize().unwrap().display()),
        "HAS_URL".into(),
    ] {
        assert!(
            text.lines().any(|l| l == want),
            "missing {want:?} in:\n{text}"
        );
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let out = d.gpuq(&[
        "run",
        "--cwd",
        elsewhere.path().to_str().unwrap(),
        "--",
        "pwd",
    ]);
    assert_eq!(
        stdout(&out).trim(),
        elsewhere.path().canonicalize().unwrap().to_str().unwrap()
    );
}

#[test]
fn the_supervisor_does_not_carry_the_submitters_environment() {
    let d = Daemon::start("none");
    // The supervisor may run as root: a submitter's LD_PRELOAD must never reach it.
    let out = d
        .cmd(&[
            "run",
            "--",
            "sh",
            "-c",
            "echo job=$MY_MARKER; tr '\\0' '\\n' < /proc/$PPID/environ",
        ])
        .env("MY_MARKER", "from-submitter")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("job=from-submitter"),
        "the job has it: {text}"
    );
    assert!(
        !text.lines().skip(1).any(|l| l.contains("MY_MARKER")),
        "the supervisor has not: {text}"
    );
}

#[test]
fn jobs_without_gpus_see_an_empty_device_list() {
    let d = Daemon::start("sim:2");
    let out = d.gpuq(&[
        "run",
        "--",
        "sh",
        "-c",
        "echo \"[${CUDA_VISIBLE_DEVICES-unset}]\"",
    ]);
    assert_eq!(stdout(&out), "[]\n");
}

#[test]
fn dependencies_start_after_success_and_fail_after_failure() {
    let d = Daemon::start("none");
    let first = d.submit(&["--", "sh", "-c", "sleep 0.3"]);
    let after_ok = d.submit(&["--after", &first.to_string(), "--", "true"]);
    let broken = d.submit(&["--", "false"]);
    let after_bad = d.submit(&["--after", &broken.to_string(), "--", "true"]);
    let chained = d.submit(&["--after", &after_bad.to_string(), "--", "true"]);
    let ok = d.wait(after_ok);
    assert_eq!(ok["state"], "succeeded");
    assert!(
        ok["started_at"].as_i64() >= d.show(first)["ended_at"].as_i64(),
        "started only after its dependency ended"
    );
    let bad = d.wait(after_bad);
    assert_eq!(
        (bad["state"].as_str(), bad["reason"].as_str()),
        (Some("failed"), Some("dependency job 3 failed"))
    );
    assert_eq!(bad["attempt"], 0, "never ran");
    assert_eq!(d.wait(chained)["reason"], "dependency job 4 failed");
}

#[test]
fn priority_classes_jump_the_queue() {
    let d = Daemon::start("sim:1");
    let blocker = d.submit(&["--gpus", "1", "--", "sleep", "0.5"]);
    let low = d.submit(&["--gpus", "1", "--priority", "low", "--", "true"]);
    let normal = d.submit(&["--gpus", "1", "--", "true"]);
    let high = d.submit(&["--gpus", "1", "--priority", "high", "--", "true"]);
    let started = |id| d.wait(id)["started_at"].as_i64().unwrap();
    let _ = d.wait(blocker);
    assert!(started(high) <= started(normal));
    assert!(started(normal) <= started(low));
}

#[test]
fn cancel_stops_a_running_job_with_sigterm() {
    let d = Daemon::start("none");
    let id = d.submit(&[
        "--",
        "sh",
        "-c",
        "trap 'echo got-term; exit 0' TERM; echo started; while true; do sleep 0.05; done",
    ]);
    assert!(eventually(Duration::from_secs(10), || d
        .ok(&["logs", &id.to_string()])
        .contains("started")));
    d.ok(&["cancel", &id.to_string()]);
    let job = d.wait(id);
    assert_eq!(job["state"], "cancelled");
    assert!(
        d.ok(&["logs", &id.to_string()]).contains("got-term"),
        "the job got SIGTERM first"
    );
    let queued_blocker = d.submit(&["--after", &id.to_string(), "--", "true"]);
    assert_eq!(d.wait(queued_blocker)["state"], "failed");
    let waiting = d.submit(&[
        "--after",
        &d.submit(&["--", "sleep", "5"]).to_string(),
        "--",
        "true",
    ]);
    d.ok(&["cancel", &waiting.to_string()]);
    assert_eq!(d.show(waiting)["state"], "cancelled");
    let again = d.gpuq(&["cancel", &id.to_string()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("already ended"));
}

#[test]
fn grace_period_ends_with_sigkill() {
    let d = Daemon::start("none");
    let id = d.submit(&[
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo started; while true; do sleep 0.05; done",
    ]);
    assert!(eventually(Duration::from_secs(10), || d
        .ok(&["logs", &id.to_string()])
        .contains("started")));
    d.ok(&["cancel", &id.to_string()]);
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["signal"].as_i64()),
        (Some("cancelled"), Some(9))
    );
}

#[test]
fn time_limit_stops_the_job() {
    let d = Daemon::start("none");
    let id = d.submit(&["--time-limit", "1s", "--grace", "1s", "--", "sleep", "30"]);
    let job = d.wait(id);
    assert_eq!(job["state"], "failed");
    assert!(
        job["reason"]
            .as_str()
            .unwrap()
            .starts_with("time limit 1s reached"),
        "{job}"
    );
    let took = job["ended_at"].as_i64().unwrap() - job["started_at"].as_i64().unwrap();
    assert!((900..10_000).contains(&took), "stopped after {took} ms");
}

#[test]
fn retries_rerun_a_failed_job_and_run_follows_every_attempt() {
    let d = Daemon::start("none");
    let out = d.gpuq(&[
        "run",
        "--retries",
        "2",
        "--retry-delay",
        "100ms",
        "--",
        "sh",
        "-c",
        "echo attempt $GPUQ_ATTEMPT; test $GPUQ_ATTEMPT -ge 3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "attempt 1\nattempt 2\nattempt 3\n");
    let job = d.show(1);
    assert_eq!(
        (
            job["attempt"].as_u64(),
            job["attempts"].as_array().unwrap().len()
        ),
        (Some(3), 3)
    );
    assert_eq!(d.ok(&["logs", "1", "--attempt", "2"]), "attempt 2\n");
    let exhausted = d.gpuq(&[
        "run",
        "--retries",
        "1",
        "--retry-delay",
        "100ms",
        "--",
        "false",
    ]);
    assert_eq!(exhausted.status.code(), Some(1));
    assert_eq!(d.show(2)["attempt"], 2);
}

#[test]
fn spec_file_with_a_run_script() {
    let d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, "name: scripted\ngpus: 1\nenv:\n  GREETING: hello\nrun: |\n  echo $GREETING\n  false\n  echo unreachable\n").unwrap();
    let out = d
        .cmd(&["run", spec.to_str().unwrap()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failing line stops the script"
    );
    assert_eq!(stdout(&out), "hello\n");
    let job = d.show(1);
    assert_eq!(
        (job["name"].as_str(), job["gpus_requested"].as_u64()),
        (Some("scripted"), Some(1))
    );
}

#[test]
fn a_running_job_survives_a_daemon_kill_and_its_end_is_recorded() {
    let mut d = Daemon::start("sim:2");
    let id = d.submit(&[
        "--gpus",
        "1",
        "--",
        "sh",
        "-c",
        "echo started; sleep 2; exit 4",
    ]);
    // Killed once the job really runs: a kill between recording the start
    // and the spawn retries that attempt, which never ran (the recovery rule).
    d.wait_for_log(id, "started", Duration::from_secs(10));
    d.restart();
    assert_eq!(d.show(id)["state"], "running", "re-adopted, still running");
    let blocked = d.submit(&["--gpus", "2", "--", "true"]);
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("failed"), Some(4))
    );
    assert_eq!(job["attempt"], 1, "not started twice");
    let next = d.wait(blocked);
    assert_eq!(next["state"], "succeeded");
    assert!(
        next["started_at"].as_i64() >= job["ended_at"].as_i64(),
        "its GPU stayed held until it really ended"
    );
}

#[test]
fn a_descriptor_the_daemon_inherited_does_not_reach_jobs() {
    // The daemon is started by a shell that leaves descriptor 9 open to a file.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    std::fs::write(home.path().join("private"), "the daemon's").unwrap();
    let mut server = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 9<'{}'; exec '{GPUQ}' server --gpus none --listen 127.0.0.1:0",
            home.path().join("private").display()
        ))
        .env("GPUQ_HOME", home.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || home
        .path()
        .join("daemon.json")
        .exists()));
    let out = std::process::Command::new(GPUQ)
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "ls /proc/self/fd; cat <&9 && echo READ",
        ])
        .env("GPUQ_HOME", home.path())
        .env("GPUQ_NO_AUTOSTART", "1")
        .env_remove("GPUQ_URL")
        .output()
        .unwrap();
    // SAFETY: ending the daemon this test started.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let _ = server.wait();
    let log = stdout(&out);
    assert!(
        log.lines().any(|l| l.trim() == "2"),
        "the job ran and listed its descriptors: {log} {}",
        stderr(&out)
    );
    assert!(
        !log.contains("READ"),
        "the job read the daemon's descriptor: {log}"
    );
    assert!(!log.lines().any(|l| l.trim() == "9"), "{log}");
}
