"""The dashboard in real headless Chromium against a real daemon with real jobs:
login through the link, a queue that updates live, cancel from the page, a second
user who sees no one else's secrets and cannot act on their jobs, a job page that
draws its metric chart, the other pages, both languages, and a clean console."""

import json
import os
import re
import time

import pytest

from conftest import REPO_ROOT

TRAIN = os.path.join(REPO_ROOT, "examples", "train_pure.py")
TRIAL = os.path.join(REPO_ROOT, "crates", "gpuq", "tests", "sweep", "trial.py")


@pytest.fixture(scope="module")
def sweep(daemon, tmp_path_factory):
    """A small ASHA sweep of real trials (no GPUs), run to its end."""
    path = tmp_path_factory.mktemp("sweep") / "sweep.yaml"
    path.write_text(
        f"name: toy\ncommand: [python3, {TRIAL}]\ngpus: 0\nenv:\n  STEP_SECONDS: '0.05'\n"
        "parameters:\n  x: {uniform: [0.0, 1.0]}\n  lr: {loguniform: [0.0001, 0.1]}\n"
        "metric: {name: val_loss, goal: minimize}\n"
        "searcher: {name: asha, max_trials: 6, max_concurrent: 3, max_step: 9, min_step: 1, eta: 3}\n"
    )
    sweep_id = int(daemon.gpuq("sweep", str(path)).strip())
    deadline = time.time() + 90
    while time.time() < deadline:
        state = json.loads(daemon.gpuq("sweep", "show", str(sweep_id), "--json"))["state"]
        if state != "running":
            break
        time.sleep(0.5)
    return sweep_id


def login_with_link(daemon, page):
    link = daemon.gpuq("dashboard", "--print-url").strip()
    assert re.fullmatch(re.escape(daemon.url) + r"/login#code=[A-Za-z0-9_-]{20,}", link), link
    page.goto(link)
    # The page says whose link it is and logs in only when asked to.
    page.wait_for_selector("#link-yes", timeout=10000)
    assert page.locator("#link-question").inner_text().strip(), "the link's user is shown"
    page.locator("#link-yes").click()
    page.wait_for_url(re.compile(re.escape(daemon.url) + r"/(#.*)?$"), timeout=15000)
    page.wait_for_selector("tr[data-job-id]", timeout=15000)
    return link


def row(page, job):
    return page.locator(f'tr[data-job-id="{job}"]')


def test_login_link_opens_the_queue_once_and_nothing_is_served_without_it(daemon, new_page):
    job = daemon.submit("--name", "warm-up", "--", "true")
    daemon.wait_state(job, ("succeeded",))
    w = new_page()
    # Without a session: the login page, whatever is asked for.
    w.page.goto(daemon.url + "/#/queue")
    w.page.wait_for_url(re.compile(re.escape(daemon.url) + "/login(#.*)?$"))
    assert w.page.locator("input[type=password]").count() == 1
    link = login_with_link(daemon, w.page)
    assert row(w.page, job).get_attribute("data-state") == "succeeded"
    cookies = w.context.cookies()
    session = [c for c in cookies if c["name"].startswith("gpuq_session_")]
    assert len(session) == 1 and session[0]["httpOnly"] and session[0]["sameSite"] == "Strict", cookies
    assert session[0]["expires"] > time.time()
    assert "code=" not in w.page.url, "the code leaves the address bar"
    w.assert_clean()

    # A link of another user's, opened in this browser, says that it would end
    # this session, and leaves it alone unless asked.
    import json as _json
    import urllib.request

    req = urllib.request.Request(
        daemon.url + "/v1/login-links",
        data=b"{}",
        method="POST",
        headers={"Authorization": "Bearer " + daemon.second_user_token(), "Content-Type": "application/json"},
    )
    other_link = _json.load(urllib.request.urlopen(req, timeout=10))["url"]
    w.page.goto(other_link)
    w.page.wait_for_selector("#link-switch:not([hidden])", timeout=10000)
    assert "gpuqtestb" in w.page.locator("#link-question").inner_text()
    w.page.locator("#link-no").click()
    w.page.goto(daemon.url + "/#/queue")
    w.page.wait_for_selector("tr[data-job-id]", timeout=10000)
    assert w.page.locator("#user-name").inner_text().strip() != "gpuqtestb"

    # The same link in another browser is spent.
    other = new_page()
    other.page.goto(link)
    other.page.wait_for_selector("#login-error:not([hidden])", timeout=10000)
    assert re.search("used already|expired|已.*使用|过期", other.page.locator("#login-error").inner_text())
    assert other.page.url.startswith(daemon.url + "/login")
    other.assert_clean(allowed=["401"])


