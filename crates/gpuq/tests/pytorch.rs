//! A real PyTorch trainer under gpuq (on the CPU here): it crashes, gpuq retries
//! it, and it resumes from GPUQ_CHECKPOINT_DIR to the same result as an
//! uninterrupted run. Needs torch: `scripts/test` installs it and enables the
//! `torch-tests` feature; GPUQ_TEST_PYTHON names the interpreter.
#![cfg(feature = "torch-tests")]

mod common;
use common::*;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

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
    let out = d.cmd(&crash).current_dir(repo()).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let resumed = stdout(&out);
    assert!(resumed.contains("resumed from step 20"), "{resumed}");
    assert!(d.job_dir(1).join("checkpoints/ckpt.pt").is_file());
    assert_eq!(d.show(1)["attempt"], 2);

    let mut straight = vec!["run", "--gpus", "1", "--", py.as_str()];
    straight.extend(base);
    let out = d.cmd(&straight).current_dir(repo()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        final_loss(&resumed),
        final_loss(&stdout(&out)),
        "resuming changed the result"
    );
}
