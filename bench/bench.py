#!/usr/bin/env python3
"""gpuq benchmarks, each measured side by side with its baseline in one run.

  python3 bench/bench.py throughput [--jobs 2000] [--pueue PATH]
  python3 bench/bench.py latency    [--samples 300]
  python3 bench/bench.py queued     [--queued 50000] [--samples 500]
  python3 bench/bench.py telemetry  [--seconds 60] [--gpus 8]
  python3 bench/bench.py confinement [--samples 200] [--jobs 500] [--rounds 3]   (as root)

Uses the release binary (cargo build --release). Standard library only.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# GPUQ_BIN: another build (e.g. the previous commit's, for a before/after table).
GPUQ = os.environ.get("GPUQ_BIN") or os.path.join(ROOT, "target", "release", "gpuq")
TRUE = shutil.which("true") or "/bin/true"


class Daemon:
    """A gpuq daemon in a temporary home, with a keep-alive API connection."""

    def __init__(self, gpus="none", slots=None, config=None, env=None):
        self.home = tempfile.mkdtemp(prefix="gpuq-bench-")
        if os.geteuid() == 0:
            # A root daemon runs no job as root unless its config says so (top-level key first).
            config = "allow_root_jobs = true\n" + (config or "")
        if config:
            with open(os.path.join(self.home, "gpuq.toml"), "w") as f:
                f.write(config)
        args = [GPUQ, "server", "--listen", "127.0.0.1:0", "--gpus", gpus]
        if slots:
            args += ["--slots", str(slots)]
        env = dict(os.environ, GPUQ_HOME=self.home, GPUQ_LOG="warn", **(env or {}))
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = os.path.join(self.home, "daemon.json")
        while not os.path.exists(path):
            time.sleep(0.01)
        self.url = json.load(open(path))["url"]
        self.token = open(os.path.join(self.home, "token")).read().strip()
        host, port = self.url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port))
        self.env = dict(os.environ, GPUQ_HOME=self.home, GPUQ_URL=self.url, GPUQ_NO_AUTOSTART="1")

    def call(self, method, path, body=None):
        headers = {"Authorization": "Bearer " + self.token}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The daemon closes a keep-alive connection left idle: open another, once.
            self.conn.close()
            self.conn.connect()
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
        raw = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:200]!r}")
        return raw

    def submit(self, command, gpus=0):
        req = {"spec": {"command": command, "gpus": gpus}, "cwd": "/tmp", "env": {"PATH": os.environ["PATH"]}, "user": ""}
        return json.loads(self.call("POST", "/v1/jobs", req))["id"]

    def wait(self, job_id):
        while True:
            job = json.loads(self.call("GET", f"/v1/jobs/{job_id}/wait?timeout=60"))
            if job["state"] in ("succeeded", "failed", "cancelled", "lost"):
                return job

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


def pct(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def raw_loop(n):
    t = time.perf_counter()
    subprocess.run(["bash", "-c", f"for i in $(seq {n}); do {TRUE}; done"], check=True)
    return time.perf_counter() - t


def gpuq_api(n):
    d = Daemon()
    try:
        t = time.perf_counter()
        ids = [d.submit([TRUE]) for _ in range(n)]
        for i in ids:
            assert d.wait(i)["state"] == "succeeded"
        return time.perf_counter() - t
    finally:
        d.close()


def gpuq_cli(n):
    d = Daemon()
    try:
        t = time.perf_counter()
        ids = []
        for _ in range(n):
            out = subprocess.run([GPUQ, "submit", "--", TRUE], env=d.env, capture_output=True, text=True, check=True)
            ids.append(out.stdout.strip())
        for chunk in range(0, len(ids), 500):
            subprocess.run([GPUQ, "wait", *ids[chunk:chunk + 500]], env=d.env, capture_output=True, check=True)
        return time.perf_counter() - t
    finally:
        d.close()


def pueue(n, pueue_bin, parallel):
    pueued = os.path.join(os.path.dirname(pueue_bin), "pueued")
    base = tempfile.mkdtemp(prefix="pueue-bench-")
    for sub in ("data", "run"):
        os.makedirs(os.path.join(base, sub))
    config = os.path.join(base, "pueue.yml")
    with open(config, "w") as f:
        f.write(f"shared:\n  pueue_directory: {base}/data\n  runtime_directory: {base}/run\n  use_unix_socket: true\n"
                f"  unix_socket_path: {base}/pueue.socket\n")
    daemon = subprocess.Popen([pueued, "-c", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli = [pueue_bin, "-c", config]
    try:
        for _ in range(100):
            if subprocess.run(cli + ["status"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        subprocess.run(cli + ["parallel", str(parallel)], check=True, capture_output=True)
        t = time.perf_counter()
        for _ in range(n):
            subprocess.run(cli + ["add", "--", TRUE], check=True, capture_output=True)
        subprocess.run(cli + ["wait"], check=True, capture_output=True)
        return time.perf_counter() - t
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(base, ignore_errors=True)


def throughput(args):
    n = args.jobs
    rows = [("raw spawn loop (bash, fork+exec of true)", raw_loop(n))]
    rows.append(("gpuq, API client (one keep-alive connection)", gpuq_api(n)))
    rows.append(("gpuq, one `gpuq submit` process per job", gpuq_cli(n)))
    if args.pueue:
        rows.append((f"pueue, one `pueue add` per job, {args.pueue_parallel} parallel", pueue(n, args.pueue, args.pueue_parallel)))
    raw = rows[0][1]
    print(f"{n} jobs of `true`, submit to all finished ({os.cpu_count()} cores)\n")
    print("| runner | seconds | jobs/s | throughput vs raw loop |")
    print("|---|---:|---:|---:|")
    for name, secs in rows:
        print(f"| {name} | {secs:.2f} | {n / secs:.0f} | {raw / secs:.2f} |")


def latency(args):
    """Submit-to-running: from just before the submit request to the job's first instruction."""
    d = Daemon()
    try:
        samples = []
        for _ in range(args.samples):
            t0 = time.time_ns()
            job_id = d.submit(["date", "+%s%N"])
            d.wait(job_id)
            started = int(open(os.path.join(d.home, "jobs", str(job_id), "attempt-1.log")).read().strip())
            samples.append((started - t0) / 1e6)
        spawn = []
        for _ in range(args.samples):
            t0 = time.time_ns()
            out = subprocess.run(["date", "+%s%N"], capture_output=True, text=True)
            spawn.append((int(out.stdout) - t0) / 1e6)
        print(f"submit-to-running latency on an idle daemon, {args.samples} sequential jobs\n")
        print("| measure | p50 ms | p99 ms |")
        print("|---|---:|---:|")
        print(f"| gpuq: submit request sent -> job's process running | {pct(samples, 50):.2f} | {pct(samples, 99):.2f} |")
        print(f"| baseline: Python subprocess spawn of the same command | {pct(spawn, 50):.2f} | {pct(spawn, 99):.2f} |")
    finally:
        d.close()


