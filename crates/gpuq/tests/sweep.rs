//! Sweeps end to end, on a real daemon with simulated GPUs: trials are jobs
//! that checkpoint and pause at their rung; a promoted trial resumes where it
//! paused; a paused trial holds no GPU; budgets stop a sweep; failing trials
//! fail alone; a daemon killed with -9 resumes the sweep without losing or
//! repeating a trial. The trial program is tests/sweep/trial.py (Python, the
//! real SDK).

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn trial_script() -> String {
    repo_root()
        .join("crates/gpuq/tests/sweep/trial.py")
        .display()
        .to_string()
}

/// A sweep file running tests/sweep/trial.py; `extra` adds or overrides lines.
fn sweep_file(dir: &std::path::Path, searcher: &str, extra: &str) -> String {
    let sdk = repo_root().join("sdk/python");
    let text = format!(
        "name: toy\ncommand: [python3, {}]\ngpus: 1\nenv:\n  PYTHONPATH: {}\n  STEP_SECONDS: '0.05'\n\
         parameters:\n  x: {{uniform: [0.0, 1.0]}}\nmetric: {{name: val_loss, goal: minimize}}\n\
         searcher: {searcher}\n{extra}",
        trial_script(),
        sdk.display()
    );
    let path = dir.join("sweep.yaml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn start_sweep(d: &Daemon, file: &str) -> i64 {
    d.ok(&["sweep", file])
        .trim()
        .parse()
        .expect("sweep prints its id")
}

fn show(d: &Daemon, id: i64) -> Value {
    d.json(&["sweep", "show", &id.to_string(), "--json"])
}

/// Waits for the sweep to end (at most `secs`); returns its detail.
fn wait_ended(d: &Daemon, id: i64, secs: u64) -> Value {
    let mut last = Value::Null;
    let ended = eventually(Duration::from_secs(secs), || {
        last = show(d, id);
        last["state"] != "running"
    });
    assert!(
        ended,
        "sweep {id} did not end: {last:#}\n{}",
        d.daemon_log_tail(40)
    );
    last
}

/// Each attempt's (attempt, start step, max step, gpus) from the trial's outputs.
fn attempts(d: &Daemon, job: u64) -> Vec<(u32, u64, u64, String)> {
    let text =
        std::fs::read_to_string(d.job_dir(job).join("outputs/attempts.txt")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with("end "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f.get(3).unwrap_or(&"").to_string(),
            )
        })
        .collect()
}

const ASHA_9: &str =
    "{name: asha, max_trials: 9, max_concurrent: 2, max_step: 9, min_step: 1, eta: 3}";

