//! What a user reads about a job's memory and CPU, through the real daemon and
//! CLI: an attempt whose cgroup counted an OOM kill fails at once with the
//! limit and the fix (not retried), raises `job_oom`, and `show`, `show --json`
//! and `advise` give the figures its cgroup counted.
//!
//! The figures are the exit record's (`attempt-N.exit`, written by the
//! supervisor with the cgroup's counters): the daemon is killed while the job
//! runs, the job ends, its record is given the counters chosen here (over
//! the real ones where the job ran confined), and the restarted daemon finds
//! the end there. So the service's side is tested on any host, with or
//! without cgroups.

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

const GIB: u64 = 1 << 30;

/// Runs a job that waits for `go`, kills the daemon, lets the job end, puts
/// `usage` into its exit record, and restarts the daemon; returns the job's id.
fn ended_with_usage(d: &mut Daemon, args: &[&str], exit: i32, usage: serde_json::Value) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let script = format!(
        "echo started; while [ ! -e '{}' ]; do sleep 0.1; done; exit {exit}",
        go.display()
    );
    let mut argv = args.to_vec();
    argv.extend(["--", "sh", "-c", &script]);
    let id = d.submit(&argv);
    d.wait_for_log(id, "started", Duration::from_secs(30));
    d.kill();
    std::fs::write(&go, "").unwrap();
    let record = d.job_dir(id).join("attempt-1.exit");
    assert!(
        eventually(Duration::from_secs(30), || record.exists()),
        "the supervisor recorded no end"
    );
    put_usage(&record, usage);
    d.restart();
    id
}

/// Adds the cgroup's counters to an exit record, replacing it atomically as
/// the supervisor writes it.
fn put_usage(record: &Path, usage: serde_json::Value) {
    let mut r: serde_json::Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    r["usage"] = usage;
    let tmp = record.with_extension("test-tmp");
    std::fs::write(&tmp, serde_json::to_vec(&r).unwrap()).unwrap();
    std::fs::rename(&tmp, record).unwrap();
}

#[test]
fn a_job_killed_at_its_memory_limit_fails_at_once_saying_so_everywhere() {
    let mut d = Daemon::start("none");
    // It exits 1 on its own after the kernel killed one of its workers: the
    // counter, not the exit status, says what happened.
    let id = ended_with_usage(
        &mut d,
        &["--retries", "3", "--mem", "8G"],
        1,
        serde_json::json!({
            "oom_killed": true,
            "memory_peak_bytes": 8 * GIB,
            "memory_limit_bytes": 8 * GIB,
            "cpu_seconds": 7200.0,
            "cpus": 8
        }),
    );
    let (code, job) = d.wait_within(id, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{job}");
    assert_eq!(
        (job["state"].as_str(), job["attempt"].as_u64()),
        (Some("failed"), Some(1)),
        "failed at once, not retried: {job}"
    );
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("out of memory: the job's limit is 8 GiB (exit 1;"),
        "{reason}"
    );
    assert!(
        reason.contains("Not retried")
            && reason.contains("Ask for more with --mem (e.g. --mem 12G)"),
        "{reason}"
    );

    // The figures, as stable JSON fields of the attempt.
    let attempt = &d.show(id)["attempts"][0];
    assert_eq!(
        attempt["host_usage"],
        serde_json::json!({
            "oom_killed": true,
            "memory_peak_bytes": 8 * GIB,
            "memory_limit_bytes": 8 * GIB,
            "cpu_seconds": 7200.0,
            "cpus": 8
        }),
        "{attempt}"
    );

    // What `gpuq show` prints, next to the limit.
    let shown = d.ok(&["show", &id.to_string()]);
    let line = |key: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(&format!("{key:<12} ")))
            .unwrap_or_else(|| panic!("no {key} line in:\n{shown}"))
            .to_string()
    };
    assert!(
        line("memory") == "memory       asked 8 GiB, peaked at 8 GiB: out of memory at its limit",
        "{shown}"
    );
    assert!(
        line("cpu").starts_with("cpu          8 cores, 2.0 core-hours"),
        "{shown}"
    );

    // The alert is the out-of-memory kind, with the cause.
    let alerts = d.json(&["alerts", "--json"]);
    let oom: Vec<&serde_json::Value> = alerts
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["job"] == id)
        .collect();
    assert_eq!(oom.len(), 1, "{alerts}");
    assert_eq!(oom[0]["kind"], "job_oom", "{alerts}");
    assert!(
        oom[0]["message"]
            .as_str()
            .unwrap()
            .contains("out of memory: the job's limit is 8 GiB"),
        "{alerts}"
    );

    // And advise says what to ask for.
    let advice = d.ok(&["advise", &id.to_string()]);
    assert!(
        advice.contains(
            "- ran out of memory at its limit of 8 GiB: ask for more with --mem (e.g. --mem 12G)"
        ),
        "{advice}"
    );
}

