"""A real daemon (simulated GPUs) and real headless Chromium for the dashboard tests.

Chromium is Debian's (/usr/bin/chromium, or $GPUQ_CHROMIUM); Playwright for Python
drives it (its own browser download is never used). Screenshots go to
$GPUQ_SCREENSHOTS (default tests/browser/screenshots, not committed).
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_DIR = os.path.join(REPO_ROOT, "sdk", "python")
GPUQ = os.environ.get("GPUQ_BIN", os.path.join(REPO_ROOT, "target", "debug", "gpuq"))
CHROMIUM = os.environ.get("GPUQ_CHROMIUM", "/usr/bin/chromium")
SHOTS = os.environ.get("GPUQ_SCREENSHOTS", os.path.join(REPO_ROOT, "tests", "browser", "screenshots"))
SECOND_USER = "gpuqtestb"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


class Daemon:
    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="gpuq-browser-")
        if os.geteuid() == 0:
            # The tests' jobs run as whoever runs the tests; as root (CI) the
            # config must allow that, as a lab's would have to.
            with open(os.path.join(self.home, "gpuq.toml"), "w") as f:
                f.write("allow_root_jobs = true\n")
        self.env = dict(os.environ, GPUQ_HOME=self.home, GPUQ_NO_AUTOSTART="1", GPUQ_NO_REPRO="1")
        for var in ("GPUQ_URL", "GPUQ_TOKEN"):
            self.env.pop(var, None)
        self.env["PYTHONPATH"] = SDK_DIR
        self.log = open(os.path.join(self.home, "daemon.log"), "w")
        self.proc = subprocess.Popen(
            [GPUQ, "server", "--listen", "127.0.0.1:0", "--gpus", "sim:2"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 30
        while True:
            try:
                with open(os.path.join(self.home, "daemon.json")) as f:
                    self.url = json.load(f)["url"]
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                break
            except (OSError, ValueError, KeyError):
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the daemon did not start: " + open(self.log.name).read())
                time.sleep(0.1)
        self.env["GPUQ_URL"] = self.url
        with open(os.path.join(self.home, "token")) as f:
            self.env["GPUQ_TOKEN"] = f.read().strip()

    def gpuq(self, *args, check=True):
        out = subprocess.run([GPUQ, *args], env=self.env, capture_output=True, text=True, timeout=60, cwd="/tmp")
        if check and out.returncode != 0:
            raise AssertionError(f"gpuq {' '.join(args)} failed ({out.returncode}): {out.stderr}")
        return out.stdout

    def submit(self, *args):
        return int(self.gpuq("submit", *args).strip())

    def show(self, job):
        return json.loads(self.gpuq("show", str(job), "--json"))

    def wait_state(self, job, states, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.show(job)["state"]
            if state in states:
                return state
            time.sleep(0.2)
        raise AssertionError(f"job {job} is {state}, not {states}")

    def second_user_token(self):
        if os.geteuid() == 0 and subprocess.run(["id", "-u", SECOND_USER], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", SECOND_USER], check=True)
        return json.loads(self.gpuq("token", "create", "--user", SECOND_USER, "--json"))["token"]

    def api(self, path):
        req = urllib.request.Request(self.url + path, headers={"Authorization": "Bearer " + self.env["GPUQ_TOKEN"]})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def stop(self):
        # Running jobs outlive their daemon (their supervisors own them): end them first.
        try:
            live = [str(j["id"]) for j in self.api("/v1/jobs?state=queued,running")]
            if live:
                subprocess.run([GPUQ, "cancel", *live], env=self.env, capture_output=True, timeout=30)
                for job in live:
                    self.wait_state(job, ("cancelled", "succeeded", "failed"), timeout=30)
        except (OSError, AssertionError):
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium is not at {CHROMIUM}: apt-get install chromium (scripts/test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watched:
    """A page whose console errors, page errors and failed requests are collected."""

    def __init__(self, context):
        self.context = context
        self.page = context.new_page()
        self.errors = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append("console: " + m.text))
        self.page.on("pageerror", lambda e: self.errors.append("page error: " + str(e)))
        # Works offline: nothing is fetched from anywhere but the daemon.
        self.page.on("request", self._local_only)

    def _local_only(self, request):
        url = request.url
        if not (url.startswith("http://127.0.0.1:") or url.startswith("data:") or url == "about:blank"):
            self.errors.append("request to another origin: " + url)

    def shot(self, name):
        os.makedirs(SHOTS, exist_ok=True)
        self.page.screenshot(path=os.path.join(SHOTS, name + ".png"))

    def assert_clean(self, allowed=()):
        errors = [e for e in self.errors if not any(a in e for a in allowed)]
        assert not errors, "errors in the browser:\n" + "\n".join(errors)


@pytest.fixture
def new_page(browser):
    contexts = []

    def make(locale="en-US"):
        context = browser.new_context(viewport={"width": 1280, "height": 800}, locale=locale)
        contexts.append(context)
        return Watched(context)

    yield make
    for c in contexts:
        c.close()
