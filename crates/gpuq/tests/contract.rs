//! The job contract, written once and run against every backend: exit codes,
//! what a job sees (its tracked run included), the stop protocol, the exit-75 requeue, what a daemon
//! restarted after `kill -9` does with the jobs it left (the "Contracts" of
//! the design; docs/slurm.md, "Tested"), and on backends that confine their
//! jobs, that a job reaches only its own GPUs and that nothing it starts
//! outlives a cancel (contract/confinement.rs).
//!
//! Each test is a function of a [`Backend`] (contract/backend.rs) that the
//! macro below expands once per backend: `local::NAME` runs in every
//! `cargo test`, `slurm::NAME` only with `--features slurm-tests`, inside
//! `bash tests/slurm/run`. The assertions are the same for every backend; a
//! backend has only its own figures (how long a job takes to start, to be
//! killed, to have its end recorded).

#[path = "contract/backend.rs"]
mod backend;
mod common;
// Run only on backends that confine their jobs.
#[cfg(any(feature = "slurm-tests", feature = "system-tests"))]
#[path = "contract/confinement.rs"]
mod confinement;

use backend::Backend;
use common::*;
#[cfg(any(feature = "slurm-tests", feature = "system-tests"))]
use confinement::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// One `#[test]` per backend for each named test function; those after
/// `confined:` (contract/confinement.rs) only on the backends that confine
/// their jobs with cgroups.
macro_rules! for_each_backend {
    ($($test:ident),* $(,)? ; confined: $($confined:ident),* $(,)?) => {
        /// Jobs run on this machine under `gpuq __supervise`.
        mod local {
            $(#[test] fn $test() { super::$test(&super::backend::LOCAL) })*
            /// In cgroups of their own, devices through the v1 devices controller.
            #[cfg(feature = "system-tests")]
            mod v1 {
                $(#[test] fn $confined() { super::super::$confined(&super::super::backend::LOCAL_V1) })*
            }
            /// In cgroups of their own, devices through the cgroup v2 device program.
            #[cfg(feature = "system-tests")]
            mod bpf {
                $(#[test] fn $confined() { super::super::$confined(&super::super::backend::LOCAL_BPF) })*
            }
        }
        /// Jobs run through Slurm (`bash tests/slurm/run`), confined by Slurm's
        /// task/cgroup and proctrack/cgroup.
        #[cfg(feature = "slurm-tests")]
        mod slurm {
            $(#[test] fn $test() { super::$test(&super::backend::SLURM) })*
            $(#[test] fn $confined() { super::$confined(&super::backend::SLURM) })*
        }
    };
}

for_each_backend!(
    exit_codes_pass_through_run_and_wait,
    a_job_killed_by_a_signal_fails,
    the_job_sees_the_contract_environment,
    a_job_without_gpus_sees_none,
    cancel_sends_sigterm_and_the_job_finishes_in_its_grace_period,
    sigterm_reaches_every_process_of_the_job,
    a_job_that_ignores_sigterm_is_killed_after_the_grace_period,
    a_cancel_right_after_the_start_keeps_the_grace_period,
    the_early_signal_comes_before_the_time_limit,
    the_time_limit_stops_the_job,
    exit_75_requeues_with_the_checkpoints_and_costs_no_retry,
    a_job_keeps_running_across_a_daemon_kill_and_its_end_is_recorded,
    a_job_that_ends_while_the_daemon_is_down_gets_its_exit_code,
    the_time_limit_holds_across_a_daemon_kill,
    an_asha_trial_pauses_at_its_rung_and_resumes_from_its_checkpoint;
    confined:
    a_job_opens_only_its_own_gpus_even_after_setting_cuda_visible_devices,
    a_process_that_leaves_the_job_s_session_does_not_outlive_cancel,
);

/// Seconds from the epoch, as the job prints them with `date +%s.%N` after `tag`
/// (a line cut short by a kill is skipped).
fn stamps(log: &str, tag: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|l| l.strip_prefix(tag))
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

fn first_stamp(log: &str, tag: &str) -> f64 {
    *stamps(log, tag)
        .first()
        .unwrap_or_else(|| panic!("no {tag:?} line in the log:\n{log}"))
}

fn events(job: &Value) -> Vec<&str> {
    job["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect()
}

fn reason(job: &Value) -> &str {
    job["reason"].as_str().unwrap_or("")
}

/// Waits until a file exists (a job's marker, or the exit record of an attempt).
fn wait_for_file(b: &Backend, path: &Path, d: &Daemon) {
    assert!(
        eventually(b.job_within(Duration::ZERO), || path.exists()),
        "{} did not appear ({}); {}",
        path.display(),
        b.name,
        d.daemon_log_tail(40)
    );
}

// ---------------------------------------------------------------- exit codes

fn exit_codes_pass_through_run_and_wait(b: &Backend) {
    let d = b.start();
    let within = b.job_within(Duration::from_secs(1));
    let run = output_within(
        &mut d.cmd(&["run", "--", "sh", "-c", "echo before; exit 3"]),
        within,
    )
    .expect("gpuq run ends with its job");
    assert_eq!(
        run.status.code(),
        Some(3),
        "{}: {}{}\n{}",
        b.name,
        stdout(&run),
        stderr(&run),
        d.daemon_log_tail(40)
    );
    assert_eq!(stdout(&run), "before\n", "run streams the job's output");
    let run = output_within(&mut d.cmd(&["run", "--", "true"]), within).expect("gpuq run ends");
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));

    let ok = d.submit(&["--", "true"]);
    let bad = d.submit(&["--", "sh", "-c", "exit 3"]);
    let (code, job) = d.wait_within(ok, within);
    assert_eq!(code, Some(0), "{job}");
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("succeeded"), Some(0))
    );
    let (code, job) = d.wait_within(bad, within);
    assert_eq!(code, Some(3), "{job}");
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("failed"), Some(3))
    );
    assert!(reason(&job).contains("exit 3"), "{job}");
    let both = output_within(
        &mut d.cmd(&["wait", &ok.to_string(), &bad.to_string()]),
        within,
    )
    .expect("gpuq wait of ended jobs returns");
    assert_eq!(both.status.code(), Some(1), "one of them failed");
}

