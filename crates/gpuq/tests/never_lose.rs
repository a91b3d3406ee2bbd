//! Never lose a run: the stop protocol, retries, requeues, preemption, and
//! what a restarted daemon does with the jobs a previous one left.

mod common;
use common::*;
use std::time::Duration;

fn events(d: &Daemon, id: u64) -> Vec<String> {
    d.show(id)["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Seconds from the epoch, as the job prints it with `date +%s.%N`.
fn stamps(log: &str, tag: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|l| l.strip_prefix(tag))
        .map(|t| t.trim().parse().unwrap())
        .collect()
}

#[test]
fn early_signal_comes_before_the_time_limit_then_sigterm() {
    let d = Daemon::start("none");
    let script = "echo start $(date +%s.%N); trap 'echo usr1 $(date +%s.%N)' USR1; \
                  trap 'echo term $(date +%s.%N); exit 0' TERM; while true; do sleep 0.05; done";
    let id = d.submit(&[
        "--time-limit",
        "3s",
        "--signal",
        "USR1@2",
        "--grace",
        "5s",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let job = d.wait(id);
    let log = d.ok(&["logs", &id.to_string()]);
    let (start, usr1, term) = (
        stamps(&log, "start ")[0],
        stamps(&log, "usr1 ")[0],
        stamps(&log, "term ")[0],
    );
    assert!(
        (0.7..1.6).contains(&(usr1 - start)),
        "USR1 2s before a 3s limit came at +{:.2}s\n{log}",
        usr1 - start
    );
    assert!(
        (2.7..3.8).contains(&(term - start)),
        "SIGTERM at the limit came at +{:.2}s",
        term - start
    );
    assert_eq!(job["state"], "failed");
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("time limit 3s reached; ended after SIGTERM"),
        "{reason}"
    );
    assert!(events(&d, id).contains(&"early_signal".to_string()));
}

#[test]
fn exit_75_requeues_without_using_a_retry() {
    let d = Daemon::start("none");
    let id = d.submit(&[
        "--",
        "sh",
        "-c",
        "echo attempt $GPUQ_ATTEMPT; [ $GPUQ_ATTEMPT -ge 3 ] || exit 75",
    ]);
    let job = d.wait(id);
    assert_eq!(
        (
            job["state"].as_str(),
            job["attempt"].as_u64(),
            job["failures"].as_u64()
        ),
        (Some("succeeded"), Some(3), Some(0))
    );
    assert_eq!(
        events(&d, id).iter().filter(|k| *k == "requeued").count(),
        2
    );
}

#[test]
fn retries_back_off_exponentially() {
    let d = Daemon::start("none");
    let id = d.submit(&["--retries", "2", "--retry-delay", "400ms", "--", "false"]);
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["failures"].as_u64()),
        (Some("failed"), Some(3))
    );
    let attempts = job["attempts"].as_array().unwrap();
    let gap = |i: usize| {
        attempts[i + 1]["started_at"].as_i64().unwrap() - attempts[i]["ended_at"].as_i64().unwrap()
    };
    assert!(gap(0) >= 400, "first back-off {} ms", gap(0));
    assert!(gap(1) >= 800, "second back-off doubles: {} ms", gap(1));
    assert!(job["reason"].as_str().unwrap().contains("after 2 retries"));
}

#[test]
fn cuda_out_of_memory_is_recognised_and_not_retried_blindly() {
    let d = Daemon::start("none");
    let script = "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB' >&2; exit 1";
    let id = d.submit(&[
        "--retries",
        "3",
        "--retry-delay",
        "100ms",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["attempt"].as_u64()),
        (Some("failed"), Some(1))
    );
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("CUDA out of memory") && shown.contains("Not retried"),
        "{shown}"
    );
}