def test_queue_updates_live_when_a_job_ends_and_cancel_works_from_the_page(daemon, new_page):
    w = new_page()
    login_with_link(daemon, w.page)
    short = daemon.submit("--name", "short", "--", "sleep", "3")
    long = daemon.submit("--name", "long", "--", "sleep", "300")
    w.page.wait_for_selector(f'tr[data-job-id="{long}"][data-state="running"]', timeout=10000)
    w.page.evaluate("window.__stayed = true")
    daemon.wait_state(short, ("succeeded",), timeout=30)
    ended = time.time()
    w.page.wait_for_selector(f'tr[data-job-id="{short}"][data-state="succeeded"]', timeout=5000)
    lag = time.time() - ended
    assert w.page.evaluate("window.__stayed === true"), "the page updated without a reload"
    print(f"job end shown {lag:.2f} s after the daemon reported it")
    w.shot("queue")

    row(w.page, long).locator('[data-action="cancel"]').click()
    w.page.locator("#confirm-yes").click()
    assert daemon.wait_state(long, ("cancelled",), timeout=30) == "cancelled"
    w.page.wait_for_selector(f'tr[data-job-id="{long}"][data-state="cancelled"]', timeout=5000)
    w.assert_clean()


def test_a_second_user_sees_no_secrets_and_cannot_act(daemon, new_page):
    secret = daemon.submit("--name", "secret-holder", "--env", "WANDB_API_KEY=hunter2-secret", "--", "sleep", "300")
    daemon.wait_state(secret, ("running",))
    w = new_page()
    w.page.goto(daemon.url + "/login")
    w.page.locator("input[type=password]").fill(daemon.second_user_token())
    w.page.locator("form button[type=submit], form input[type=submit]").first.click()
    w.page.wait_for_selector(f'tr[data-job-id="{secret}"]', timeout=15000)
    assert row(w.page, secret).locator('[data-action]').count() == 0, "no actions on another's job"
    w.page.goto(f"{daemon.url}/#/job/{secret}")
    w.page.wait_for_selector("text=secret-holder", timeout=10000)
    time.sleep(1)
    assert "hunter2-secret" not in w.page.content()
    # Even a request made by hand from the page is refused by the API.
    status = w.page.evaluate(
        """async (id) => {
            const csrf = localStorage.getItem('gpuq.csrf');
            const r = await fetch('/v1/jobs/' + id + '/cancel', {method: 'POST', headers: {'X-CSRF-Token': csrf || '', 'Content-Type': 'application/json'}, body: '{}'});
            return r.status;
        }""",
        secret,
    )
    assert status == 403
    assert daemon.show(secret)["state"] == "running"
    w.assert_clean(allowed=["403"])