fn a_job_killed_by_a_signal_fails(b: &Backend) {
    let d = b.start();
    let id = d.submit(&["--", "sh", "-c", "echo up; kill -9 $$"]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(1)));
    assert_eq!(code, Some(128 + 9), "{job}");
    assert_eq!(
        (job["state"].as_str(), job["signal"].as_i64()),
        (Some("failed"), Some(9)),
        "{job}"
    );
    assert!(reason(&job).contains("killed by signal 9"), "{job}");
    assert_eq!(d.log(id), "up\n");
}

// ------------------------------------------------------------ what a job sees

fn the_job_sees_the_contract_environment(b: &Backend) {
    let d = b.start();
    let work = tempfile::tempdir().unwrap();
    let work_dir = work.path().canonicalize().unwrap();
    // The job asks the API about itself with only GPUQ_URL and GPUQ_TOKEN: no
    // home to read a token from.
    let script = format!(
        r#"echo CVD=$CUDA_VISIBLE_DEVICES
echo ID=$GPUQ_JOB_ID
echo ATTEMPT=$GPUQ_ATTEMPT
for dir in "$GPUQ_CHECKPOINT_DIR" "$GPUQ_OUTPUT_DIR"; do
  test -n "$dir" && test -d "$dir" && echo in-it > "$dir/probe" && echo WRITABLE=$dir
done
test -n "$GPUQ_METRICS_FILE" && echo '{{"step": 1, "loss": 0.5}}' >> "$GPUQ_METRICS_FILE" && echo METRICS=$GPUQ_METRICS_FILE
if curl -sf -X POST -H "authorization: Bearer $MLFLOW_TRACKING_TOKEN" -H 'content-type: application/json' \
   --data-binary "{{\"run_id\": \"$MLFLOW_RUN_ID\", \"key\": \"acc\", \"value\": 0.75, \"timestamp\": 1, \"step\": 1}}" \
   "$MLFLOW_TRACKING_URI/api/2.0/mlflow/runs/log-metric" > /dev/null; then echo MLFLOW_OK; fi
echo PWD=$(pwd)
echo KEY=$MY_KEY
echo to-stderr >&2
if env -u GPUQ_HOME HOME=/nonexistent XDG_DATA_HOME=/nonexistent GPUQ_NO_AUTOSTART=1 \
   '{GPUQ}' show "$GPUQ_JOB_ID" --json > "$GPUQ_OUTPUT_DIR/self.json"; then echo API_OK; fi
echo to-stdout"#
    );
    let id = d.submit(&[
        "--gpus",
        "2",
        "--cwd",
        work_dir.to_str().unwrap(),
        "--env",
        "MY_KEY=from --env",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(2)));
    let log = d.log(id);
    assert_eq!(code, Some(0), "{job}\n{log}");
    let value = |key: &str| -> Vec<&str> {
        log.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .collect()
    };

    let gpus: Vec<&str> = value("CVD")
        .into_iter()
        .flat_map(|v| v.split(',').filter(|g| !g.is_empty()))
        .collect();
    assert_eq!(gpus.len(), 2, "two GPUs asked, two visible: {log}");
    // Indices, or UUIDs where the job's devices are confined (CUDA then
    // numbers only the job's GPUs, so indices would name the wrong ones).
    assert!(
        gpus.iter()
            .all(|g| g.parse::<u32>().is_ok() || g.starts_with("GPU-"))
            && gpus[0] != gpus[1],
        "two distinct GPUs: {log}"
    );
    assert_eq!(value("ID"), [id.to_string()], "{log}");
    assert_eq!(value("ATTEMPT"), ["1"], "{log}");
    let dirs = value("WRITABLE");
    assert_eq!(
        dirs.len(),
        2,
        "GPUQ_CHECKPOINT_DIR and GPUQ_OUTPUT_DIR exist and are writable: {log}"
    );
    assert_ne!(dirs[0], dirs[1], "{log}");
    for dir in &dirs {
        assert_eq!(
            std::fs::read_to_string(Path::new(dir).join("probe")).unwrap(),
            "in-it\n"
        );
    }
    let metrics = value("METRICS");
    assert_eq!(metrics.len(), 1, "GPUQ_METRICS_FILE is writable: {log}");
    assert!(std::fs::read_to_string(metrics[0])
        .unwrap()
        .contains(r#"{"step": 1, "loss": 0.5}"#));
    assert_eq!(value("PWD"), [work_dir.to_str().unwrap()], "{log}");
    assert_eq!(value("KEY"), ["from --env"], "{log}");
    for line in ["to-stderr", "to-stdout", "API_OK", "MLFLOW_OK"] {
        assert!(log.lines().any(|l| l == line), "no {line:?} in:\n{log}");
    }
    // The job's run holds what it logged through the MLflow API and its metrics file.
    let tracked: Value = serde_json::from_str(&d.get(&format!("/v1/jobs/{id}/metrics"))).unwrap();
    let keys: Vec<&str> = tracked["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["key"].as_str())
        .collect();
    assert_eq!(keys, ["acc", "loss"], "{tracked}");
    let seen: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(dirs[1]).join("self.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (seen["id"].as_u64(), seen["state"].as_str()),
        (Some(id), Some("running")),
        "the job saw itself running through the API"
    );
}

fn a_job_without_gpus_sees_none(b: &Backend) {
    let d = b.start();
    let id = d.submit(&["--", "sh", "-c", "echo \"[${CUDA_VISIBLE_DEVICES-unset}]\""]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(1)));
    assert_eq!(code, Some(0), "{job}");
    assert_eq!(
        d.log(id),
        "[]\n",
        "an empty CUDA_VISIBLE_DEVICES: no GPU visible"
    );
}

// ------------------------------------------------------------- stop protocol

fn cancel_sends_sigterm_and_the_job_finishes_in_its_grace_period(b: &Backend) {
    let d = b.start();
    let marks = tempfile::tempdir().unwrap();
    let saved = marks.path().join("saved");
    let id = d.submit(&[
        "--grace",
        "20s",
        "--env",
        &format!("SAVED={}", saved.display()),
        "--",
        "sh",
        "-c",
        "trap 'echo got-TERM; sleep 0.5; echo checkpoint > \"$SAVED\"; echo saved; exit 0' TERM; \
         echo started; while true; do sleep 0.1; done",
    ]);
    d.wait_for_log(id, "started", b.start_within);
    d.ok(&["cancel", &id.to_string()]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(1)));
    assert_eq!(code, Some(1), "gpuq wait: a cancelled job is no success");
    assert_eq!(job["state"], "cancelled", "{job}");
    assert!(
        reason(&job).starts_with("cancelled by")
            && reason(&job).contains("ended after SIGTERM, within the grace period"),
        "{job}"
    );
    let log = d.log(id);
    assert!(
        log.contains("got-TERM") && log.contains("saved"),
        "the job's trap ran to its end: {log}"
    );
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), "checkpoint\n");
}