#[test]
fn a_job_that_used_a_seventh_of_its_memory_is_told_what_to_ask_for() {
    let mut d = Daemon::start("none");
    let id = ended_with_usage(
        &mut d,
        &[],
        0,
        serde_json::json!({
            "oom_killed": false,
            "memory_peak_bytes": 9 * GIB,
            "memory_limit_bytes": 64 * GIB,
            "cpu_seconds": 3.0,
        }),
    );
    let (code, job) = d.wait_within(id, Duration::from_secs(30));
    assert_eq!((code, job["state"].as_str()), (Some(0), Some("succeeded")));
    let advice = d.ok(&["advise", &id.to_string()]);
    assert!(
        advice.contains("- given 64 GiB, peaked at 9 GiB: ask for 12 GiB (--mem 12G)"),
        "{advice}"
    );
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("64 GiB, peaked at 9 GiB\n"),
        "no out-of-memory words for a job that was not killed: {shown}"
    );
    assert!(
        shown.contains("\ncpu          no reserved cores, 3.0 core-seconds"),
        "{shown}"
    );
}

#[test]
fn an_ordinary_failure_is_retried_whatever_its_counters_say() {
    let d = Daemon::start("none");
    let id = d.submit(&["--retries", "1", "--", "sh", "-c", "exit 3"]);
    let (_, job) = d.wait_within(id, Duration::from_secs(60));
    // Only an OOM kill the cgroup counted makes it out of memory; confined or
    // not, a plain exit 3 is retried and its reason is its exit status.
    assert_eq!(
        (job["attempt"].as_u64(), job["reason"].as_str()),
        (Some(2), Some("exit 3 (after 1 retries)")),
        "{job}"
    );
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(!shown.contains("out of memory"), "{shown}");
}

#[test]
fn a_confined_jobs_figures_are_live_while_it_runs_and_kept_when_it_ends() {
    if !running_as_root() {
        eprintln!("skipped: confinement needs root");
        return;
    }
    let d = Daemon::start("none");
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    // Holds 100 MiB (written, so it counts), spins until it has used a second
    // of CPU (however busy the host), waits for `go`.
    let script = format!(
        "import os, time\nb = bytearray(100 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n\
         while time.process_time() < 1: pass\nprint('holding', flush=True)\n\
         while not os.path.exists({go:?}): time.sleep(0.1)\n",
        go = go.display().to_string()
    );
    let id = d.submit(&[
        "--mem", "512M", "--cpus", "1", "--", "python3", "-c", &script,
    ]);
    d.wait_for_log(id, "holding", Duration::from_secs(30));
    // `gpuq top` reads running jobs through the listing: the figures are there, live.
    let listed = d.json(&["ls", "--json"]);
    let job = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap_or_else(|| panic!("job {id} not listed: {listed}"));
    let live = &job["host_usage"];
    assert_eq!(live["memory_limit_bytes"], 512u64 << 20, "{job}");
    assert!(
        live["memory_peak_bytes"].as_u64().unwrap_or(0) >= 100 << 20,
        "the 100 MiB it holds counts: {job}"
    );
    assert!(
        live["cpu_seconds"].as_f64().unwrap_or(0.0) >= 0.5,
        "a second of spinning counts: {job}"
    );
    std::fs::write(&go, "").unwrap();
    let (code, end) = d.wait_within(id, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{end}");
    let kept = &end["attempts"][0]["host_usage"];
    assert_eq!(kept["memory_limit_bytes"], 512u64 << 20, "{end}");
    assert_eq!(kept["oom_killed"], false, "{end}");
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("\nmemory       asked 512 MiB, peaked at 1"),
        "{shown}"
    );
    assert!(shown.contains("\ncpu          "), "{shown}");
}