#[test]
fn a_preemptible_job_yields_to_higher_priority_work_and_resumes() {
    let d = Daemon::start("sim:2");
    let low = d.submit(&[
        "--gpus",
        "2",
        "--priority",
        "low",
        "--preemptible",
        "--grace",
        "5s",
        "--",
        "sh",
        "-c",
        "echo run $GPUQ_ATTEMPT; trap 'echo saving; exit 75' TERM; \
                     if [ $GPUQ_ATTEMPT -ge 2 ]; then exit 0; fi; while true; do sleep 0.05; done",
    ]);
    d.wait_running(low);
    // Low too: a normal-priority bystander would itself (rightly) preempt the low job.
    let bystander = d.submit(&["--gpus", "1", "--priority", "low", "--", "true"]);
    let high = d.submit(&["--gpus", "2", "--priority", "high", "--", "sleep", "0.3"]);
    let high_job = d.wait(high);
    assert_eq!(high_job["state"], "succeeded");
    let low_job = d.wait(low);
    assert_eq!(
        (low_job["state"].as_str(), low_job["attempt"].as_u64()),
        (Some("succeeded"), Some(2))
    );
    let first = &low_job["attempts"][0];
    assert!(
        first["reason"]
            .as_str()
            .unwrap()
            .starts_with("preempted for job"),
        "{first}"
    );
    assert!(
        first["ended_at"].as_i64() <= high_job["started_at"].as_i64(),
        "GPUs were freed before the high job started"
    );
    assert!(
        low_job["attempts"][1]["started_at"].as_i64() >= high_job["ended_at"].as_i64(),
        "resumed after"
    );
    assert!(d
        .ok(&["logs", &low.to_string(), "--attempt", "1"])
        .contains("saving"));
    let history = events(&d, low);
    let preempted = history
        .iter()
        .position(|k| k == "preempted")
        .expect("a preempted event");
    assert_eq!(
        history[preempted + 1],
        "requeued",
        "preempted, then queued: {history:?}"
    );
    assert_eq!(d.wait(bystander)["state"], "succeeded");
}

#[test]
fn non_preemptible_work_is_never_stopped_for_priority() {
    let d = Daemon::start("sim:1");
    let normal = d.submit(&["--gpus", "1", "--", "sleep", "0.5"]);
    d.wait_running(normal);
    let high = d.submit(&["--gpus", "1", "--priority", "high", "--", "true"]);
    let n = d.wait(normal);
    assert_eq!(
        (n["state"].as_str(), n["attempt"].as_u64()),
        (Some("succeeded"), Some(1))
    );
    assert!(d.wait(high)["started_at"].as_i64() >= n["ended_at"].as_i64());
}

#[test]
fn requeue_a_running_job_and_an_ended_one() {
    let d = Daemon::start("none");
    let id = d.submit(&[
        "--",
        "sh",
        "-c",
        "[ $GPUQ_ATTEMPT -ge 2 ] && exit 0; echo first; sleep 30",
    ]);
    assert!(eventually(Duration::from_secs(10), || d
        .ok(&["logs", &id.to_string()])
        .contains("first")));
    d.ok(&["requeue", &id.to_string()]);
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["attempt"].as_u64()),
        (Some("succeeded"), Some(2))
    );
    assert!(job["attempts"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("requeued by"));
    let failed = d.submit(&["--", "sh", "-c", "[ $GPUQ_ATTEMPT -ge 2 ]"]);
    assert_eq!(d.wait(failed)["state"], "failed");
    d.ok(&["requeue", &failed.to_string()]);
    assert_eq!(d.wait(failed)["state"], "succeeded");
    let queued = d.gpuq(&[
        "requeue",
        &d.submit(&[
            "--after",
            &d.submit(&["--", "sleep", "1"]).to_string(),
            "--",
            "true",
        ])
        .to_string(),
    ]);
    assert_eq!(
        queued.status.code(),
        Some(2),
        "requeue of a queued job is refused"
    );
}