fn sigterm_reaches_every_process_of_the_job(b: &Backend) {
    let d = b.start();
    // A launcher with a worker (as torchrun, or a shell wrapper, has): SIGTERM goes
    // to the job's whole process group, so the worker can save its state too.
    let id = d.submit(&[
        "--grace",
        "4s",
        "--",
        "sh",
        "-c",
        "sh -c 'trap \"echo worker-got-TERM \\$(date +%s.%N); exit 0\" TERM; echo worker-up; \
                while true; do sleep 0.1; done' & \
         trap 'echo launcher-got-TERM $(date +%s.%N); wait; echo launcher-done; exit 0' TERM; \
         while true; do sleep 0.1; done",
    ]);
    d.wait_for_log(id, "worker-up", b.start_within);
    b.wait_seen_running(&d, id);
    d.ok(&["cancel", &id.to_string()]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(4) + b.kill_slack));
    let log = d.log(id);
    assert_eq!(code, Some(1), "{job}");
    assert_eq!(job["state"], "cancelled", "{job}");
    let launcher = first_stamp(&log, "launcher-got-TERM ");
    let worker = first_stamp(&log, "worker-got-TERM ");
    assert!(
        (worker - launcher).abs() < 1.0,
        "the worker got SIGTERM with the launcher, not {:.2} s apart:\n{log}",
        worker - launcher
    );
    assert!(log.contains("launcher-done"), "{log}");
    assert!(
        reason(&job).contains("ended after SIGTERM, within the grace period"),
        "{job}\n{log}"
    );
}

