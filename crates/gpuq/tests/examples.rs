//! The shipped examples under gpuq: the SDK's checkpoint contract across attempts,
//! the example sweep run to its end, and the READMEs' tours naming only shipped files.

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

#[test]
fn the_example_sweep_runs_from_a_clone_to_the_end() {
    let d = Daemon::start("none");
    let out = d
        .cmd(&["sweep", "examples/sweep.yaml"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let id = succeeded(&out).trim().to_string();
    let done = eventually(std::time::Duration::from_secs(240), || {
        d.json(&["sweep", "show", &id, "--json"])["state"] != "running"
    });
    let s = d.json(&["sweep", "show", &id, "--json"]);
    assert!(done, "the sweep never ended: {s}");
    assert_eq!(s["state"], "done", "{s}");
    let trials = s["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 9, "{s}");
    // ASHA: the best trained to the top rung, the worst stopped early.
    assert_eq!(
        s["best"]["step"], 27,
        "the best trial reached max_step: {s}"
    );
    assert!(s["best"]["value"].as_f64().is_some_and(|v| v < 1.0), "{s}");
    assert!(
        trials.iter().any(|t| t["last_step"].as_u64() < Some(27)),
        "the worst stopped early: {s}"
    );
}

/// The tour's commands in both READMEs name files a clone has, and its
/// simulator lines (no daemon needed) run as written.
#[test]
fn the_readme_tours_name_shipped_files_and_their_sim_lines_run() {
    for (readme, heading) in [
        ("README.md", "## A five-minute tour"),
        ("README.zh-CN.md", "## 五分钟上手"),
    ] {
        let text = std::fs::read_to_string(repo_root().join(readme)).unwrap();
        let tour = text
            .split(heading)
            .nth(1)
            .and_then(|t| t.split("```sh\n").nth(1))
            .and_then(|t| t.split("```").next())
            .unwrap_or_else(|| panic!("{readme}: no tour"));
        let mut sims = 0;
        for line in tour.lines() {
            let command = line.split(" #").next().unwrap_or("").trim();
            for word in command.split_whitespace() {
                if ["examples/", "crates/", "bench/"]
                    .iter()
                    .any(|p| word.starts_with(p))
                {
                    assert!(
                        repo_root().join(word).exists(),
                        "{readme}: {word} is not shipped ({line})"
                    );
                }
            }
            if command.starts_with("gpuq sim ") {
                let out = std::process::Command::new(GPUQ)
                    .args(command.split_whitespace().skip(1))
                    .current_dir(repo_root())
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{readme}: {command}: {}",
                    stderr(&out)
                );
                sims += 1;
            }
        }
        assert!(sims >= 3, "{readme}: {sims} sim lines");
    }
}
