//! Attacks through the MLflow door, with the official `mlflow` client: a
//! labmate who makes a project's experiment before its first job cannot then
//! rename, tag or delete it; nobody plants gpuq's reserved tags or nests a run
//! under someone else's; and a job's own token tracks its run but cannot
//! submit, cancel or list the user's jobs. Needs the test environment's Python
//! (mlflow): `scripts/test` installs it and enables `torch-tests`.
#![cfg(feature = "torch-tests")]

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const MALLORY: &str = "gpuqmallory";

fn python() -> String {
    std::env::var("GPUQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A token for the labmate (a real local account when the daemon runs as root).
fn labmate_token(d: &Daemon) -> String {
    if running_as_root() {
        ensure_user(MALLORY);
    }
    let made: Value =
        serde_json::from_str(&d.ok(&["token", "create", "--user", MALLORY, "--json"])).unwrap();
    made["token"].as_str().unwrap().to_string()
}

/// Runs tests/tracking/labmate.py with the labmate's token; its stdout.
fn as_labmate(d: &Daemon, token: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(python())
        .arg(repo_root().join("tests/tracking/labmate.py"))
        .args(args)
        .env("MLFLOW_TRACKING_URI", &d.url)
        .env("MLFLOW_TRACKING_TOKEN", token)
        .env_remove("MLFLOW_RUN_ID")
        .env_remove("MLFLOW_EXPERIMENT_ID")
        .output()
        .unwrap();
    succeeded(&out)
}

/// A GET of the MLflow API with the daemon's token.
fn mlflow_get(d: &Daemon, endpoint: &str) -> Value {
    serde_json::from_str(&d.get(&format!("/api/2.0/mlflow/{endpoint}"))).unwrap()
}

fn refused(outcome: &Value, code: &str, needle: &str) {
    let text = outcome.as_str().unwrap_or_default();
    assert!(
        text.starts_with(code) && text.contains(needle),
        "expected {code} naming {needle:?}, got {outcome}"
    );
}

#[test]
fn a_labmate_cannot_capture_a_projects_experiment_or_plant_reserved_tags() {
    let d = Daemon::start("sim:1");
    let mallory = labmate_token(&d);
    // She makes the experiment a project of her labmate will be filed under.
    let made = as_labmate(&d, &mallory, &["create", "vision"]);
    let experiment = made.trim().to_string();
    let job = d.submit(&["--project", "vision", "--", "true"]);
    assert_eq!(d.wait(job)["state"], "succeeded");
    let run = mlflow_get(&d, &format!("runs/get?run_id={job}"));
    assert_eq!(run["run"]["info"]["experiment_id"], experiment.as_str());

    let got: Value = serde_json::from_str(
        as_labmate(&d, &mallory, &["attack", "vision", &job.to_string()]).trim(),
    )
    .unwrap();
    // The experiment holds another user's run now: it is gpuq's, not hers.
    for step in ["rename", "tag", "delete"] {
        refused(
            &got[step],
            "PERMISSION_DENIED",
            "only an admin may change it",
        );
    }
    // gpuq's own tags are nobody's to set, through any door.
    refused(
        &got["set_job_tag"],
        "INVALID_PARAMETER_VALUE",
        "gpuq.job_id",
    );
    refused(
        &got["create_with_job_tag"],
        "INVALID_PARAMETER_VALUE",
        "gpuq.job_id",
    );
    refused(
        &got["batch_sweep_tag"],
        "INVALID_PARAMETER_VALUE",
        "gpuq.sweep_id",
    );
    refused(
        &got["delete_job_tag"],
        "INVALID_PARAMETER_VALUE",
        "gpuq.job_id",
    );
    // A run nests under her own runs only.
    refused(
        &got["nest_under_victim"],
        "INVALID_PARAMETER_VALUE",
        "mlflow.parentRunId",
    );
    refused(
        &got["reparent_to_victim"],
        "INVALID_PARAMETER_VALUE",
        "mlflow.parentRunId",
    );
    assert_eq!(got["nest_under_own"], "ok", "{got}");

    // What the victim sees: the experiment as it was, their run in it, and a
    // search by job id that finds their run alone.
    let e = mlflow_get(&d, "experiments/get-by-name?experiment_name=vision");
    assert_eq!(e["experiment"]["experiment_id"], experiment.as_str(), "{e}");
    assert_eq!(e["experiment"]["lifecycle_stage"], "active", "{e}");
    assert!(
        !e["experiment"]["tags"]
            .to_string()
            .contains("moved to hers"),
        "{e}"
    );
    let filter = format!("tags.`gpuq.job_id` = '{job}'");
    let body = serde_json::json!({"experiment_ids": [experiment], "filter": filter}).to_string();
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-H",
        ])
        .arg(format!("authorization: Bearer {}", d.token().trim()))
        .args(["--data-binary", &body])
        .arg(format!("{}/api/2.0/mlflow/runs/search", d.url))
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["info"]["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [job.to_string()], "{runs}");
}

#[test]
fn a_jobs_token_tracks_its_own_run_and_cannot_act_as_its_user() {
    let d = Daemon::start("sim:2");
    let other = d.submit(&["--", "sleep", "300"]);
    d.wait_running(other);
    let py = python();
    let script = repo_root().join("tests/tracking/job_token.py");
    let id = d.submit(&[
        "--",
        py.as_str(),
        script.to_str().unwrap(),
        &other.to_string(),
    ]);
    let (_, job) = d.wait_within(id, Duration::from_secs(120));
    let log = d.log(id);
    assert_eq!(job["state"], "succeeded", "{log}");
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no result in the job's log: {log}"));
    let got: Value = serde_json::from_str(line).unwrap();

    // Tracking its own run, and a run nested under it, works as before.
    assert_eq!(got["own_run"], id.to_string(), "{got}");
    let nested = got["nested"].as_str().unwrap();
    let child = mlflow_get(&d, &format!("runs/get?run_id={nested}"));
    let parent = child["run"]["data"]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "mlflow.parentRunId")
        .map(|t| t["value"].clone());
    assert_eq!(parent, Some(Value::from(id.to_string())), "{child}");
    let own = mlflow_get(
        &d,
        &format!("metrics/get-history?run_id={id}&metric_key=acc"),
    );
    assert_eq!(own["metrics"].as_array().map(Vec::len), Some(1), "{own}");
    assert_eq!(got["read_other_run"], "ok", "{got}");

    // Anything else with that token is refused, saying whose token it is.
    refused(
        &got["write_other_run"],
        "PERMISSION_DENIED",
        &format!("job {id}'s token"),
    );
    refused(
        &got["make_experiment"],
        "PERMISSION_DENIED",
        &format!("job {id}'s token"),
    );
    for step in ["submit", "cancel_other", "list", "token"] {
        refused(&got[step], "403", &format!("job {id}'s token"));
    }
    // And nothing happened: the other job runs on, and no job was added.
    assert_eq!(d.show(other)["state"], "running");
    let jobs = d.json(&["ls", "--all", "--json"]);
    assert_eq!(jobs.as_array().unwrap().len(), 2, "{jobs}");
    let planted = mlflow_get(
        &d,
        &format!("metrics/get-history?run_id={other}&metric_key=planted"),
    );
    assert!(
        planted["metrics"].as_array().is_none_or(Vec::is_empty),
        "{planted}"
    );
    d.ok(&["cancel", &other.to_string()]);
}