fn a_job_that_ignores_sigterm_is_killed_after_the_grace_period(b: &Backend) {
    let d = b.start();
    let grace = 1.0;
    let id = d.submit(&[
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        "trap 'termed=1; echo term $(date +%s.%N)' TERM; echo started; \
         while true; do sleep 0.1; [ -z \"$termed\" ] || echo alive $(date +%s.%N); done",
    ]);
    d.wait_for_log(id, "started", b.start_within);
    // (A cancel the moment a job starts is a_cancel_right_after_the_start_keeps_the_grace_period.)
    b.wait_seen_running(&d, id);
    d.ok(&["cancel", &id.to_string()]);
    let (code, job) = d.wait_within(
        id,
        b.job_within(Duration::from_secs_f64(grace) + b.kill_slack),
    );
    assert_eq!(code, Some(1), "{job}");
    assert_eq!(
        (job["state"].as_str(), job["signal"].as_i64()),
        (Some("cancelled"), Some(9)),
        "{job}"
    );
    assert!(
        reason(&job).contains("killed with SIGKILL after the grace period"),
        "{job}"
    );
    let log = d.log(id);
    assert_eq!(
        stamps(&log, "term ").len(),
        1,
        "one SIGTERM, then SIGKILL:\n{log}"
    );
    let term = first_stamp(&log, "term ");
    let last_alive = stamps(&log, "alive ").into_iter().fold(f64::NAN, f64::max);
    let lived = last_alive - term;
    assert!(
        lived >= grace - 0.3,
        "the job ran through its {grace} s grace period after SIGTERM, not {lived:.2} s:\n{log}"
    );
    assert!(
        lived <= grace + b.kill_slack.as_secs_f64() + b.clock_slack,
        "then SIGKILL ended it, but it ran {lived:.2} s after SIGTERM:\n{log}"
    );
}

