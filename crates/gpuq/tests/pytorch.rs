//! A real PyTorch trainer under gpuq (on the CPU here): it crashes, gpuq retries
//! it, and it resumes from GPUQ_CHECKPOINT_DIR to the same result as an
//! uninterrupted run. Needs torch: `scripts/test` installs it and enables the
//! `torch-tests` feature; GPUQ_TEST_PYTHON names the interpreter.
#![cfg(feature = "torch-tests")]

mod common;
use common::*;

fn python() -> String {
    std::env::var("GPUQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn final_loss(log: &str) -> String {
    let done = log
        .lines()
        .find(|l| l.starts_with("done step="))
        .unwrap_or_else(|| panic!("no final line in:\n{log}"));
    done.split_whitespace()
        .find(|w| w.starts_with("loss="))
        .unwrap()
        .to_string()
}

#[test]
fn pytorch_trainer_resumes_after_a_crash_to_the_same_result() {
    let d = Daemon::start("sim:1");
    let py = python();
    let base = [
        "examples/pytorch/train.py",
        "--steps",
        "60",
        "--ckpt-every",
        "20",
        "--batch-size",
        "64",
        "--amp",
        "--device",
        "cpu",
    ];
    let mut crash = vec![
        "run",
        "--gpus",
        "1",
        "--retries",
        "1",
        "--retry-delay",
        "100ms",
        "--",
        py.as_str(),
    ];
    crash.extend(base);
    crash.extend(["--fail-at-step", "30", "--fail-on-attempt", "1"]);
    let out = d.cmd(&crash).current_dir(repo_root()).output().unwrap();
    let resumed = succeeded(&out);
    assert!(resumed.contains("resumed from step 20"), "{resumed}");
    assert!(d.job_dir(1).join("checkpoints/ckpt.pt").is_file());
    assert_eq!(d.show(1)["attempt"], 2);

    let mut straight = vec!["run", "--gpus", "1", "--", py.as_str()];
    straight.extend(base);
    let out = d.cmd(&straight).current_dir(repo_root()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        final_loss(&resumed),
        final_loss(&stdout(&out)),
        "resuming changed the result"
    );
}

/// Steps of the metrics file, in the order they were logged (val lines have a step too).
fn logged_steps(d: &Daemon, id: u64) -> Vec<u64> {
    std::fs::read_to_string(d.job_dir(id).join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("loss").is_some())
        .filter_map(|v| v["step"].as_u64())
        .collect()
}

#[test]
fn pytorch_trainer_requeued_mid_run_continues_from_its_checkpoint() {
    let d = Daemon::start("sim:1");
    let py = python();
    let args = [
        "examples/pytorch/train.py",
        "--steps",
        "300",
        "--batch-size",
        "64",
        "--log-every",
        "1",
        "--ckpt-every",
        "0",
        "--device",
        "cpu",
    ];
    let mut submit = vec!["submit", "--gpus", "1", "--grace", "30s", "--", py.as_str()];
    submit.extend(args);
    let out = d.cmd(&submit).current_dir(repo_root()).output().unwrap();
    let id: u64 = stdout(&out)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr(&out)));
    assert!(
        eventually(std::time::Duration::from_secs(120), || logged_steps(&d, id)
            .len()
            >= 40),
        "the trainer did not get going: {}",
        d.ok(&["logs", &id.to_string()])
    );
    d.ok(&["requeue", &id.to_string()]);
    let job = d.wait(id);
    assert_eq!(
        (job["state"].as_str(), job["attempt"].as_u64()),
        (Some("succeeded"), Some(2)),
        "{job}"
    );
    assert!(job["attempts"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("requeued by"));

    let first = d.ok(&["logs", &id.to_string(), "--attempt", "1"]);
    let saved: u64 = first
        .lines()
        .find_map(|l| l.strip_prefix("stop requested: saved step "))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("attempt 1 did not save on SIGTERM:\n{first}"))
        .parse()
        .unwrap();
    let second = d.ok(&["logs", &id.to_string(), "--attempt", "2"]);
    assert!(
        second.contains(&format!("resumed from step {saved} (attempt 2)")),
        "{second}"
    );
    assert!(second.contains("done step=300"), "{second}");

    let steps = logged_steps(&d, id);
    assert!(
        (40..300).contains(&saved),
        "stopped mid-run at step {saved}"
    );
    assert_eq!(
        steps.iter().filter(|&&s| s == 1).count(),
        1,
        "the global step was never reset"
    );
    let mut expected: Vec<u64> = (1..=saved).collect();
    expected.extend(saved + 1..=300);
    let mut dedup = steps.clone();
    dedup.dedup();
    assert_eq!(
        dedup, expected,
        "every step logged once, in order, through the requeue"
    );

    let mut straight = vec!["run", "--gpus", "1", "--", py.as_str()];
    straight.extend(args);
    let out = d.cmd(&straight).current_dir(repo_root()).output().unwrap();
    assert_eq!(
        final_loss(&second),
        final_loss(&stdout(&out)),
        "the interrupted run ends where an uninterrupted one does"
    );
}
