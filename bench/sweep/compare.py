#!/usr/bin/env python3
"""ASHA against random search and grid search through a real gpuq daemon, side by
side in one run, on a real PyTorch task on this CPU (bench/sweep/train_digits.py:
an MLP on scikit-learn's digits).

Each searcher gets the same search space (grid: a grid over the same ranges),
the same trial budget and the same number of slots (simulated GPUs; each trial
uses one CPU thread). It reports, per searcher:

- compute: slot-seconds the trials held (what gpuq bills as GPU-time: process
  start-up, data loading, training, evaluation, checkpoints), in total and
  until the target validation accuracy was first logged;
- wall time until the target, and in total;
- the best validation accuracy reached at equal compute (at the total compute of
  the cheapest searcher).

    python bench/sweep/compare.py --python ~/.cache/gpuq/test-venv/bin/python

Needs torch and scikit-learn in that interpreter, and a built gpuq
(target/release/gpuq, or --gpuq).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

sys.path.insert(0, HERE)
from space import SPACE  # noqa: E402  (the grid below spans the same ranges)


def grid_for(trials):
    """A grid over lr, width and layers with about `trials` points (the others keep their defaults)."""
    lrs = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 3e-3, 3e-2, 3e-1]
    widths = [16, 64, 256, 128, 32]
    layers = [1, 2, 3]
    best = None
    for a in range(1, len(lrs) + 1):
        for b in range(1, len(widths) + 1):
            for c in range(1, len(layers) + 1):
                n = a * b * c
                if n <= trials and (best is None or n > best[0]):
                    best = (n, a, b, c)
    _, a, b, c = best
    return {
        "lr": {"grid": sorted(lrs[:a])},
        "width": {"grid": sorted(widths[:b])},
        "layers": {"grid": layers[:c]},
    }


def gpuq(args, env, check=True):
    out = subprocess.run([env["GPUQ_BIN"]] + args, env=env, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"gpuq {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(home, workers, binary):
    port = free_port()
    env = dict(os.environ)
    env.update(GPUQ_HOME=home, GPUQ_URL=f"http://127.0.0.1:{port}", GPUQ_NO_AUTOSTART="1",
               GPUQ_NO_REPRO="1", GPUQ_BIN=binary)
    if os.geteuid() == 0:
        with open(os.path.join(home, "gpuq.toml"), "w") as f:
            f.write("allow_root_jobs = true\n")
    log = open(os.path.join(home, "server.out"), "w")
    proc = subprocess.Popen([binary, "server", "--gpus", f"sim:{workers}", "--listen", f"127.0.0.1:{port}"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(100):
        if subprocess.run([binary, "ls"], env=env, capture_output=True).returncode == 0:
            return proc, env
        time.sleep(0.1)
    raise SystemExit("the daemon did not start; see " + log.name)


def sweep_file(path, name, searcher, parameters, args):
    spec = {
        "name": name,
        "command": [args.python, os.path.join(HERE, "train_digits.py"),
                    "--epochs-per-step", str(args.epochs_per_step)],
        "gpus": 1,
        "cwd": HERE,
        "env": {"PYTHONPATH": os.path.join(ROOT, "sdk", "python"), "OMP_NUM_THREADS": "1"},
        "parameters": parameters,
        "metric": {"name": "val_acc", "goal": "maximize"},
        "searcher": {
            "name": searcher,
            "max_trials": args.trials,
            "max_concurrent": args.workers,
            "max_step": args.max_step,
            "min_step": args.min_step,
            "eta": args.eta,
        },
        "seed": args.seed,
    }
    with open(path, "w") as f:
        json.dump(spec, f)


def run_sweep(env, path, timeout):
    started = time.time()
    sid = gpuq(["sweep", path], env).strip()
    while True:
        detail = json.loads(gpuq(["sweep", "show", sid, "--json"], env))
        if detail["state"] != "running":
            return detail, started, time.time()
        if time.time() - started > timeout:
            gpuq(["sweep", "cancel", sid], env, check=False)
            raise SystemExit(f"sweep {sid} ran past {timeout} s")
        time.sleep(0.5)


def measure(env, detail, started, ended, target):
    spans = []  # (start s, end s) of every attempt
    points = []  # (time s, val_acc)
    for t in detail["trials"]:
        job = json.loads(gpuq(["show", str(t["job"]), "--json"], env))
        for a in job["attempts"]:
            if a.get("ended_at"):
                spans.append((a["started_at"] / 1000.0, a["ended_at"] / 1000.0))
        m = json.loads(gpuq(["metrics", str(t["job"]), "--key", "val_acc", "--json", "--points", "20000"], env,
                            check=False) or "{}")
        for series in m.get("series", []):
            for p in series["points"]:
                v = p["value"]
                if isinstance(v, (int, float)):
                    points.append((p["timestamp"] / 1000.0, float(v)))
    points.sort()

    def compute_until(t):
        return sum(max(0.0, min(e, t) - s) for s, e in spans)

    total = compute_until(float("inf"))
    hits = {}
    for tgt in target:
        hit = next((tm for tm, v in points if v >= tgt), None)
        hits[tgt] = {
            "compute_s": compute_until(hit) if hit else None,
            "wall_s": (hit - started) if hit else None,
        }

    def best_within(compute):
        # The latest time by which the trials had used `compute`.
        lo, hi = started, ended
        for _ in range(60):
            mid = (lo + hi) / 2
            if compute_until(mid) < compute:
                lo = mid
            else:
                hi = mid
        seen = [v for tm, v in points if tm <= hi]
        return max(seen) if seen else None

    return {
        "trials": len(detail["trials"]),
        "attempts": len(spans),
        "compute_s": total,
        "wall_s": ended - started,
        "to_target": hits,
        "best": max((v for _, v in points), default=None),
        "best_within": best_within,
        "state": detail["state"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="an interpreter with torch and scikit-learn")
    ap.add_argument("--gpuq", default=os.path.join(ROOT, "target", "release", "gpuq"))
    ap.add_argument("--searchers", default="asha,random,grid")
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-step", type=int, default=27)
    ap.add_argument("--min-step", type=int, default=1)
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--epochs-per-step", type=int, default=3)
    ap.add_argument("--targets", default="0.97,0.975,0.98,0.985",
                    help="validation accuracies to reach, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()

    targets = [float(t) for t in args.targets.split(",")]
    home = tempfile.mkdtemp(prefix="gpuq-sweep-bench-")
    proc, env = start_daemon(home, args.workers, args.gpuq)
    results = {}
    try:
        for searcher in args.searchers.split(","):
            parameters = grid_for(args.trials) if searcher == "grid" else SPACE
            path = os.path.join(home, f"{searcher}.json")
            sweep_file(path, f"bench-{searcher}", searcher, parameters, args)
            sys.stderr.write(f"{searcher}: running...\n")
            detail, started, ended = run_sweep(env, path, args.timeout)
            results[searcher] = measure(env, detail, started, ended, targets)
            r = results[searcher]
            sys.stderr.write(f"{searcher}: {r['trials']} trials, {r['compute_s']:.0f} slot-s, best {r['best']}\n")
    finally:
        gpuq(["server", "stop"], env, check=False)
        proc.wait(timeout=30)

    equal = min(r["compute_s"] for r in results.values())
    fmt = lambda v, f="{:.0f}": "not reached" if v is None else f.format(v)
    print(f"{args.trials} trials; {args.workers} slots; max_step {args.max_step} x {args.epochs_per_step} epochs; "
          f"min_step {args.min_step}; eta {args.eta}; seed {args.seed}\n")
    print(f"| searcher | trials | attempts | total compute (slot-s) | total wall (s) | best val_acc | "
          f"best at {equal:.0f} slot-s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['trials']} | {r['attempts']} | {r['compute_s']:.0f} | {r['wall_s']:.0f} | "
              f"{fmt(r['best'], '{:.4f}')} | {fmt(r['best_within'](equal), '{:.4f}')} |")
    names = list(results)
    print("\nCompute (slot-s) and wall time (s) until the target was first logged:\n")
    print("| target | " + " | ".join(f"{n} compute | {n} wall" for n in names) + " | asha / random compute |")
    print("|---:|" + "---:|" * (2 * len(names) + 1))
    for tgt in targets:
        cells = []
        for n in names:
            h = results[n]["to_target"][tgt]
            cells += [fmt(h["compute_s"]), fmt(h["wall_s"])]
        ratio = "—"
        if "asha" in results and "random" in results:
            a, r = results["asha"]["to_target"][tgt]["compute_s"], results["random"]["to_target"][tgt]["compute_s"]
            if a is not None and r:
                ratio = f"{a / r:.2f}"
        print(f"| {tgt} | " + " | ".join(cells) + f" | {ratio} |")
    if args.out:
        for r in results.values():
            r["best_at_equal_compute"] = r.pop("best_within")(equal)
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
