#!/usr/bin/env python3
"""A metrics flood against a real daemon: what it costs everyone else.

A job appends metric lines to its metrics file as fast as the disk takes them
for SECONDS; meanwhile another submit runs every half second. Reported: the
database's growth, the submits' latency before and during the flood, and how
long after the job's exit its end was recorded. Run once with the `[output]`
defaults and once with the limits set out of reach (`--unlimited`, the
behaviour before they existed).

    GPUQ_BIN=target/debug/gpuq python3 bench/floods.py [--seconds 20] [--unlimited]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

UNLIMITED = """
[output]
metrics_rate = 4294967295
metrics_burst = 4294967295
metrics_user_rate = 4294967295
metrics_user_burst = 4294967295
metrics_max_points = 9223372036854775807
metrics_max_keys = 9223372036854775807
"""

FLOOD = """
end=$(( $(date +%s) + {seconds} ))
while [ "$(date +%s)" -lt "$end" ]; do
  yes '{{"step": 1, "loss": 0.5, "acc": 0.25}}' | head -c 20000000 >> "$GPUQ_METRICS_FILE"
done
date +%s%3N > "$GPUQ_OUTPUT_DIR/exited"
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--unlimited", action="store_true")
    ap.add_argument("--patience", type=int, default=120, help="seconds to wait for the end to be recorded")
    args = ap.parse_args()
    gpuq = os.environ.get("GPUQ_BIN", "target/debug/gpuq")
    home = tempfile.mkdtemp(prefix="gpuq-flood-")
    config = "allow_root_jobs = true\n" if os.geteuid() == 0 else ""
    if args.unlimited:
        config += UNLIMITED
    with open(os.path.join(home, "gpuq.toml"), "w") as f:
        f.write(config)
    env = dict(os.environ, GPUQ_HOME=home)
    env.pop("GPUQ_URL", None)
    daemon = subprocess.Popen(
        [gpuq, "server", "--listen", "127.0.0.1:0", "--gpus", "none"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not os.path.exists(os.path.join(home, "daemon.json")):
            if daemon.poll() is not None:
                raise SystemExit("the daemon did not start: " + open(os.path.join(home, "daemon.log")).read()[-2000:])
            time.sleep(0.05)

        url = json.load(open(os.path.join(home, "daemon.json")))["url"]
        token = open(os.path.join(home, "token")).read().strip()

        def api(path):
            req = urllib.request.Request(url + path, headers={"authorization": "Bearer " + token})
            return json.loads(urllib.request.urlopen(req).read())

        def run(*a):
            return subprocess.run([gpuq, *a], env=env, check=True, capture_output=True, text=True).stdout

        def submit():
            t = time.monotonic()
            run("submit", "--", "true")
            return time.monotonic() - t

        def db():
            return sum(
                os.path.getsize(os.path.join(home, f))
                for f in ("gpuq.db", "gpuq.db-wal")
                if os.path.exists(os.path.join(home, f))
            )

        base = [submit() for _ in range(10)]
        db0 = db()
        job = run("submit", "--", "sh", "-c", FLOOD.format(seconds=args.seconds)).strip()
        exited = os.path.join(home, "jobs", job, "outputs", "exited")
        during = []
        while not os.path.exists(exited):
            during.append(submit())
            time.sleep(0.5)
        seen = time.monotonic()
        while api("/v1/jobs/" + job)["state"] == "running" and time.monotonic() - seen < args.patience:
            time.sleep(0.05)
        end_after = time.monotonic() - seen
        if api("/v1/jobs/" + job)["state"] == "running":
            end_after = "> %d (still running)" % args.patience
            during.append(submit())
        # Ingest may still be running for a moment: let it settle before measuring.
        time.sleep(2)
        during_max = max(during)
        metrics = api("/v1/jobs/%s/metrics" % job)
        stored = sum(s["count"] for s in metrics["series"])
        print(
            json.dumps(
                {
                    "limits": "unlimited" if args.unlimited else "defaults",
                    "flood_s": args.seconds,
                    "metrics_file_mib": round(os.path.getsize(os.path.join(home, "jobs", job, "metrics.jsonl")) / 2**20),
                    "db_growth_mib": round((db() - db0) / 2**20, 1),
                    "points_stored": stored,
                    "dropped": metrics.get("dropped", {}),
                    "submit_ms_idle_median": round(statistics.median(base) * 1000),
                    "submit_ms_flood_median": round(statistics.median(during) * 1000),
                    "submit_ms_flood_max": round(during_max * 1000),
                    "end_recorded_after_exit_s": round(end_after, 2) if isinstance(end_after, float) else end_after,
                },
                indent=1,
            )
        )
    finally:
        daemon.terminate()
        daemon.wait()
        subprocess.run(["rm", "-rf", home])


if __name__ == "__main__":
    main()