fn a_cancel_right_after_the_start_keeps_the_grace_period(b: &Backend) {
    let d = b.start();
    // The job has started, and is cancelled at once: its grace period is its
    // own, whether or not the daemon has noticed the start yet (on Slurm, the
    // next poll).
    let grace = b.long_grace_s as f64;
    let marks = tempfile::tempdir().unwrap();
    let up = marks.path().join("up");
    let id = d.submit(&[
        "--grace",
        &format!("{}s", b.long_grace_s),
        "--env",
        &format!("UP={}", up.display()),
        "--",
        "sh",
        "-c",
        "trap 'termed=1; echo term $(date +%s.%N)' TERM; touch \"$UP\"; echo started; \
         while true; do sleep 0.1; [ -z \"$termed\" ] || echo alive $(date +%s.%N); done",
    ]);
    let deadline = std::time::Instant::now() + b.start_within;
    while !up.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} never started"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    d.ok(&["cancel", &id.to_string()]);
    let (_, job) = d.wait_within(
        id,
        b.job_within(Duration::from_secs_f64(grace) + b.kill_slack),
    );
    assert_eq!(job["state"], "cancelled", "{job}");
    let log = d.log(id);
    let term = first_stamp(&log, "term ");
    let last_alive = stamps(&log, "alive ").into_iter().fold(f64::NAN, f64::max);
    let lived = last_alive - term;
    assert!(
        lived >= grace - 0.3,
        "the job ran through its {grace} s grace period after SIGTERM, not {lived:.2} s: {job}\n{log}"
    );
    assert!(
        reason(&job).contains("killed with SIGKILL after the grace period"),
        "{job}"
    );
}

fn the_early_signal_comes_before_the_time_limit(b: &Backend) {
    let d = b.start();
    let (limit, lead) = (3.0, 2.0);
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
        "echo start $(date +%s.%N); trap 'echo usr1 $(date +%s.%N)' USR1; \
         trap 'echo term $(date +%s.%N); exit 0' TERM; while true; do sleep 0.1; done",
    ]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(4)));
    let log = d.log(id);
    assert_eq!(code, Some(1), "{job}\n{log}");
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        reason(&job).starts_with("time limit 3s reached; ended after SIGTERM"),
        "{job}"
    );
    assert!(events(&job).contains(&"early_signal"), "{job}");
    let start = first_stamp(&log, "start ");
    let (usr1, term) = (
        first_stamp(&log, "usr1 ") - start,
        first_stamp(&log, "term ") - start,
    );
    let due = limit - lead;
    assert!(
        (due - 0.3..due + b.clock_slack).contains(&usr1),
        "USR1 {lead} s before a {limit} s limit came at +{usr1:.2} s\n{log}"
    );
    assert!(
        (limit - 0.3..limit + b.clock_slack).contains(&term),
        "SIGTERM at the limit came at +{term:.2} s\n{log}"
    );
}

fn the_time_limit_stops_the_job(b: &Backend) {
    let d = b.start();
    let id = d.submit(&[
        "--time-limit",
        "2s",
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        "echo started; sleep 30; echo not-reached",
    ]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(3) + b.kill_slack));
    assert_ne!(code, Some(0), "{job}");
    assert_eq!(job["state"], "failed", "{job}");
    assert!(reason(&job).starts_with("time limit 2s reached"), "{job}");
    let took = job["ended_at"].as_i64().unwrap() - job["started_at"].as_i64().unwrap();
    let most = 3_000 + b.kill_slack.as_millis() as i64 + (b.clock_slack * 1000.0) as i64;
    assert!(
        (1_900..most).contains(&took),
        "stopped after {took} ms: {job}"
    );
    assert!(!d.log(id).contains("not-reached"));
}

