//! The official MLflow client against gpuq: a PyTorch trainer (on the CPU)
//! logs through `mlflow` inside a job with nothing configured by hand, and from
//! outside `mlflow.search_runs` finds it with a filter, `get_metric_history`
//! returns every step, its artifact downloads, and another user's token cannot
//! write to it. Needs the test environment's Python (torch and mlflow-skinny):
//! `scripts/test` installs them and enables `torch-tests`.
#![cfg(feature = "torch-tests")]

mod common;
use common::*;

fn python() -> String {
    std::env::var("GPUQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn a_pytorch_trainer_logs_through_mlflow_and_is_found_from_outside() {
    let d = Daemon::start("sim:1");
    let py = python();
    let sdk = repo_root().join("sdk/python");
    let out = d
        .cmd(&[
            "run",
            "--project",
            "tracking-e2e",
            "--param",
            "lr=0.05",
            "--param",
            "hidden=16",
            "--env",
            &format!("PYTHONPATH={}", sdk.display()),
            "--",
            py.as_str(),
            "examples/mlflow/train.py",
            "--steps",
            "40",
        ])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let log = succeeded(&out);
    assert!(log.contains("run 1 final loss="), "{log}");

    if running_as_root() {
        ensure_user("gpuqmallory");
    }
    let made = d.ok(&["token", "create", "--user", "gpuqmallory"]);
    let other = made
        .split_whitespace()
        .find(|w| w.starts_with("gpuq_"))
        .expect("a token")
        .to_string();
    let downloads = tempfile::tempdir().unwrap();
    let check = std::process::Command::new(&py)
        .arg(repo_root().join("tests/tracking/check_from_outside.py"))
        .args(["1", "tracking-e2e", &other])
        .arg(downloads.path())
        .env("MLFLOW_TRACKING_URI", &d.url)
        .env("MLFLOW_TRACKING_TOKEN", d.token().trim())
        .env_remove("MLFLOW_RUN_ID")
        .output()
        .unwrap();
    let said = succeeded(&check);
    assert!(said.contains("all checks passed"), "{said}");
}
