#!/usr/bin/env python3
"""Metrics storage, gpuq's daemon side by side with a real `mlflow server`
(sqlite backend) in one run: the same batched logging, then the same history
reads, against both.

  ~/.cache/gpuq/bench-venv/bin/python bench/tracking.py [--points 1000000]
      [--mlflow-points N] [--reads 20] [--history-reads 3] [--client-points 100000]
      [--no-job] [--json PATH]

Needs the release binary (cargo build --release -p gpuq; GPUQ_BIN for another
build) and MLflow's server in a virtual environment of its own, found at
MLFLOW_BIN or ~/.cache/gpuq/bench-venv/bin/mlflow:

  python3 -m venv ~/.cache/gpuq/bench-venv
  ~/.cache/gpuq/bench-venv/bin/pip install mlflow

The benchmark itself is standard library Python (any python3 runs it; the
optional MlflowClient variant runs when the Python running it has mlflow, as the
venv's does); both servers get the very same request bodies through the same
keep-alive http.client connection, one request at a time. bench/RESULTS.md (i)
ran it with TMPDIR=/dev/shm (both databases on tmpfs).

1. Ingest: `runs/log-batch` with 1,000 metrics per request (MLflow's limit),
   N points of one metric into one run; then the same N points as 4 metrics
   (N/4 steps of each) into a second run; and --client-points points through
   MlflowClient.log_batch, the official client.
2. Full history of the one-metric run: `metrics/get-history` unpaged (one
   request), and paged as MLflow's client pages it (25,000 per page).
3. Chart read: `get-history-bulk-interval?max_results=500` (the endpoint MLflow's
   UI draws its charts from), several reads, median and p95.
4. gpuq only (skip with --no-job): a job appends N lines to $GPUQ_METRICS_FILE;
   the daemon stores them; then `GET /v1/jobs/{id}/metrics?max_points=500`.
"""
import argparse
import http.client
import json
import math
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPUQ = os.environ.get("GPUQ_BIN") or os.path.join(ROOT, "target", "release", "gpuq")
MLFLOW = os.environ.get("MLFLOW_BIN") or os.path.expanduser("~/.cache/gpuq/bench-venv/bin/mlflow")
BATCH = 1000  # MLflow's most metrics per log-batch request
PAGE = 25_000  # MLflow's client: GET_METRIC_HISTORY_MAX_RESULTS
CHART = 500
KEYS4 = ["loss", "accuracy", "lr", "grad_norm"]