def test_job_page_draws_metrics_log_and_gpu_history(daemon, new_page):
    job = daemon.submit("--name", "trainer", "--gpus", "1", "--", "python3", TRAIN, "--steps", "60", "--sleep", "0.05")
    daemon.wait_state(job, ("succeeded",), timeout=60)
    w = new_page()
    login_with_link(daemon, w.page)
    w.page.goto(f"{daemon.url}/#/job/{job}")
    w.page.wait_for_selector("#metric-chart canvas", timeout=15000)
    # The chart has drawn something: a canvas that is not blank.
    drawn = w.page.evaluate(
        """() => {
            const c = document.querySelector('#metric-chart canvas');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let ink = 0;
            for (let i = 3; i < d.length; i += 4) if (d[i] > 0) ink++;
            return ink;
        }"""
    )
    assert drawn > 500, f"the metric chart canvas is blank ({drawn} pixels drawn)"
    w.page.wait_for_selector("text=done step=60", timeout=10000)
    # A confined job (a root daemon confines its jobs) shows what its cgroup
    # counted: memory against its limit, CPU time, in the facts and per attempt.
    if os.geteuid() == 0:
        memory = w.page.locator("#job-memory").inner_text()
        assert re.match(r"^given [\d.]+ [MG]iB, peaked at [\d.]+ [MKG]iB$", memory), memory
        assert re.search(r"core-(seconds|minutes|hours)", w.page.locator("#job-cpu").inner_text())
        header = w.page.locator("#job-attempts thead").inner_text()
        assert "Memory (peak / limit)" in header and "CPU time" in header, header
    w.shot("job")
    w.assert_clean()


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_every_page_renders_without_errors(daemon, new_page, locale, sweep):
    w = new_page(locale=locale)
    login_with_link(daemon, w.page)
    suffix = "" if locale == "en-US" else "-zh"
    for route, ready in [
        ("#/gpus", "[data-gpu]"),
        ("#/sweeps", f'tr[data-sweep-id="{sweep}"]'),
        (f"#/sweep/{sweep}", "tr[data-trial] >> nth=5"),
        ("#/cost", "#cost-user-days canvas"),
        ("#/alerts", "main"),
        ("#/queue", "tr[data-job-id]"),
    ]:
        w.page.goto(f"{daemon.url}/{route}")
        w.page.wait_for_selector(ready, timeout=15000)
        time.sleep(0.5)
        w.shot(route.strip("#/").replace("/", "-") + suffix)
        if route.startswith("#/sweep/"):
            assert w.page.locator("#sweep-charts canvas").count() >= 3, "best so far and one chart per parameter"
    if locale == "zh-CN":
        assert w.page.locator("html").get_attribute("lang").startswith("zh")
        assert re.search("[\u4e00-\u9fff]", w.page.locator("nav").inner_text())
    w.assert_clean()


def test_a_notebook_opens_from_its_link_runs_a_kernel_and_is_listed(daemon, new_page):
    """`gpuq notebook`'s link logs in and opens JupyterLab through the daemon's
    proxy, at the notebook's path with its capability; the page's own requests
    and its kernel's WebSocket get through with the session cookie; the
    Sessions page lists it with an Open button to that path."""
    import sys

    lab = os.path.join(os.path.dirname(sys.executable), "jupyter-lab")
    out = json.loads(daemon.gpuq("notebook", "--json", "--jupyter", lab, "--idle-stop", "off"))
    job = out["job"]
    path = out["path"]
    assert re.fullmatch(rf"/sessions/{job}/[0-9a-f]{{32}}/lab", path), path
    base = path[: -len("lab")]
    w = new_page()
    w.page.goto(out["url"])
    w.page.wait_for_selector("#link-yes", timeout=10000)
    w.page.locator("#link-yes").click()
    w.page.wait_for_url(re.compile(re.escape(daemon.url + path) + ".*"), timeout=20000)
    w.page.wait_for_selector(".jp-LabShell", timeout=60000)
    # From inside JupyterLab's page: start a kernel and hear from it over its WebSocket.
    heard = w.page.evaluate(
        """async (base) => {
            const r = await fetch(`${base}api/kernels`, {method: 'POST', body: '{}',
                headers: {'Content-Type': 'application/json'}});
            if (r.status !== 201) return 'kernel start: HTTP ' + r.status;
            const k = await r.json();
            return await new Promise((resolve) => {
                const ws = new WebSocket(`ws://${location.host}${base}api/kernels/${k.id}/channels`);
                const timer = setTimeout(() => resolve('no message'), 30000);
                ws.onopen = () => ws.send(JSON.stringify({header: {msg_id: 'm1', username: 'u', session: 's1',
                    msg_type: 'kernel_info_request', version: '5.3', date: ''}, parent_header: {}, metadata: {},
                    content: {}, channel: 'shell', buffers: []}));
                ws.onmessage = (e) => { const m = JSON.parse(e.data);
                    if (m.header.msg_type === 'kernel_info_reply') { clearTimeout(timer); ws.close(); resolve('ok'); } };
                ws.onerror = () => { clearTimeout(timer); resolve('websocket error'); };
            });
        }""",
        base,
    )
    assert heard == "ok", heard
    d = new_page()
    login_with_link(daemon, d.page)
    d.page.goto(f"{daemon.url}/#/sessions")
    d.page.wait_for_selector(f'tr[data-session="{job}"] a[data-open]', timeout=15000)
    assert d.page.locator(f'tr[data-session="{job}"] a[data-open]').get_attribute("href") == path
    d.shot("sessions")
    d.assert_clean()
    daemon.gpuq("cancel", str(job))
    daemon.wait_state(job, ("cancelled",))
