"""What a newcomer meets in the dashboard, in real headless Chromium against a
real daemon: the MLflow client's "View run" link, the Sessions page's GPU
count and what keeps a session in use, a metric logged once, the GPU cards'
memory figure at 1440 px, the server's reasons on the Chinese pages, and the
cost page's units and unpriced GPU-hours."""

import json
import re
import time
import urllib.error
import urllib.request

from conftest import SDK_DIR
from test_dashboard import login_with_link, row


def api_post(daemon, path, body):
    req = urllib.request.Request(
        daemon.url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + daemon.env["GPUQ_TOKEN"], "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise AssertionError(f"POST {path}: {e.code} {e.read().decode(errors='replace')}") from None


def test_the_mlflow_view_run_link_opens_that_runs_page(daemon, new_page):
    job = daemon.submit("--name", "tracked", "--", "true")
    daemon.wait_state(job, ("succeeded",))
    # A run made by the client outside any job: shown on a page of its own.
    exp = api_post(daemon, "/api/2.0/mlflow/experiments/create", {"name": "outside-" + str(time.time())})["experiment_id"]
    run = api_post(daemon, "/api/2.0/mlflow/runs/create", {"experiment_id": exp, "run_name": "by-hand"})["run"]["info"]
    api_post(daemon, "/api/2.0/mlflow/runs/log-parameter", {"run_id": run["run_id"], "key": "lr", "value": "0.1"})
    w = new_page()
    login_with_link(daemon, w.page)
    # What `mlflow` prints: "View run tracked at: <uri>/#/experiments/E/runs/R".
    w.page.goto(f"{daemon.url}/#/experiments/0/runs/{job}")
    w.page.wait_for_url(f"{daemon.url}/#/job/{job}", timeout=10000)
    w.page.wait_for_selector(f"h1:has-text('Job {job}')", timeout=10000)
    w.page.goto(f"{daemon.url}/#/experiments/{exp}/runs/{run['run_id']}")
    w.page.wait_for_selector("#run-page table.run-params", timeout=10000)
    page = w.page.locator("#run-page").inner_text()
    assert "by-hand" in page and "lr" in page and "0.1" in page, page
    w.shot("run")
    w.assert_clean()


def test_sessions_count_gpus_and_say_a_busy_gpu_keeps_a_session_in_use(daemon, new_page):
    # A shell on a simulated GPU under load (no client attached, no kernel).
    body = {"spec": {"command": ["sleep", "120"], "gpus": 1, "session": {"kind": "shell"}}, "cwd": "/tmp", "env": {}, "user": ""}
    job = api_post(daemon, "/v1/jobs", body)["id"]
    daemon.wait_state(job, ("running",))
    w = new_page()
    login_with_link(daemon, w.page)
    w.page.goto(f"{daemon.url}/#/sessions")
    cells = f'tr[data-session="{job}"] td'
    w.page.wait_for_function(
        """(sel) => { const r = document.querySelectorAll(sel); return r.length > 5 && /GPU at \\d+%/.test(r[5].innerText); }""",
        arg=cells,
        timeout=20000,
    )
    tds = w.page.locator(cells)
    assert tds.nth(3).inner_text().strip() == "1", "a GPU count, not indices"
    state = tds.nth(5).inner_text()
    assert re.search(r"in use: GPU at \d+%", state), state
    assert "0 clients" not in state, state
    w.shot("sessions-busy")
    # The queue says the same in words.
    w.page.goto(f"{daemon.url}/#/queue")
    w.page.wait_for_selector(f'tr[data-job-id="{job}"]')
    assert "GPU at" in row(w.page, job).inner_text()
    daemon.gpuq("cancel", str(job))
    daemon.wait_state(job, ("cancelled",))
    w.assert_clean()


def test_a_metric_logged_once_is_drawn_as_a_point(daemon, new_page):
    code = f"import sys; sys.path.insert(0, {SDK_DIR!r}); import gpuq; gpuq.log(step=1, loss=0.5)"
    job = daemon.submit("--name", "once", "--", "python3", "-c", code)
    daemon.wait_state(job, ("succeeded",))
    w = new_page()
    login_with_link(daemon, w.page)
    w.page.goto(f"{daemon.url}/#/job/{job}")
    w.page.wait_for_selector("#metric-chart canvas", timeout=15000)
    time.sleep(0.5)
    # Pixels of the series' colour (#2563eb): the grid and axes are grey.
    ink = w.page.evaluate(
        """() => {
            const c = document.querySelector('#metric-chart canvas');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4)
                if (Math.abs(d[i] - 37) < 40 && Math.abs(d[i + 1] - 99) < 40 && d[i + 2] > 190 && d[i + 3] > 200) n++;
            return n;
        }"""
    )
    assert ink >= 9, f"the lone point is not drawn ({ink} pixels of its colour)"
    w.assert_clean()


def test_gpu_cards_show_the_whole_memory_figure_at_1440_px(daemon, browser):
    job = daemon.submit("--name", "holder", "--gpus", "1", "--", "sleep", "60")
    daemon.wait_state(job, ("running",))
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        login_with_link(daemon, page)
        page.goto(f"{daemon.url}/#/gpus")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.stat-value')].some((e) => /GiB \\/ /.test(e.innerText))", timeout=20000
        )
        cut = page.evaluate(
            """() => [...document.querySelectorAll('.stat-value')]
                .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.innerText)"""
        )
        assert cut == [], f"figures cut short: {cut}"
    finally:
        context.close()
        daemon.gpuq("cancel", str(job))
        daemon.wait_state(job, ("cancelled",))