// -------------------------------------------------------------- exit 75

fn exit_75_requeues_with_the_checkpoints_and_costs_no_retry(b: &Backend) {
    let d = b.start();
    let id = d.submit(&[
        "--retries",
        "0",
        "--",
        "sh",
        "-c",
        "echo attempt=$GPUQ_ATTEMPT; \
         if [ \"$GPUQ_ATTEMPT\" = 1 ]; then echo step-100 > \"$GPUQ_CHECKPOINT_DIR/state\"; exit 75; fi; \
         echo resumed-from=$(cat \"$GPUQ_CHECKPOINT_DIR/state\")",
    ]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(1)) * 2);
    assert_eq!(code, Some(0), "{job}");
    assert_eq!(
        (
            job["state"].as_str(),
            job["attempt"].as_u64(),
            job["failures"].as_u64()
        ),
        (Some("succeeded"), Some(2), Some(0)),
        "{job}"
    );
    let first = &job["attempts"][0];
    assert_eq!(first["exit_code"], 75, "{job}");
    // Its checkpoint is progress: queued again after the base back-off alone.
    assert_eq!(
        first["reason"], "requeued by the job (exit 75); starts again after 1s",
        "{job}"
    );
    assert!(events(&job).contains(&"requeued"), "{job}");
    assert_eq!(
        d.ok(&["logs", &id.to_string(), "--attempt", "1"]),
        "attempt=1\n"
    );
    assert_eq!(d.log(id), "attempt=2\nresumed-from=step-100\n");
}

// ------------------------------------------- sweeps

fn an_asha_trial_pauses_at_its_rung_and_resumes_from_its_checkpoint(b: &Backend) {
    let d = b.start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.yaml");
    // A trial in sh: resumes from its checkpoint, logs val_loss = x for each
    // step up to GPUQ_TRIAL_MAX_STEP, and exits 0 (paused at its rung).
    let script = r#"start=$(cat "$GPUQ_CHECKPOINT_DIR/step" 2>/dev/null || echo 0)
echo "attempt=$GPUQ_ATTEMPT start=$start max=$GPUQ_TRIAL_MAX_STEP"
x=$(echo "$GPUQ_PARAMS" | sed 's/.*"x":\([0-9.e-]*\).*/\1/')
for s in $(seq $((start + 1)) "$GPUQ_TRIAL_MAX_STEP"); do
  echo "{\"step\": $s, \"val_loss\": $x}" >> "$GPUQ_METRICS_FILE"
  echo "$s" > "$GPUQ_CHECKPOINT_DIR/step"
done
"#;
    let yaml = serde_json::json!({
        "name": "contract-sweep",
        "run": script,
        "gpus": 1,
        "parameters": {"x": {"uniform": [0.0, 1.0]}},
        "metric": {"name": "val_loss", "goal": "minimize"},
        "searcher": {"name": "asha", "max_trials": 3, "max_concurrent": 2, "max_step": 3, "min_step": 1, "eta": 3},
    });
    std::fs::write(&file, yaml.to_string()).unwrap();
    let id = d.ok(&["sweep", &file.display().to_string()]);
    let id = id.trim();
    let mut s = Value::Null;
    let ended = eventually(b.job_within(Duration::from_secs(1)) * 4, || {
        s = d.json(&["sweep", "show", id, "--json"]);
        s["state"] != "running"
    });
    assert!(ended, "on {}: {s:#}\n{}", b.name, d.daemon_log_tail(40));
    assert_eq!(s["state"], "done", "{s:#}");
    let trials = s["trials"].as_array().unwrap();
    let states: Vec<&str> = trials
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["completed", "stopped", "stopped"], "{s:#}");
    // The best of three went on from where it paused, on whichever node it got.
    let best = trials[0]["job"].as_u64().unwrap();
    assert_eq!(
        d.ok(&["logs", &best.to_string(), "--attempt", "2"]),
        "attempt=2 start=1 max=3\n"
    );
    let lowest = trials
        .iter()
        .map(|t| t["params"]["x"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(trials[0]["params"]["x"].as_f64(), Some(lowest));
}

// ------------------------------------------- re-attach after a daemon kill

fn a_job_keeps_running_across_a_daemon_kill_and_its_end_is_recorded(b: &Backend) {
    let mut d = b.start();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let id = d.submit(&[
        "--gpus",
        "1",
        "--env",
        &format!("GO={}", go.display()),
        "--",
        "sh",
        "-c",
        "echo started attempt=$GPUQ_ATTEMPT; while [ ! -e \"$GO\" ]; do sleep 0.1; done; echo finishing; exit 4",
    ]);
    d.wait_for_log(id, "started", b.start_within);
    b.wait_seen_running(&d, id);
    d.kill();
    d.restart();
    let shown = d.show(id);
    assert_eq!(
        (shown["state"].as_str(), shown["attempt"].as_u64()),
        (Some("running"), Some(1)),
        "the restarted daemon knows the job runs: {shown}"
    );
    // Only now may the job end: it ran through the daemon's death.
    std::fs::write(&go, "").unwrap();
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(1)));
    assert_eq!(code, Some(4), "{job}");
    assert_eq!(
        (
            job["state"].as_str(),
            job["exit_code"].as_i64(),
            job["attempt"].as_u64()
        ),
        (Some("failed"), Some(4), Some(1)),
        "{job}"
    );
    assert_eq!(
        job["attempts"].as_array().unwrap().len(),
        1,
        "not started twice"
    );
    assert_eq!(d.log(id), "started attempt=1\nfinishing\n");
}

