#!/usr/bin/env python3
"""The dashboard with a large queue, measured side by side in one run.

  python bench/dashboard/run.py [--jobs 10000] [--runs 7]

A release daemon (target/release/gpuq, or $GPUQ_BIN) on 8 simulated GPUs gets
--jobs jobs (8 run, the rest queue). Then, each as the median of --runs:
  - the API: one page of the queue (`/v1/jobs?limit=100`, what the dashboard
    asks for) against the whole list (`/v1/jobs`, what an unpaged table needs);
  - in headless Chromium (Debian's, through Playwright): the queue page from
    navigation to its 100 rows drawn, against fetching and parsing the whole
    list in the same page (the least an unpaged table must do before drawing);
  - live: a job cancelled through the API until its row on the open page says so;
  - the first load's bytes on the wire (gzip) against the files' own size.
Needs Playwright for Python (the test venv has it: bash scripts/test --install-only).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import GPUQ, Daemon  # noqa: E402  (the daemon in a temporary home, with its API)

CHROMIUM = os.environ.get("GPUQ_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def timed(f, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--runs", type=int, default=7)
    a = p.parse_args()
    api = Daemon(gpus="sim:8")
    url, env = api.url, api.env
    try:
        t0 = time.time()
        for i in range(a.jobs):
            api.call("POST", "/v1/jobs", {
                "spec": {"command": ["sleep", "600"], "gpus": 1, "name": f"job-{i}",
                         "project": ["vision", "nlp", "rl"][i % 3]},
                "cwd": "/tmp", "env": {"PATH": os.environ["PATH"]}, "user": "",
            })
        print(f"# {a.jobs} jobs submitted in {time.time() - t0:.1f} s", file=sys.stderr)
        page_bytes = len(api.call("GET", "/v1/jobs?limit=100"))
        all_bytes = len(api.call("GET", "/v1/jobs"))
        t_page = timed(lambda: api.call("GET", "/v1/jobs?limit=100"), a.runs)
        t_all = timed(lambda: api.call("GET", "/v1/jobs"), a.runs)

        from playwright.sync_api import sync_playwright
        link = subprocess.run([GPUQ, "dashboard", "--print-url"], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            wire = {"encoded": 0, "decoded": 0}

            def count(response):
                try:
                    body = response.body()
                    sizes = response.request.sizes()
                    wire["encoded"] += sizes["responseBodySize"]
                    wire["decoded"] += len(body)
                    wire.setdefault("each", []).append((response.url.replace(url, ""), sizes["responseBodySize"], len(body)))
                except Exception:
                    pass

            page.on("response", count)
            page.goto(link)
            page.wait_for_selector("tr[data-job-id]", timeout=30000)
            time.sleep(2)  # the event stream never idles: give the rest of the first load time
            first_load = dict(wire)
            for u, enc, dec in wire.get("each", []):
                print(f"#   {u}: {enc} on the wire, {dec} bytes", file=sys.stderr)
            page.remove_listener("response", count)
            rows = page.locator("tr[data-job-id]").count()
            total = page.locator("#queue-count").inner_text()

            def load_queue():
                page.goto(url + "/#/alerts")
                page.wait_for_selector("main[data-page=alerts]")
                page.goto(url + "/#/queue")
                # (wait_for_function evaluates a string: the page's CSP forbids that.)
                page.wait_for_selector("tr[data-job-id]:nth-child(100)")

            def whole_list_in_page():
                # What an unpaged table must do: fetch every job, then draw a row for each.
                page.evaluate("""async () => {
                    const csrf = localStorage.getItem('gpuq.csrf');
                    const r = await fetch('/v1/jobs', {headers: {'X-CSRF-Token': csrf}});
                    const jobs = await r.json();
                    const table = document.createElement('table');
                    const body = table.createTBody();
                    for (const j of jobs) {
                        const tr = body.insertRow();
                        for (const v of [j.id, j.name, j.state, j.user, j.project, j.gpus_requested, j.reason, j.cost_micros])
                            tr.insertCell().textContent = v == null ? '' : String(v);
                    }
                    document.body.appendChild(table);
                    const height = table.offsetHeight;  // layout, as the browser must before painting
                    table.remove();
                    return height;
                }""")

            t_queue = timed(load_queue, a.runs)
            t_whole = timed(whole_list_in_page, a.runs)

            # Live: the newest running jobs are on the first page; cancel one, time its row.
            page.goto(url + "/#/queue")
            page.wait_for_selector("tr[data-job-id]")
            lags = []
            running = json.loads(api.call("GET", "/v1/jobs?state=running&limit=100"))
            shown = {int(x) for x in page.eval_on_selector_all("tr[data-job-id]", "rs => rs.map(r => r.dataset.jobId)")}
            victims = [j["id"] for j in running if j["id"] in shown][: a.runs]
            if not victims:
                # The first page shows the newest jobs: queued ones. Cancel those instead.
                victims = sorted(shown, reverse=True)[: a.runs]
            for job in victims:
                t = time.perf_counter()
                api.call("POST", f"/v1/jobs/{job}/cancel", {})
                page.wait_for_selector(f'tr[data-job-id="{job}"][data-state="cancelled"]', timeout=10000)
                lags.append(time.perf_counter() - t)
            browser.close()

        print(f"| measure | paged (dashboard) | whole list | ratio |")
        print(f"|---|---:|---:|---:|")
        print(f"| API reply, {a.jobs} jobs | {t_page * 1000:.1f} ms, {page_bytes / 1024:.0f} KiB "
              f"| {t_all * 1000:.1f} ms, {all_bytes / 1024:.0f} KiB | {t_all / t_page:.1f}x faster, "
              f"{all_bytes / page_bytes:.0f}x fewer bytes |")
        print(f"| queue page in Chromium: navigation to its rows drawn, vs fetching and laying out every job's row | "
              f"{t_queue * 1000:.0f} ms ({rows} rows; {total}) | {t_whole * 1000:.0f} ms | "
              f"{t_whole / t_queue:.1f}x |")
        print(f"| live: cancel through the API until the open page shows it | median {statistics.median(lags) * 1000:.0f} ms, "
              f"max {max(lags) * 1000:.0f} ms over {len(lags)} | | |")
        print(f"| first load on the wire (gzip) vs the files | {first_load['encoded'] / 1024:.1f} KiB | "
              f"{first_load['decoded'] / 1024:.1f} KiB | {first_load['decoded'] / max(first_load['encoded'], 1):.1f}x |")
    finally:
        # Nothing new may start while the running jobs are cancelled, and they
        # must end before the daemon does (jobs outlive it).
        try:
            api.call("POST", "/v1/queue/drain", {})
            for j in json.loads(api.call("GET", "/v1/jobs?state=running")):
                api.call("POST", f"/v1/jobs/{j['id']}/cancel", {})
                api.wait(j["id"])
        except Exception as e:
            print("cleanup:", e, file=sys.stderr)
        api.close()


if __name__ == "__main__":
    main()