def test_reasons_from_the_server_read_in_chinese_on_the_chinese_pages(daemon, new_page):
    failed = daemon.submit("--name", "fails", "--", "sh", "-c", "exit 3")
    daemon.wait_state(failed, ("failed",))
    cancelled = daemon.submit("--name", "cancelled", "--", "sleep", "60")
    daemon.wait_state(cancelled, ("running",))
    daemon.gpuq("cancel", str(cancelled))
    daemon.wait_state(cancelled, ("cancelled",))
    w = new_page(locale="zh-CN")
    login_with_link(daemon, w.page)
    w.page.wait_for_selector(f'tr[data-job-id="{failed}"]')
    assert "退出码 3" in row(w.page, failed).locator("td.reason").inner_text()
    text = row(w.page, cancelled).locator("td.reason").inner_text()
    assert text.startswith("由 ") and "取消" in text, text
    assert "cancelled by" not in text, text
    w.page.goto(f"{daemon.url}/#/job/{failed}")
    w.page.wait_for_selector("#job-attempts tr[data-attempt]")
    assert "退出码 3" in w.page.locator("#job-attempts").inner_text()
    w.shot("reasons-zh")
    # Why a queued job waits, from the server's explanation.
    both = daemon.submit("--name", "both-gpus", "--gpus", "2", "--", "sleep", "60")
    daemon.wait_state(both, ("running",))
    waiting = daemon.submit("--name", "waits", "--gpus", "1", "--", "true")
    try:
        w.page.goto(f"{daemon.url}/#/queue")
        w.page.wait_for_function(
            "(id) => { const r = document.querySelector(`tr[data-job-id=\"${id}\"] td.reason`); return r && /GPU/.test(r.innerText); }",
            arg=waiting,
            timeout=15000,
        )
        why = row(w.page, waiting).locator("td.reason").inner_text()
        assert why.startswith("等待 1 块 GPU：全部 2 块都被占用：作业 "), why
    finally:
        daemon.gpuq("cancel", str(both), str(waiting))
        daemon.wait_state(both, ("cancelled",))
    w.assert_clean()


