//! The shipped examples under gpuq: the SDK's checkpoint contract across attempts.

mod common;
use common::*;

#[test]
fn pure_python_trainer_crashes_then_resumes_from_its_checkpoint() {
    let d = Daemon::start("sim:1");
    let out = d
        .cmd(&[
            "run",
            "--gpus",
            "1",
            "--retries",
            "1",
            "--retry-delay",
            "100ms",
            "--",
            "python3",
            "examples/train_pure.py",
            "--steps",
            "30",
            "--sleep",
            "0",
            "--ckpt-every",
            "5",
            "--fail-at-step",
            "13",
            "--fail-on-attempt",
            "1",
        ])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let text = succeeded(&out);
    assert!(text.contains("resumed from step 10 (attempt 2)"), "{text}");
    assert!(text.contains("done step=30"), "{text}");
    let metrics = std::fs::read_to_string(d.job_dir(1).join("metrics.jsonl")).unwrap();
    let steps: Vec<u64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps.last(), Some(&30), "metrics reached the last step");
    assert!(d.job_dir(1).join("checkpoints/ckpt.json").is_file());
}

#[test]
fn the_example_job_spec_is_valid() {
    let d = Daemon::start("sim:1");
    let spec = repo_root().join("examples/pytorch/job.yaml");
    let id = d.submit(&[spec.to_str().unwrap()]);
    let job = d.show(id);
    assert_eq!(
        (job["name"].as_str(), job["gpus_requested"].as_u64()),
        (Some("mlp-synthetic"), Some(1))
    );
    let _ = d.gpuq(&["cancel", &id.to_string()]);
}