def pct(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_stats(sid):
    """/proc/PID/stat's fields (after the name) of every process in a session."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(p) == sid or int(fields[3]) == sid:  # fields[3]: session id
            yield int(p), fields


def session_pids(sid):
    return [pid for pid, _ in session_stats(sid)]


def tree_cpu(sid):
    """User + system CPU seconds of a process and everything in its session."""
    tck = os.sysconf("SC_CLK_TCK")
    return sum((int(f[11]) + int(f[12])) / tck for _, f in session_stats(sid))


class Server:
    """A tracking server reached through one keep-alive connection."""

    name = "?"
    proc = None

    def connect(self, port, token=None):
        self.port = port
        self.headers = {"Authorization": "Bearer " + token} if token else {}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)

    def request(self, method, path, body=None):
        """Sends one request; returns (status, raw body). Reconnects once if the server closed the connection."""
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                if attempt:
                    raise

    def call(self, method, path, body=None):
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        status, raw = self.request(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{self.name}: {method} {path}: {status} {raw[:300]!r}")
        return raw

    def cpu(self):
        return tree_cpu(self.proc.pid)

    def new_run(self, experiment, name):
        exp = json.loads(self.call("POST", "/api/2.0/mlflow/experiments/create", {"name": experiment}))
        run = json.loads(self.call("POST", "/api/2.0/mlflow/runs/create", {
            "experiment_id": exp["experiment_id"], "run_name": name, "start_time": int(time.time() * 1000)}))
        return run["run"]["info"]["run_id"]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()


class Gpuq(Server):
    name = "gpuq"

    def __init__(self, base, job, started):
        self.home = os.path.join(base, "gpuq")
        os.makedirs(self.home)
        if job and os.geteuid() == 0:
            # A root daemon runs no job as root unless its config says so.
            with open(os.path.join(self.home, "gpuq.toml"), "w") as f:
                f.write("allow_root_jobs = true\n")
        env = dict(os.environ, GPUQ_HOME=self.home, GPUQ_LOG="warn")
        self.log = open(os.path.join(base, "gpuq.log"), "w")
        self.proc = subprocess.Popen([GPUQ, "server", "--listen", "127.0.0.1:0", "--gpus", "sim:1"], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(self)  # stopped by the caller, even if it fails to come up
        path = os.path.join(self.home, "daemon.json")
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gpuq server did not start; see {self.log.name}")
            time.sleep(0.01)
        url = json.load(open(path))["url"]
        token = open(os.path.join(self.home, "token")).read().strip()
        self.connect(int(url.rsplit(":", 1)[1]), token)

    def db_bytes(self):
        return sum(os.path.getsize(os.path.join(self.home, f)) for f in os.listdir(self.home)
                   if ".db" in f or f.endswith(("-wal", "-shm")))


class Mlflow(Server):
    name = "mlflow"

    def __init__(self, base, started):
        self.db = os.path.join(base, "mlflow.db")
        self.huey = None
        port = free_port()
        args = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{self.db}",
                "--default-artifact-root", os.path.join(base, "artifacts"), "--no-serve-artifacts",
                "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        self.log = open(os.path.join(base, "mlflow.log"), "w")
        # Its job queues (huey stores) and a lock file go to TMPDIR: keep them in ours.
        tmp = os.path.join(base, "mlflow-tmp")
        os.makedirs(tmp)
        self.proc = subprocess.Popen(args, cwd=base, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, TMPDIR=tmp), start_new_session=True)
        started.append(self)
        self.connect(port)
        deadline = time.monotonic() + 180  # the first start creates and migrates the database
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start; see {self.log.name}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                self.conn.close()
            time.sleep(0.2)
        self.find_huey()
        # Its job runner and huey consumers keep importing for a while after /health
        # answers, busy on this machine's two cores: wait until the whole tree is idle.
        while time.monotonic() < deadline:
            c0 = self.cpu()
            time.sleep(1)
            if self.cpu() - c0 < 0.05:
                break

    def find_huey(self):
        """The job queues' directory MLflow makes in /dev/shm whatever TMPDIR says, and leaves behind."""
        for pid in session_pids(self.proc.pid):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            for var in env:
                if var.startswith(b"_MLFLOW_HUEY_STORAGE_PATH="):
                    self.huey = var.split(b"=", 1)[1].decode()

    def stop(self):
        if self.huey is None:
            self.find_huey()
        super().stop()
        if self.huey and os.path.basename(self.huey).startswith("tmp"):
            shutil.rmtree(self.huey, ignore_errors=True)

    def db_bytes(self):
        return sum(os.path.getsize(self.db + s) for s in ("", "-wal", "-shm") if os.path.exists(self.db + s))


def workload(points, keys, seed=0):
    """The metrics JSON arrays of the log-batch requests: `points` points in all,
    spread over `keys` (every key at every step), 1,000 per request."""
    rng = random.Random(seed)
    steps = points // len(keys)
    t0 = 1_700_000_000_000
    metrics = []
    for step in range(steps):
        x = step / max(steps, 1)
        for k, key in enumerate(keys):
            value = (2.0 * math.exp(-4 * x) + 0.05 * rng.random()) * (k + 1)
            metrics.append('{"key":"%s","value":%r,"timestamp":%d,"step":%d}' % (key, value, t0 + step, step))
    return ["[" + ",".join(metrics[i:i + BATCH]) + "]" for i in range(0, len(metrics), BATCH)]


def ingest(server, run, batches):
    """Sends the batches one after the other; returns seconds, per-request ms, server CPU seconds."""
    prefix = '{"run_id":"%s","metrics":' % run
    bodies = [(prefix + b + "}").encode() for b in batches]
    lat = []
    cpu0 = server.cpu()
    t = time.perf_counter()
    for body in bodies:
        r0 = time.perf_counter()
        server.call("POST", "/api/2.0/mlflow/runs/log-batch", body)
        lat.append((time.perf_counter() - r0) * 1e3)
    secs = time.perf_counter() - t
    return {"seconds": secs, "cpu_s": server.cpu() - cpu0, "request_ms_p50": pct(lat, 50), "request_ms_p99": pct(lat, 99),
            "first_100_ms_mean": statistics.mean(lat[:100]), "last_100_ms_mean": statistics.mean(lat[-100:])}


def client_ingest(server, run, points):
    """The same points through MLflow's own client (MlflowClient.log_batch, which
    cuts them into requests of 1,000 itself). Needs the mlflow package in this Python."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient
    rng = random.Random(0)
    t0 = 1_700_000_000_000
    metrics = [Metric("loss", 2.0 * math.exp(-4 * i / points) + 0.05 * rng.random(), t0 + i, i) for i in range(points)]
    # The client sends MLFLOW_TRACKING_TOKEN as a bearer token; MLflow's server (no auth app) ignores it.
    token = server.headers.get("Authorization", "").removeprefix("Bearer ")
    old = os.environ.get("MLFLOW_TRACKING_TOKEN")
    os.environ["MLFLOW_TRACKING_TOKEN"] = token
    try:
        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{server.port}")
        cpu0 = server.cpu()
        t = time.perf_counter()
        client.log_batch(run, metrics=metrics)
        secs = time.perf_counter() - t
    finally:
        if old is None:
            os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        else:
            os.environ["MLFLOW_TRACKING_TOKEN"] = old
    return {"points": points, "seconds": secs, "cpu_s": server.cpu() - cpu0, "points_per_s": points / secs}


def timed_get(server, path):
    t = time.perf_counter()
    raw = server.call("GET", path)
    return (time.perf_counter() - t) * 1e3, raw


def full_history(server, run, key):
    """One unpaged get-history: ms to the last byte, points, MiB."""
    ms, raw = timed_get(server, f"/api/2.0/mlflow/metrics/get-history?run_id={run}&metric_key={key}")
    body = json.loads(raw)
    return ms, len(body.get("metrics", [])), len(raw) / 2**20, "next_page_token" in body


def paged_history(server, run, key):
    """get-history in pages of 25,000 as MLflow's client reads it: ms for all pages, points, pages."""
    n, pages, token = 0, 0, None
    t = time.perf_counter()
    while True:
        path = f"/api/2.0/mlflow/metrics/get-history?run_id={run}&metric_key={key}&max_results={PAGE}"
        if token:
            path += f"&page_token={token}"
        body = json.loads(server.call("GET", path))
        n += len(body.get("metrics", []))
        pages += 1
        token = body.get("next_page_token")
        if not token:
            break
    return (time.perf_counter() - t) * 1e3, n, pages


def chart(server, run, key):
    ms, raw = timed_get(server, f"/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval"
                                f"?run_ids={run}&metric_key={key}&max_results={CHART}")
    return ms, len(json.loads(raw)["metrics"])


def summary(samples):
    return {"median_ms": statistics.median(samples), "p95_ms": pct(samples, 95), "min_ms": min(samples),
            "max_ms": max(samples), "samples_ms": samples}


JOB = r"""
import json, math, os, random, sys, time
n, rng, t = int(sys.argv[1]), random.Random(0), time.time()
with open(os.environ["GPUQ_METRICS_FILE"], "a") as f:
    for step in range(n):
        f.write(json.dumps({"step": step, "loss": 2.0 * math.exp(-4 * step / n) + 0.05 * rng.random()}) + "\n")
print(f"wrote {n} lines in {time.time() - t:.2f} s", flush=True)
"""


def job_chart(g, points, reads):
    """gpuq only: a job logs through its metrics file; then the job's chart endpoint."""
    req = {"spec": {"command": [sys.executable, "-c", JOB, str(points)], "gpus": 0}, "cwd": "/tmp",
           "env": {"PATH": os.environ["PATH"]}, "user": ""}
    t = time.perf_counter()
    job = json.loads(g.call("POST", "/v1/jobs", req))["id"]
    while True:
        state = json.loads(g.call("GET", f"/v1/jobs/{job}/wait?timeout=60"))["state"]
        if state in ("succeeded", "failed", "cancelled", "lost"):
            break
    ended = time.perf_counter() - t
    if state != "succeeded":
        raise RuntimeError(f"metrics job {job}: {state}")
    path = f"/v1/jobs/{job}/metrics?key=loss&max_points={CHART}"
    while True:
        series = json.loads(g.call("GET", path))["series"]
        if series and series[0]["count"] >= points:
            break
        time.sleep(0.05)
    stored = time.perf_counter() - t
    time.sleep(1)
    # More than the job wrote: lines stored twice (the metrics file read by two ingests at once).
    count = json.loads(g.call("GET", path))["series"][0]["count"]
    log = open(os.path.join(g.home, "jobs", str(job), "attempt-1.log")).read().strip()
    samples, n = [], 0
    timed_get(g, path)  # warm-up
    for _ in range(reads):
        ms, raw = timed_get(g, path)
        samples.append(ms)
        n = len(json.loads(raw)["series"][0]["points"])
    return {"job": job, "submit_to_end_s": ended, "submit_to_stored_s": stored, "job_log": log, "points": n,
            "lines": points, "stored_points": count, "chart": summary(samples)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=1_000_000, help="points per run for gpuq (default 1,000,000)")
    p.add_argument("--mlflow-points", type=int, help="points per run for mlflow (default: --points)")
    p.add_argument("--reads", type=int, default=20, help="chart reads per server")
    p.add_argument("--history-reads", type=int, default=3, help="full-history reads per server and kind")
    p.add_argument("--client-points", type=int, default=100_000,
                   help="points per server through MlflowClient.log_batch, when this Python has mlflow (0: skip)")
    p.add_argument("--no-job", action="store_true", help="skip the gpuq job's metrics-file run")
    p.add_argument("--json", default=os.path.join(tempfile.gettempdir(), "gpuq-bench-tracking.json"),
                   help="where the results go (default: gpuq-bench-tracking.json in the temp dir)")
    args = p.parse_args()
    if not os.path.exists(GPUQ):
        sys.exit("build first: cargo build --release -p gpuq (or set GPUQ_BIN)")
    if not os.path.exists(MLFLOW):
        sys.exit(f"no mlflow at {MLFLOW}: python3 -m venv ~/.cache/gpuq/bench-venv && "
                 "~/.cache/gpuq/bench-venv/bin/pip install mlflow (or set MLFLOW_BIN)")
    mpoints = args.mlflow_points or args.points
    version = subprocess.run([MLFLOW, "--version"], capture_output=True, text=True).stdout.strip()
    mpython = os.path.join(os.path.dirname(MLFLOW), "python")
    msqlite = subprocess.run([mpython, "-c", "import sqlite3; print(sqlite3.sqlite_version)"],
                             capture_output=True, text=True).stdout.strip()
    gversion = subprocess.run([GPUQ, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{gversion} ({GPUQ}); {version} (sqlite {msqlite}); {os.cpu_count()} cores; "
          f"temp dir {tempfile.gettempdir()}", flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = tempfile.mkdtemp(prefix="gpuq-bench-tracking-")
    servers = []
    res = {"gpuq": gversion, "mlflow": version, "mlflow_sqlite": msqlite, "cores": os.cpu_count(),
           "tmpdir": tempfile.gettempdir(), "loadavg_start": os.getloadavg(), "points": {"gpuq": args.points, "mlflow": mpoints}, "batch": BATCH}
    try:
        g = Gpuq(base, not args.no_job, servers)
        m = Mlflow(base, servers)
        both = [(g, args.points), (m, mpoints)]
        workloads = {}
        for _, n in both:
            for keys in (["loss"], KEYS4):
                if (n, len(keys)) not in workloads:
                    workloads[n, len(keys)] = workload(n, keys)

        runs = {}
        res["ingest"] = {}
        for keys in (["loss"], KEYS4):
            label = f"{len(keys)} key" + ("s" if len(keys) > 1 else "")
            res["ingest"][label] = {}
            for s, n in both:
                run = s.new_run(f"bench-{len(keys)}", f"bench-{len(keys)}")
                runs[s.name, len(keys)] = run
                print(f"ingest, {label}, {s.name}: {n:,} points ...", flush=True)
                r = ingest(s, run, workloads[n, len(keys)])
                stored = (n // len(keys)) * len(keys)
                r.update(points=stored, points_per_s=stored / r["seconds"])
                res["ingest"][label][s.name] = r
        res["db_mib"] = {s.name: s.db_bytes() / 2**20 for s, _ in both}
        if args.client_points:
            try:
                import mlflow  # noqa: F401
            except ImportError:
                print("MlflowClient variant skipped: no mlflow package in this Python "
                      "(run with ~/.cache/gpuq/bench-venv/bin/python)", flush=True)
            else:
                res["client"] = {}
                for s, _ in both:
                    print(f"ingest through MlflowClient.log_batch, {s.name}: {args.client_points:,} points ...", flush=True)
                    run = s.new_run("bench-client", "bench-client")
                    res["client"][s.name] = client_ingest(s, run, args.client_points)

        print("full history (unpaged, then in pages of 25,000) ...", flush=True)
        hist = {s.name: {"unpaged_ms": [], "paged_ms": []} for s, _ in both}
        for _ in range(args.history_reads):
            for s, _ in both:
                ms, n, mib, paged = full_history(s, runs[s.name, 1], "loss")
                hist[s.name]["unpaged_ms"].append(ms)
                hist[s.name].update(unpaged_points=n, unpaged_mib=mib, unpaged_has_next_page=paged)
                ms, n, pages = paged_history(s, runs[s.name, 1], "loss")
                hist[s.name]["paged_ms"].append(ms)
                hist[s.name].update(paged_points=n, pages=pages)
        res["history"] = hist

        print(f"chart reads (get-history-bulk-interval, max_results={CHART}), {args.reads} each ...", flush=True)
        charts = {s.name: [] for s, _ in both}
        first, counts = {}, {}
        for s, _ in both:
            first[s.name], counts[s.name] = chart(s, runs[s.name, 1], "loss")
        for _ in range(args.reads):  # alternating, so both see the same moments of a noisy machine
            for s, _ in both:
                ms, counts[s.name] = chart(s, runs[s.name, 1], "loss")
                charts[s.name].append(ms)
        res["chart"] = {name: dict(summary(v), first_ms=first[name], points=counts[name]) for name, v in charts.items()}

        if not args.no_job:
            print(f"gpuq job logging {args.points:,} points through its metrics file ...", flush=True)
            res["job"] = job_chart(g, args.points, args.reads)
        res["loadavg_end"] = os.getloadavg()
    except BaseException:
        for s in servers:
            s.log.flush()
            print(f"--- end of {s.name}'s log ---\n" + open(s.log.name, errors="replace").read()[-3000:], file=sys.stderr)
        raise
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(base, ignore_errors=True)

    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    report(res)
    print(f"\nload average (1, 5, 15 min) at start {res['loadavg_start']}, at end {res['loadavg_end']}")
    print(f"JSON: {args.json}")


def report(res):
    gp, mp = res["points"]["gpuq"], res["points"]["mlflow"]
    print(f"\n## Ingest: runs/log-batch, {BATCH} metrics a request, one client, one request at a time\n")
    print("| workload | server | points | seconds | points/s | server CPU s | request ms p50 / p99 | gpuq/mlflow |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, r in res["ingest"].items():
        ratio = r["gpuq"]["points_per_s"] / r["mlflow"]["points_per_s"]
        for name in ("gpuq", "mlflow"):
            x = r[name]
            print(f"| {label} | {name} | {x['points']:,} | {x['seconds']:.2f} | {x['points_per_s']:,.0f} | "
                  f"{x['cpu_s']:.1f} | {x['request_ms_p50']:.1f} / {x['request_ms_p99']:.1f} | "
                  f"{f'{ratio:.1f}x' if name == 'gpuq' else ''} |")
    if "client" in res:
        c = res["client"]
        ratio = c["gpuq"]["points_per_s"] / c["mlflow"]["points_per_s"]
        for name in ("gpuq", "mlflow"):
            x = c[name]
            print(f"| 1 key, MlflowClient.log_batch | {name} | {x['points']:,} | {x['seconds']:.2f} | "
                  f"{x['points_per_s']:,.0f} | {x['cpu_s']:.1f} | | {f'{ratio:.1f}x' if name == 'gpuq' else ''} |")
    print(f"\ndatabase on disk after ingest: gpuq {res['db_mib']['gpuq']:.0f} MiB, mlflow {res['db_mib']['mlflow']:.0f} MiB")
    h = res["history"]
    print(f"\n## Full history of the one-metric run (gpuq {gp:,} points, mlflow {mp:,})\n")
    print("| server | unpaged: points, MiB | unpaged ms (median of reads) | paged by 25,000: pages | paged ms (median) |")
    print("|---|---:|---:|---:|---:|")
    for name in ("gpuq", "mlflow"):
        x = h[name]
        print(f"| {name} | {x['unpaged_points']:,}, {x['unpaged_mib']:.1f} | {statistics.median(x['unpaged_ms']):,.0f} "
              f"({', '.join(f'{v:,.0f}' for v in x['unpaged_ms'])}) | {x['pages']} | "
              f"{statistics.median(x['paged_ms']):,.0f} ({', '.join(f'{v:,.0f}' for v in x['paged_ms'])}) |")
    c = res["chart"]
    print(f"\n## Chart read: get-history-bulk-interval, max_results={CHART}, {len(c['gpuq']['samples_ms'])} reads each\n")
    print("| server | points in run | points returned | median ms | p95 ms | min ms | first read ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, n in (("gpuq", gp), ("mlflow", mp)):
        x = c[name]
        print(f"| {name} | {n:,} | {x['points']} | {x['median_ms']:.2f} | {x['p95_ms']:.2f} | {x['min_ms']:.2f} | {x['first_ms']:.2f} |")
    print(f"\nratio mlflow/gpuq, median: {c['mlflow']['median_ms'] / c['gpuq']['median_ms']:.0f}x")
    if "job" in res:
        j = res["job"]
        print(f"\n## gpuq job run: {gp:,} points through GPUQ_METRICS_FILE\n")
        print(f"job: {j['job_log']}; submit -> job ended {j['submit_to_end_s']:.2f} s; "
              f"submit -> all points stored {j['submit_to_stored_s']:.2f} s")
        if j["stored_points"] != j["lines"]:
            print(f"WARNING: the run holds {j['stored_points']:,} points for {j['lines']:,} lines "
                  f"({j['stored_points'] - j['lines']:+,}): lines stored twice")
        x = j["chart"]
        print(f"GET /v1/jobs/{j['job']}/metrics?key=loss&max_points={CHART}: {x['median_ms']:.2f} ms median, "
              f"{x['p95_ms']:.2f} ms p95 ({j['points']} points returned)")


if __name__ == "__main__":
    main()