def test_the_cost_page_says_its_units_and_unpriced_gpu_hours_match(daemon, new_page):
    # Two GPUs for 36 s: 0.02 GPU-hours, 0.01 hours; nothing has a price.
    job = daemon.submit("--name", "two-gpus", "--gpus", "2", "--", "sleep", "36")
    try:
        daemon.wait_state(job, ("succeeded",), timeout=120)
    except AssertionError:
        raise AssertionError(daemon.gpuq("explain", str(job)) + daemon.gpuq("ls", "--all")) from None
    report = daemon.api("/v1/cost?by=user")
    for r in report["rows"]:
        assert abs(r["unpriced_hours"] - r["gpu_hours"]) < 1e-6, r
    w = new_page()
    login_with_link(daemon, w.page)
    w.page.goto(f"{daemon.url}/#/cost")
    w.page.wait_for_selector("#cost-users tr[data-key]", timeout=15000)
    heads = [h.strip() for h in w.page.locator("#cost-users th").all_inner_texts()]
    assert "Unpriced GPU-h" in heads, heads
    cells = w.page.locator("#cost-users tr[data-key] >> nth=0").locator("td").all_inner_texts()
    assert cells[heads.index("GPU-hours")] == cells[heads.index("Unpriced GPU-h")], (heads, cells)
    labels = w.page.locator("#cost-by-day .u-label").all_inner_texts()
    assert any("GPU-hours" in label for label in labels), labels
    w.shot("cost-units")
    w.assert_clean()


def test_a_running_attempt_shows_its_utilisation_as_the_panel_does(daemon, new_page):
    job = daemon.submit("--name", "running", "--gpus", "1", "--", "sleep", "60")
    daemon.wait_state(job, ("running",))
    w = new_page()
    login_with_link(daemon, w.page)
    w.page.goto(f"{daemon.url}/#/job/{job}")
    # Telemetry samples every few seconds: wait for the panel's figure.
    w.page.wait_for_function(
        """() => { const b = document.querySelector('#job-attempts tr[data-attempt="1"]');
                   return b && /\\d+%/.test(b.innerText) && /\\d+%/.test(document.body.innerText); }""",
        timeout=30000,
    )
    row_text = w.page.locator('#job-attempts tr[data-attempt="1"]').inner_text()
    util = re.findall(r"(\d+)%", row_text)
    assert util, row_text
    detail = daemon.api(f"/v1/jobs/{job}")
    running = [a for a in detail["attempts"] if a["attempt"] == 1][0]
    assert running["ended_at"] is None and running["gpu_usage"]["util_avg_percent"] is not None, running
    daemon.gpuq("cancel", str(job))
    daemon.wait_state(job, ("cancelled",))
    w.assert_clean()


def test_a_container_job_whose_image_is_missing_says_so_on_the_page(daemon, new_page):
    image = "localhost/gpuq-no-such-image:1"
    job = daemon.submit("--name", "no-image", "--image", image, "--", "true")
    daemon.wait_state(job, ("failed",), timeout=60)
    w = new_page()
    login_with_link(daemon, w.page)
    w.page.wait_for_selector(f'tr[data-job-id="{job}"]')
    shown = row(w.page, job).locator("td.reason").inner_text()
    assert shown.startswith(f"image {image} is not on this node"), shown
    w.page.goto(f"{daemon.url}/#/job/{job}")
    w.page.wait_for_selector("#job-attempts tr[data-attempt]")
    assert f"podman pull {image}" in w.page.locator("main").inner_text()
    w.assert_clean()


def test_a_view_run_link_opened_without_a_session_returns_to_the_run_after_login(daemon, new_page):
    job = daemon.submit("--name", "later", "--", "true")
    daemon.wait_state(job, ("succeeded",))
    w = new_page()
    w.page.goto(f"{daemon.url}/#/experiments/0/runs/{job}")
    w.page.wait_for_url(re.compile(re.escape(daemon.url) + r"/login#/experiments/0/runs/" + str(job) + "$"), timeout=15000)
    w.page.wait_for_selector("#token", state="visible", timeout=10000)
    w.page.fill("#token", daemon.env["GPUQ_TOKEN"])
    w.page.click("#login-submit")
    w.page.wait_for_url(f"{daemon.url}/#/job/{job}", timeout=15000)
    w.page.wait_for_selector(f"h1:has-text('Job {job}')", timeout=10000)
    w.assert_clean(allowed=("401",))