fn a_job_that_ends_while_the_daemon_is_down_gets_its_exit_code(b: &Backend) {
    let mut d = b.start();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let id = d.submit(&[
        "--env",
        &format!("GO={}", go.display()),
        "--",
        "sh",
        "-c",
        "echo started; while [ ! -e \"$GO\" ]; do sleep 0.1; done; echo ending; exit 6",
    ]);
    d.wait_for_log(id, "started", b.start_within);
    b.wait_seen_running(&d, id);
    d.kill();
    std::fs::write(&go, "").unwrap();
    // The attempt's exit record: the job has ended, with no daemon to see it.
    wait_for_file(b, &d.job_dir(id).join("attempt-1.exit"), &d);
    d.restart();
    let (code, job) = d.wait_within(id, b.job_within(Duration::ZERO));
    assert_eq!(code, Some(6), "{job}");
    assert_eq!(
        (
            job["state"].as_str(),
            job["exit_code"].as_i64(),
            job["attempt"].as_u64()
        ),
        (Some("failed"), Some(6), Some(1)),
        "{job}"
    );
    assert_eq!(d.log(id), "started\nending\n");
}

fn the_time_limit_holds_across_a_daemon_kill(b: &Backend) {
    let mut d = b.start();
    let limit = 4.0;
    let id = d.submit(&[
        "--time-limit",
        "4s",
        "--grace",
        "5s",
        "--",
        "sh",
        "-c",
        "echo start $(date +%s.%N); trap 'echo term $(date +%s.%N); exit 0' TERM; \
         while true; do sleep 0.1; done",
    ]);
    d.wait_for_log(id, "start", b.start_within);
    b.wait_seen_running(&d, id);
    // A quarter of the limit has passed when the daemon dies.
    std::thread::sleep(Duration::from_secs(1));
    d.kill();
    d.restart();
    let (_, job) = d.wait_within(id, b.job_within(Duration::from_secs(4)));
    let log = d.log(id);
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        reason(&job).starts_with("time limit 4s reached; ended after SIGTERM"),
        "{job}"
    );
    let term = first_stamp(&log, "term ") - first_stamp(&log, "start ");
    assert!(
        (limit - 0.3..limit + b.clock_slack).contains(&term),
        "SIGTERM at the {limit} s limit came at +{term:.2} s\n{log}"
    );
}