def submit_latencies(d, samples):
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        d.submit([TRUE], gpus=1)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def queued(args):
    """Submit latency with an empty queue vs a deep one (all waiting behind one GPU)."""
    d = Daemon(gpus="sim:1")
    blocker = None
    try:
        blocker = d.submit(["sleep", "100000"], gpus=1)
        time.sleep(0.2)
        empty = submit_latencies(d, args.samples)
        for _ in range(args.queued - args.samples):
            d.submit([TRUE], gpus=1)
        time.sleep(0.5)
        deep = submit_latencies(d, args.samples)
        print(f"submit latency (POST /v1/jobs, keep-alive), {args.samples} samples each\n")
        print("| queue | p50 ms | p99 ms | mean ms |")
        print("|---|---:|---:|---:|")
        print(f"| empty (1 running job) | {pct(empty, 50):.3f} | {pct(empty, 99):.3f} | {statistics.mean(empty):.3f} |")
        print(f"| {args.queued:,} queued | {pct(deep, 50):.3f} | {pct(deep, 99):.3f} | {statistics.mean(deep):.3f} |")
        print(f"\nratio deep/empty: p50 {pct(deep, 50) / pct(empty, 50):.2f}x, mean {statistics.mean(deep) / statistics.mean(empty):.2f}x")
    finally:
        if blocker is not None:
            d.call("POST", f"/v1/jobs/{blocker}/cancel")  # jobs outlive the daemon by design
        d.close()


