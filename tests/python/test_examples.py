"""The example trainers: crash, resume and graceful stop, run as real child processes."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT

TRAIN_PURE = os.path.join(REPO_ROOT, "examples", "train_pure.py")
TRAIN_TORCH = os.path.join(REPO_ROOT, "examples", "pytorch", "train.py")


@pytest.fixture
def job_env(child_env, tmp_path):
    env = dict(child_env)
    env["GPUQ_JOB_ID"] = "1"
    env["GPUQ_CHECKPOINT_DIR"] = str(tmp_path / "ckpt")
    env["GPUQ_OUTPUT_DIR"] = str(tmp_path / "out")
    env["GPUQ_METRICS_FILE"] = str(tmp_path / "metrics.jsonl")
    return env


def run(script, args, env, attempt=1, timeout=120):
    env = dict(env, GPUQ_ATTEMPT=str(attempt))
    return subprocess.run(
        [sys.executable, script] + args, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )


def done_line(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("done step=")]
    assert lines, stdout
    return lines[-1]


def test_train_pure_runs_and_logs(job_env, tmp_path):
    proc = run(TRAIN_PURE, ["--steps", "20", "--sleep", "0"], job_env)
    assert proc.returncode == 0, proc.stderr
    assert done_line(proc.stdout).startswith("done step=20 loss=")
    with open(tmp_path / "metrics.jsonl") as f:
        records = [json.loads(l) for l in f]
    assert [r["step"] for r in records] == list(range(1, 21))
    assert records[-1]["loss"] < records[0]["loss"]
    ckpt = json.loads((tmp_path / "ckpt" / "ckpt.json").read_text())
    assert ckpt["step"] == 20
    assert json.loads((tmp_path / "out" / "result.json").read_text())["step"] == 20


def test_train_pure_crash_then_resume_matches_uninterrupted(job_env, tmp_path):
    args = ["--steps", "20", "--sleep", "0", "--ckpt-every", "5", "--fail-at-step", "13", "--fail-on-attempt", "1"]
    first = run(TRAIN_PURE, args, job_env, attempt=1)
    assert first.returncode == 1
    assert "simulated crash at step 13" in first.stdout
    assert json.loads((tmp_path / "ckpt" / "ckpt.json").read_text())["step"] == 10

    second = run(TRAIN_PURE, args, job_env, attempt=2)
    assert second.returncode == 0, second.stderr
    assert "resumed from step 10 (attempt 2)" in second.stdout

    fresh_env = dict(job_env, GPUQ_CHECKPOINT_DIR=str(tmp_path / "fresh"))
    fresh = run(TRAIN_PURE, ["--steps", "20", "--sleep", "0"], fresh_env)
    assert done_line(second.stdout) == done_line(fresh.stdout)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_train_pure_sigterm_saves_and_exits_75(job_env, tmp_path):
    env = dict(job_env, GPUQ_ATTEMPT="1")
    proc = subprocess.Popen(
        [sys.executable, TRAIN_PURE, "--steps", "100000", "--sleep", "0.01", "--ckpt-every", "0"],
        env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().startswith("starting from scratch")
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 75, err
    assert "stop requested" in out
    saved = json.loads((tmp_path / "ckpt" / "ckpt.json").read_text())["step"]
    assert saved > 0

    resumed = run(TRAIN_PURE, ["--steps", str(saved + 3), "--sleep", "0"], job_env, attempt=2)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from step %d (attempt 2)" % saved in resumed.stdout
    assert done_line(resumed.stdout).startswith("done step=%d " % (saved + 3))


def test_train_pure_outside_gpuq_uses_local_dir(child_env, tmp_path):
    proc = subprocess.run(
        [sys.executable, TRAIN_PURE, "--steps", "3", "--sleep", "0"],
        env=child_env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ".gpuq" / "checkpoints" / "ckpt.json").is_file()
    assert (tmp_path / ".gpuq" / "metrics.jsonl").is_file()


def test_pytorch_example_crash_and_resume(job_env):
    if os.environ.get("GPUQ_TEST_STRICT") == "1":
        import torch  # noqa: F401  (scripts/test installs it: a missing torch must fail, not skip)
    else:
        pytest.importorskip("torch")
    args = ["--steps", "30", "--ckpt-every", "10", "--batch-size", "64", "--hidden", "32",
            "--device", "cpu", "--fail-at-step", "15"]
    first = run(TRAIN_TORCH, args, job_env, attempt=1, timeout=300)
    assert first.returncode == 1, first.stderr
    second = run(TRAIN_TORCH, args + ["--amp"], job_env, attempt=2, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "resumed from step 10 (attempt 2)" in second.stdout
    assert done_line(second.stdout).startswith("done step=30 loss=")
