"""Job start over a warm environment cache, against `pip install -r` into a
fresh venv per job, side by side in one run.

    GPUQ_BIN=target/debug/gpuq python3 bench/envs/run.py [--jobs 5] [--requirements FILE]

Both sides install the same requirements from the same local wheel directory
(no index: the network is not measured). gpuq: the first job builds the
environment (uv); each further job is timed from submit to its first output
line. pip: each job makes a venv and runs `pip install -r` before its first line.
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def wheels(out):
    subprocess.run([sys.executable, ROOT / "tests/envs/make_wheels.py", out], check=True)


def wait_log(gpuq, env, job, needle, timeout=120):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        log = subprocess.run([gpuq, "logs", job], env=env, capture_output=True, text=True).stdout
        if needle in log:
            return
        time.sleep(0.01)
    raise SystemExit(f"job {job} never printed {needle!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--uv", default=str(pathlib.Path(sys.executable).parent / "uv"))
    args = ap.parse_args()
    gpuq = os.environ.get("GPUQ_BIN", str(ROOT / "target/debug/gpuq"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        wheels(tmp / "wheels")
        reqs = tmp / "requirements.txt"
        reqs.write_text(f"--no-index\n--find-links {tmp / 'wheels'}\ngpuqdemo==1.0\n")
        home = tmp / "home"
        home.mkdir()
        root = "allow_root_jobs = true\n" if os.geteuid() == 0 else ""
        (home / "gpuq.toml").write_text(f'{root}[envs]\nuv = "{args.uv}"\n')
        env = dict(os.environ, GPUQ_HOME=str(home), GPUQ_NO_REPRO="1")
        server = subprocess.Popen([gpuq, "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                if subprocess.run([gpuq, "ls"], env=dict(env, GPUQ_NO_AUTOSTART="1"), capture_output=True).returncode == 0:
                    break
                time.sleep(0.05)
            code = "import gpuqdemo; print('ready', gpuqdemo.VERSION)"
            submit = [gpuq, "submit", "--cwd", str(tmp), "--requirements", "requirements.txt", "--", "python", "-c", code]
            t0 = time.monotonic()
            first = subprocess.run(submit, env=env, capture_output=True, text=True, check=True).stdout.strip()
            wait_log(gpuq, env, first, "ready")
            cold = time.monotonic() - t0
            warm = []
            for _ in range(args.jobs):
                t0 = time.monotonic()
                job = subprocess.run(submit, env=env, capture_output=True, text=True, check=True).stdout.strip()
                wait_log(gpuq, env, job, "ready")
                warm.append(time.monotonic() - t0)
        finally:
            server.terminate()
            server.wait()
        pip = []
        for i in range(args.jobs):
            t0 = time.monotonic()
            venv = tmp / f"venv{i}"
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            subprocess.run([venv / "bin/pip", "install", "-q", "--disable-pip-version-check", "-r", reqs], check=True)
            out = subprocess.run([venv / "bin/python", "-c", code], capture_output=True, text=True, check=True).stdout
            assert "ready" in out
            pip.append(time.monotonic() - t0)
    med_w, med_p = statistics.median(warm), statistics.median(pip)
    print(f"jobs: {args.jobs}")
    print(f"gpuq, first job (builds the environment): {cold:.2f} s")
    print(f"gpuq, warm cache, submit to first line: median {med_w:.3f} s, max {max(warm):.3f} s")
    print(f"pip install -r into a fresh venv per job: median {med_p:.2f} s, max {max(pip):.2f} s")
    print(f"ratio (pip / gpuq warm): {med_p / med_w:.1f}x")


main()