#[test]
fn asha_promotes_the_best_and_a_promoted_trial_resumes_from_its_checkpoint() {
    let d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    // Every promotion through a pause (see the in-place test below).
    let file = sweep_file(dir.path(), ASHA_9, "");
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "STEP_SECONDS: '0.05'",
        "STEP_SECONDS: '0.05'\n  PAUSE_ONLY: '1'",
    );
    std::fs::write(&file, text).unwrap();
    let id = start_sweep(&d, &file);
    let s = wait_ended(&d, id, 90);
    assert_eq!(s["state"], "done", "{s:#}");
    assert_eq!(s["rungs"], serde_json::json!([1, 3, 9]));
    let trials = s["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 9);
    // Best first: the one trial that reached step 9 is the one with the lowest x.
    let best = &trials[0];
    assert_eq!(best["state"], "completed", "{s:#}");
    assert_eq!(best["last_step"], 9);
    let lowest = trials
        .iter()
        .min_by(|a, b| {
            a["params"]["x"]
                .as_f64()
                .partial_cmp(&b["params"]["x"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(best["trial"], lowest["trial"]);
    assert_eq!(s["best"]["trial"], best["trial"]);
    // Three attempts, each resuming where the last paused: never from step 0 again.
    let job = best["job"].as_u64().unwrap();
    let starts: Vec<(u64, u64)> = attempts(&d, job).iter().map(|a| (a.1, a.2)).collect();
    assert_eq!(starts, vec![(0, 1), (1, 3), (3, 9)], "{starts:?}");
    // Its run's history has every step once.
    let m = d.json(&["metrics", &job.to_string(), "--json"]);
    let series = m["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "val_loss")
        .unwrap();
    let steps: Vec<u64> = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=9).collect::<Vec<_>>());
    // ASHA at eta 3 on 9 trials: at least the top 3 at step 1 went on to step 3
    // (asynchronous ASHA may promote more, ranking on the results so far), at
    // least 1 of those to step 9; the rest were stopped where they paused.
    let at = |state: &str, step: u64| {
        trials
            .iter()
            .filter(|t| t["state"] == state && t["rung_step"] == step)
            .count()
    };
    let past_1 = 9 - at("stopped", 1);
    let past_3 = past_1 - at("stopped", 3);
    assert!((3..9).contains(&past_1), "{past_1} went past step 1: {s:#}");
    assert!(
        past_3 >= 1 && past_3 < past_1,
        "{past_3} went past step 3: {s:#}"
    );
    assert_eq!(at("completed", 9), past_3, "{s:#}");
    let stopped = trials.iter().find(|t| t["state"] == "stopped").unwrap();
    assert!(
        stopped["reason"].as_str().unwrap().contains("ranked"),
        "{stopped:#}"
    );
    let jobs = d.json(&["ls", "--json", "--all"]);
    assert!(jobs
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["state"] != "queued" && j["state"] != "running"));
}

#[test]
fn a_paused_trial_frees_its_gpu_for_another_trial() {
    // One GPU, two trials at once: only possible if a paused trial holds no GPU.
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let file = sweep_file(dir.path(), ASHA_9, "");
    let id = start_sweep(&d, &file);
    let mut seen = false;
    eventually(Duration::from_secs(60), || {
        let s = show(&d, id);
        let states: Vec<&str> = s["trials"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["state"].as_str().unwrap())
            .collect();
        seen |= states.contains(&"paused") && states.contains(&"running");
        seen || s["state"] != "running"
    });
    assert!(seen, "never saw a trial run while another was paused");
    let s = wait_ended(&d, id, 90);
    assert_eq!(s["state"], "done");
    // Every trial ran on GPU 0, the only one.
    for t in s["trials"].as_array().unwrap() {
        for a in attempts(&d, t["job"].as_u64().unwrap()) {
            assert_eq!(a.3, "0");
        }
    }
}

#[test]
fn a_sweep_stops_at_its_budget_by_worst_case() {
    let d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    // Each attempt may take 4 s of one GPU; 10 GPU-seconds fit two attempts at
    // a time by worst case, and what they used counts as it adds up.
    let budget = 10.0 / 3600.0;
    let file = sweep_file(
        dir.path(),
        "{name: random, max_trials: 40, max_concurrent: 4, max_step: 20}",
        &format!("time_limit: 4s\nbudget: {{gpu_hours: {budget}}}\n"),
    );
    let id = start_sweep(&d, &file);
    let s = wait_ended(&d, id, 120);
    assert_eq!(s["state"], "budget", "{s:#}");
    let reason = s["reason"].as_str().unwrap();
    assert!(reason.contains("budget"), "{reason}");
    let used = s["used"]["gpu_hours"].as_f64().unwrap();
    assert!(used <= budget + 1e-9, "used {used} of {budget}");
    let n = s["trial_count"].as_u64().unwrap();
    assert!((2..40).contains(&n), "{n} trials");
    // Never more than two attempts under way at once (10 s / 4 s).
    let mut spans = Vec::new();
    for t in s["trials"].as_array().unwrap() {
        let job = d.show(t["job"].as_u64().unwrap());
        for a in job["attempts"].as_array().unwrap() {
            spans.push((
                a["started_at"].as_i64().unwrap(),
                a["ended_at"].as_i64().unwrap(),
            ));
        }
    }
    for &(s0, _) in &spans {
        let open = spans.iter().filter(|(a, b)| *a <= s0 && s0 < *b).count();
        assert!(open <= 2, "{open} attempts at once: {spans:?}");
    }
    let ls = d.ok(&["sweep", "ls"]);
    assert!(ls.contains("budget"), "{ls}");
}

#[test]
fn a_crashing_trial_is_retried_then_failed_and_the_sweep_goes_on() {
    let d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    let file = sweep_file(
        dir.path(),
        "{name: random, max_trials: 4, max_concurrent: 2, max_step: 3}",
        "retries: 1\nretry_delay: 1s\n",
    );
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "STEP_SECONDS: '0.05'",
        "STEP_SECONDS: '0.05'\n  CRASH_TRIALS: '1'",
    );
    std::fs::write(&file, text).unwrap();
    let id = start_sweep(&d, &file);
    let s = wait_ended(&d, id, 90);
    assert_eq!(s["state"], "done", "{s:#}");
    let by_trial: BTreeMap<u64, &Value> = s["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["trial"].as_u64().unwrap(), t))
        .collect();
    assert_eq!(by_trial.len(), 4);
    assert_eq!(by_trial[&1]["state"], "failed");
    assert_eq!(by_trial[&1]["attempts"], 2, "retried once, per the spec");
    for t in [0, 2, 3] {
        assert_eq!(by_trial[&t]["state"], "completed", "{s:#}");
    }
    assert_ne!(s["best"]["trial"], 1);
}

#[test]
fn a_daemon_killed_mid_sweep_resumes_it_without_losing_or_repeating_a_trial() {
    let mut d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    let file = sweep_file(dir.path(), ASHA_9, "");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("STEP_SECONDS: '0.05'", "STEP_SECONDS: '0.3'");
    std::fs::write(&file, text).unwrap();
    let id = start_sweep(&d, &file);
    let mid = eventually(Duration::from_secs(60), || {
        let s = show(&d, id);
        s["trials"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["state"] == "paused")
            && s["trials"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["state"] == "running")
    });
    assert!(mid, "the sweep never had a paused and a running trial");
    d.kill();
    d.restart();
    let s = wait_ended(&d, id, 120);
    assert_eq!(s["state"], "done", "{s:#}");
    let trials = s["trials"].as_array().unwrap();
    let ids: BTreeSet<u64> = trials
        .iter()
        .map(|t| t["trial"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, (0..9).collect(), "every trial exactly once");
    let jobs = d.json(&["ls", "--json", "--all"]);
    assert_eq!(
        jobs.as_array().unwrap().len(),
        9,
        "one job per trial: {jobs:#}"
    );
    let best = &trials[0];
    assert_eq!(best["state"], "completed");
    // Its steps never went back below a rung it had passed.
    let at = attempts(&d, best["job"].as_u64().unwrap());
    assert!(at.windows(2).all(|w| w[1].1 >= w[0].1), "{at:?}");
    // It trained to the top, by restarts or in place (an attempt's limit may
    // have grown while it ran).
    assert_eq!(best["last_step"], 9, "{best:#}");
    let ends = std::fs::read_to_string(
        d.job_dir(best["job"].as_u64().unwrap())
            .join("outputs/attempts.txt"),
    )
    .unwrap();
    assert_eq!(ends.lines().last(), Some("end 9"), "{ends}");
}

#[test]
fn a_sweep_is_a_parent_run_and_its_trials_child_runs() {
    let d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    let file = sweep_file(
        dir.path(),
        "{name: grid, max_trials: 3, max_concurrent: 3, max_step: 2}",
        "",
    );
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("x: {uniform: [0.0, 1.0]}", "x: {grid: [0.1, 0.2, 0.3]}");
    std::fs::write(&file, text).unwrap();
    let id = start_sweep(&d, &file);
    let s = wait_ended(&d, id, 60);
    assert_eq!(s["state"], "done");
    let run_id = s["run_id"].as_str().unwrap();
    let experiment = s["experiment_id"].as_i64().unwrap().to_string();
    let parent: Value =
        serde_json::from_str(&d.get(&format!("/api/2.0/mlflow/runs/get?run_id={run_id}"))).unwrap();
    assert_eq!(parent["run"]["info"]["status"], "FINISHED", "{parent:#}");
    assert_eq!(parent["run"]["info"]["experiment_id"], experiment);
    let exp: Value = serde_json::from_str(&d.get(&format!(
        "/api/2.0/mlflow/experiments/get?experiment_id={experiment}"
    )))
    .unwrap();
    assert_eq!(exp["experiment"]["name"], "toy");
    for t in s["trials"].as_array().unwrap() {
        let run: Value =
            serde_json::from_str(&d.get(&format!("/api/2.0/mlflow/runs/get?run_id={}", t["job"])))
                .unwrap();
        let tags: BTreeMap<String, String> = run["run"]["data"]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap().to_string(),
                    t["value"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(tags["mlflow.parentRunId"], run_id);
        assert_eq!(run["run"]["info"]["experiment_id"], experiment);
        let params = run["run"]["data"]["params"].to_string();
        assert!(params.contains("\"x\""), "{params}");
    }
    let grid: BTreeSet<String> = s["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["params"]["x"].to_string())
        .collect();
    assert_eq!(grid.len(), 3, "each grid point once: {grid:?}");
}

#[test]
fn cancel_stops_running_trials_and_releases_paused_ones() {
    let d = Daemon::start("sim:2");
    let dir = tempfile::tempdir().unwrap();
    let file = sweep_file(dir.path(), ASHA_9, "");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("STEP_SECONDS: '0.05'", "STEP_SECONDS: '0.5'");
    std::fs::write(&file, text).unwrap();
    let id = start_sweep(&d, &file);
    assert!(eventually(Duration::from_secs(60), || show(&d, id)
        ["trials"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["state"] == "paused")));
    // A paused trial is the sweep's to resume, not a hold to release by hand.
    let paused = show(&d, id)["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["state"] == "paused")
        .map(|t| t["job"].to_string());
    if let Some(job) = paused {
        let out = d.gpuq(&["release", &job]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("paused at its rung"),
            "{}",
            stderr(&out)
        );
    }
    let out = d.ok(&["sweep", "cancel", &id.to_string()]);
    assert!(out.contains("cancelled sweep"), "{out}");
    let s = show(&d, id);
    assert_eq!(s["state"], "cancelled");
    assert!(eventually(Duration::from_secs(30), || {
        let jobs = d.json(&["ls", "--json", "--all"]);
        jobs.as_array()
            .unwrap()
            .iter()
            .all(|j| j["state"] != "queued" && j["state"] != "running")
    }));
    let again = d.gpuq(&["sweep", "cancel", &id.to_string()]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("already ended"));
}

#[test]
fn a_bad_sweep_file_is_refused_with_the_field_and_nothing_is_created() {
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "{name: asha, max_trials: 9, max_step: 9, eta: 1}",
            "",
            "searcher.eta",
        ),
        (
            "{name: asha, max_trials: 0, max_step: 9}",
            "",
            "searcher.max_trials",
        ),
        ("{name: grid, max_trials: 9, max_step: 9}", "", "grid"),
        (
            "{name: bogus, max_trials: 9, max_step: 9}",
            "",
            "searcher.name",
        ),
        (
            "{name: random, max_trials: 9, max_step: 9}",
            "budget: {gpu_hours: 1}\n",
            "time_limit",
        ),
        (
            "{name: random, max_trials: 9, max_step: 9}",
            "gpus: 5\n",
            "gpus",
        ),
        (
            "{name: random, max_trials: 9, max_step: 9}",
            "budget: {dollars: 5}\ntime_limit: 1h\n",
            "budget.dollars",
        ),
        (
            "{name: random, max_trials: 9, max_step: 9}",
            "array: 0-3\n",
            "array",
        ),
    ];
    for (searcher, extra, field) in cases {
        let file = sweep_file(dir.path(), searcher, "");
        let mut text = std::fs::read_to_string(&file).unwrap();
        match extra.strip_prefix("gpus: ") {
            Some(n) => text = text.replace("gpus: 1\n", &format!("gpus: {n}")),
            None => text.push_str(extra),
        }
        std::fs::write(&file, text).unwrap();
        let out = d.gpuq(&["sweep", &file]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{searcher} {extra}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(field), "{field}: {}", stderr(&out));
    }
    let missing = d.gpuq(&["sweep", "/nonexistent/sweep.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(d.json(&["sweep", "ls", "--json"]), serde_json::json!([]));
    assert_eq!(d.json(&["ls", "--json", "--all"]), serde_json::json!([]));
    // Malformed words are refused before any daemon is reached.
    for words in [
        &["sweep", "show"][..],
        &["sweep", "cancel", "x"],
        &["sweep", "ls", "extra"],
    ] {
        let out = d
            .cmd(words)
            .env("GPUQ_URL", "http://127.0.0.1:9")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{words:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("cannot reach"), "{}", stderr(&out));
    }
    let bad_id = d.gpuq(&["sweep", "show", "7"]);
    assert_eq!(bad_id.status.code(), Some(2));
    assert!(stderr(&bad_id).contains("sweep 7 does not exist"));
}

#[test]
fn trials_see_their_ids_params_and_step_limit() {
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env.yaml");
    std::fs::write(
        &file,
        "name: envcheck\nrun: env | grep -E '^GPUQ_(PARAMS|SWEEP_ID|TRIAL_ID|TRIAL_MAX_STEP)=' | sort\n\
         gpus: 1\nparameters:\n  lr: {loguniform: [1.0e-4, 1.0e-1]}\n  layers: {choice: [1, 2]}\n\
         metric: {name: loss, goal: minimize}\nsearcher: {name: random, max_trials: 1, max_step: 5}\n",
    )
    .unwrap();
    let id = start_sweep(&d, &file.display().to_string());
    let s = wait_ended(&d, id, 30);
    let t = &s["trials"][0];
    let log = d.log(t["job"].as_u64().unwrap());
    assert!(log.contains(&format!("GPUQ_SWEEP_ID={id}")), "{log}");
    assert!(log.contains("GPUQ_TRIAL_ID=0"), "{log}");
    assert!(log.contains("GPUQ_TRIAL_MAX_STEP=5"), "{log}");
    let params: Value = serde_json::from_str(
        log.lines()
            .find_map(|l| l.strip_prefix("GPUQ_PARAMS="))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(params, t["params"]);
    let lr = params["lr"].as_f64().unwrap();
    assert!((1e-4..1e-1).contains(&lr));
    // Trials are preemptible unless the file says otherwise.
    assert_eq!(
        d.show(t["job"].as_u64().unwrap())["spec"]["preemptible"],
        true
    );
    // A trial that never logs its metric completes; nothing to rank it by.
    assert_eq!(s["state"], "done");
    assert_eq!(t["state"], "completed");
}

#[test]
fn a_trial_promoted_at_its_rung_trains_on_in_place_without_a_restart() {
    // One slot, a fixed seed: trials run one at a time, and a trial that ranks
    // in the top third of its rung when it reports takes its own slot back.
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let file = sweep_file(
        dir.path(),
        "{name: asha, max_trials: 9, max_concurrent: 1, max_step: 9, min_step: 1, eta: 3}",
        "seed: 11\n",
    );
    let id = start_sweep(&d, &file);
    let s = wait_ended(&d, id, 120);
    assert_eq!(s["state"], "done", "{s:#}");
    let mut in_place = 0;
    for t in s["trials"].as_array().unwrap() {
        let job = t["job"].as_u64().unwrap();
        let shown = d.show(job);
        let promoted_here = shown["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["detail"].as_str().unwrap().contains("without a restart"))
            .count();
        in_place += promoted_here;
        // Attempts and promotions add up: each rung passed either in place or
        // through a pause and a new attempt, never both, never from step 0 again.
        let at = attempts(&d, job);
        let rungs_passed = match t["rung_step"].as_u64().unwrap() {
            1 => 0,
            3 => 1,
            _ => 2,
        };
        assert_eq!(
            at.len() - 1 + promoted_here,
            rungs_passed,
            "{shown:#}\n{at:?}"
        );
        assert!(at.windows(2).all(|w| w[1].1 > w[0].1), "{at:?}");
        let m = d.json(&["metrics", &job.to_string(), "--json"]);
        let steps: Vec<u64> = m["series"][0]["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["step"].as_u64().unwrap())
            .collect();
        let last = t["last_step"].as_u64().unwrap();
        assert_eq!(steps, (1..=last).collect::<Vec<_>>(), "job {job}");
    }
    assert!(in_place >= 1, "no trial trained on in place: {s:#}");
    // The best trial reached the top and is the lowest x, as with pauses.
    let best = &s["trials"][0];
    assert_eq!(best["last_step"], 9);
}