def cpu_seconds(pid):
    """User + system CPU time of a process, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def telemetry(args):
    """CPU cost of sampling N GPUs at 1 Hz: daemons with N busy GPUs each, run at
    the same time; the baseline samples once an hour (telemetry effectively off)."""
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "gpuq-nvml-stand-in"], cwd=ROOT, check=True)
    library = os.path.join(ROOT, "target", "release", "libnvidia_ml.so")
    state = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    n = args.gpus
    devices = [{"uuid": f"GPU-bench-{i}", "name": "NVIDIA H100 80GB HBM3", "memory_total": 85899345920,
                "memory_used": 40 << 30, "gpu_util": 90, "temperature": 70, "power_mw": 500000,
                "energy_mj": 10**9, "processes": []} for i in range(n)]
    state.write(json.dumps({"devices": devices}))
    state.close()
    config = '[telemetry]\ninterval = "{}"\n'
    daemons = {
        "baseline (sampling off)": Daemon(gpus=f"sim:{n}", config=config.format("1h")),
        f"simulated, {n} GPUs at 1 Hz": Daemon(gpus=f"sim:{n}", config=config.format("1s")),
        f"NVML (stand-in library), {n} GPUs at 1 Hz": Daemon(
            gpus="auto", config=config.format("1s"),
            env={"GPUQ_NVML_LIBRARY": library, "GPUQ_NVML_STAND_IN_STATE": state.name}),
    }
    jobs = {}
    try:
        for name, d in daemons.items():
            jobs[name] = [d.submit(["sleep", "3600"], gpus=1) for _ in range(n)]
        # The NVML daemon's processes: the jobs' real pids, so the process-tree mapping runs too.
        time.sleep(2)
        nvml = list(daemons.values())[2]
        for i, job_id in enumerate(jobs[list(daemons)[2]]):
            pgid_file = os.path.join(nvml.home, "jobs", str(job_id), "attempt-1.pgid")
            if os.path.exists(pgid_file):
                devices[i]["processes"] = [{"pid": int(open(pgid_file).read()), "used_memory": 8 << 30}]
        with open(state.name, "w") as f:
            f.write(json.dumps({"devices": devices}))
        time.sleep(2)
        start = {name: cpu_seconds(d.proc.pid) for name, d in daemons.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        used = {name: cpu_seconds(d.proc.pid) - start[name] for name, d in daemons.items()}
        base = used["baseline (sampling off)"]
        print(f"daemon CPU over {wall:.0f} s, as % of one core (all three ran at the same time):")
        for name, u in used.items():
            extra = "" if u == base else f"   sampling cost: {100 * (u - base) / wall:+.3f}% of one core"
            print(f"  {name:<44} {100 * u / wall:.3f}%{extra}")
    finally:
        for name, d in daemons.items():
            for job_id in jobs.get(name, []):
                d.call("POST", f"/v1/jobs/{job_id}/cancel")
            d.close()
        os.unlink(state.name)


def start_latency(d, gpus):
    """Submit request sent -> the job's first instruction, in ms (one sample)."""
    t0 = time.time_ns()
    job_id = d.submit(["date", "+%s%N"], gpus=gpus)
    job = d.wait(job_id)
    assert job["state"] == "succeeded", job
    started = int(open(os.path.join(d.home, "jobs", str(job_id), "attempt-1.log")).read().strip())
    return (started - t0) / 1e6


def confinement(args):
    """What a job's cgroup costs: the same daemon settings with confinement off
    and on (devices, memory, cores, processes), rounds alternated so drift in
    the machine's speed falls on both sides alike."""
    if os.geteuid() != 0:
        sys.exit("confinement needs root (the daemon makes cgroups)")
    modes = {
        "confinement off": '[confinement]\nmode = "off"\n',
        "cgroups, devices by the v1 controller": '[confinement]\ndevices = "v1"\n',
        "cgroups, devices by the v2 program (BPF)": '[confinement]\ndevices = "bpf"\n',
        "cgroups, default (both device paths on a hybrid host)": '[confinement]\ndevices = "auto"\n',
    }
    lat = {m: [] for m in modes}
    thr = {m: [] for m in modes}
    for _ in range(args.rounds):
        for name, config in modes.items():
            d = Daemon(gpus="sim:2", config=config)
            try:
                lat[name] += [start_latency(d, 1) for _ in range(args.samples // args.rounds)]
                t = time.perf_counter()
                ids = [d.submit([TRUE], gpus=1) for _ in range(args.jobs)]
                for i in ids:
                    assert d.wait(i)["state"] == "succeeded"
                thr[name].append(args.jobs / (time.perf_counter() - t))
            finally:
                d.close()
    base = "confinement off"
    print(f"one-GPU jobs on `--gpus sim:2`, {args.rounds} alternated rounds ({os.cpu_count()} cores)\n")
    print("| daemon | start p50 ms | start p99 ms | p50 vs off | jobs/s (median round) | throughput vs off |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in modes:
        p50 = pct(lat[name], 50)
        tput = statistics.median(thr[name])
        print(f"| {name} | {p50:.2f} | {pct(lat[name], 99):.2f} | {p50 / pct(lat[base], 50):.2f}x"
              f" | {tput:.0f} | {tput / statistics.median(thr[base]):.2f}x |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="bench", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--jobs", type=int, default=2000)
    t.add_argument("--pueue", help="path to the pueue binary (pueued next to it)")
    t.add_argument("--pueue-parallel", type=int, default=8)
    l = sub.add_parser("latency")
    l.add_argument("--samples", type=int, default=300)
    q = sub.add_parser("queued")
    q.add_argument("--queued", type=int, default=50000)
    q.add_argument("--samples", type=int, default=500)
    m = sub.add_parser("telemetry")
    m.add_argument("--seconds", type=int, default=60)
    m.add_argument("--gpus", type=int, default=8)
    c = sub.add_parser("confinement")
    c.add_argument("--samples", type=int, default=200)
    c.add_argument("--jobs", type=int, default=500)
    c.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if not os.path.exists(GPUQ):
        sys.exit("build first: cargo build --release")
    {"throughput": throughput, "latency": latency, "queued": queued, "telemetry": telemetry,
     "confinement": confinement}[args.bench](args)


if __name__ == "__main__":
    main()