#[test]
fn hold_release_drain_and_undrain() {
    let mut d = Daemon::start("sim:1");
    let blocker = d.submit(&["--gpus", "1", "--", "sleep", "0.5"]);
    let held = d.submit(&["--gpus", "1", "--", "true"]);
    d.ok(&["hold", &held.to_string()]);
    let other = d.submit(&["--gpus", "1", "--", "true"]);
    assert_eq!(d.wait(blocker)["state"], "succeeded");
    assert_eq!(
        d.wait(other)["state"],
        "succeeded",
        "the held job did not block the queue"
    );
    let h = d.show(held);
    assert_eq!(h["state"], "queued");
    assert!(h["held_by"].is_string());
    d.ok(&["release", &held.to_string()]);
    assert_eq!(d.wait(held)["state"], "succeeded");
    assert_eq!(
        d.gpuq(&["release", &held.to_string()]).status.code(),
        Some(2)
    );

    d.ok(&["drain"]);
    let waiting = d.submit(&["--gpus", "1", "--", "true"]);
    d.restart();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        d.show(waiting)["state"],
        "queued",
        "a drain survives a restart"
    );
    d.ok(&["undrain"]);
    assert_eq!(d.wait(waiting)["state"], "succeeded");
}

#[test]
fn a_job_that_ends_while_the_daemon_is_down_gets_its_real_status() {
    let mut d = Daemon::start("none");
    let id = d.submit(&["--", "sh", "-c", "echo started; sleep 1; exit 6"]);
    // Killed once the job really runs: a kill between recording the start
    // and the spawn retries that attempt, which never ran (the recovery rule).
    d.wait_for_log(id, "started", Duration::from_secs(10));
    d.kill();
    std::thread::sleep(Duration::from_millis(2000));
    d.restart();
    let job = d.wait(id);
    assert_eq!(
        (
            job["state"].as_str(),
            job["exit_code"].as_i64(),
            job["attempt"].as_u64()
        ),
        (Some("failed"), Some(6), Some(1))
    );
}

#[test]
fn a_cancel_under_way_is_finished_by_the_next_daemon() {
    let mut d = Daemon::start("none");
    let id = d.submit(&[
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo up; while true; do sleep 0.05; done",
    ]);
    assert!(eventually(Duration::from_secs(10), || d
        .ok(&["logs", &id.to_string()])
        .contains("up")));
    d.ok(&["cancel", &id.to_string()]);
    d.restart();
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["signal"].as_i64()),
        (Some("cancelled"), Some(9))
    );
}

#[test]
fn after_a_reboot_running_jobs_are_requeued_with_cause_node_restarted() {
    let mut d = Daemon::start("none");
    let id = d.submit(&[
        "--",
        "sh",
        "-c",
        "[ $GPUQ_ATTEMPT -ge 2 ] && exit 0; sleep 60",
    ]);
    d.wait_running(id);
    let pgid_file = d.job_dir(id).join("attempt-1.pgid");
    assert!(eventually(Duration::from_secs(5), || pgid_file.exists()));
    d.kill();
    // A reboot: every process of the job and its supervisor is gone.
    let pgid: i32 = std::fs::read_to_string(d.job_dir(id).join("attempt-1.pgid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pgid}/stat")).unwrap();
    let ppid: i32 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: killing the test's own job and its supervisor.
    unsafe {
        libc::kill(ppid, libc::SIGKILL);
        libc::killpg(pgid, libc::SIGKILL);
    }
    assert!(eventually(Duration::from_secs(5), || std::fs::File::open(
        d.job_dir(id).join("attempt-1.lock")
    )
    .map(|f| {
        use std::os::unix::io::AsRawFd;
        // SAFETY: probing a lock on our own descriptor.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    })
    .unwrap_or(false)));
    d.set_env("GPUQ_BOOT_ID", "another-boot");
    d.restart();
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["attempt"].as_u64()),
        (Some("succeeded"), Some(2))
    );
    assert_eq!(job["attempts"][0]["reason"], "requeued: node restarted");
}
