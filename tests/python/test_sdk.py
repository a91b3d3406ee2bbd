import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import gpuq
from gpuq import _util

from conftest import SDK_DIR


@pytest.fixture(autouse=True)
def reset_warnings(monkeypatch):
    monkeypatch.setattr(_util, "_warned", set())


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f.read().splitlines()]


# --- log ---------------------------------------------------------------------------------


def test_log_appends_json_lines(tmp_path, monkeypatch):
    metrics = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(metrics))
    before = time.time()
    gpuq.log(step=1, loss=0.5, acc=0.25)
    gpuq.log(step=2, loss=0.4, note="hello")
    gpuq.log(lr=1e-3)
    after = time.time()

    lines = read_lines(metrics)
    assert len(lines) == 3
    assert lines[0]["step"] == 1 and lines[0]["loss"] == 0.5 and lines[0]["acc"] == 0.25
    assert lines[1] == {"step": 2, "loss": 0.4, "note": "hello", "time": lines[1]["time"]}
    assert "step" not in lines[2] and lines[2]["lr"] == 1e-3
    for rec in lines:
        assert isinstance(rec["time"], float)
        assert before - 1 <= rec["time"] <= after + 1
    assert list(lines[0]) == ["step", "loss", "acc", "time"]


def test_log_creates_parent_directories(tmp_path, monkeypatch):
    metrics = tmp_path / "a" / "b" / "metrics.jsonl"
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(metrics))
    gpuq.log(step=0, loss=1.0)
    assert read_lines(metrics)[0]["loss"] == 1.0


def test_log_fallback_outside_gpuq(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not gpuq.inside_gpuq()
    gpuq.log(step=3, loss=2.0)
    lines = read_lines(tmp_path / ".gpuq" / "metrics.jsonl")
    assert lines[0]["step"] == 3 and lines[0]["loss"] == 2.0


def test_log_never_raises_on_unwritable_path(monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_METRICS_FILE", "/proc/nonexistent/x")
    assert gpuq.log(step=1, loss=0.1) is None
    gpuq.log(step=2, loss=0.2)
    gpuq.log(step=3, loss=0.3)
    err = capsys.readouterr().err
    assert err.count("gpuq: warning") == 1


def test_log_never_raises_on_directory_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(tmp_path))  # a directory, not a file
    gpuq.log(step=1, loss=0.1)
    assert "gpuq: warning" in capsys.readouterr().err


class FakeScalar:
    """Stands in for a numpy/torch scalar: not JSON-serialisable, but has ``item()``."""

    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


class FloatOnly:
    def __float__(self):
        return 1.5


class IndexOnly:
    def __index__(self):
        return 7


class Opaque:
    def __str__(self):
        return "opaque!"


class Hostile:
    def __str__(self):
        raise RuntimeError("no str")

    def __repr__(self):
        raise RuntimeError("no repr")

    def __float__(self):
        raise RuntimeError("no float")


def test_log_converts_unserialisable_values(tmp_path, monkeypatch, capsys):
    metrics = tmp_path / "m.jsonl"
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(metrics))
    gpuq.log(
        step=FakeScalar(4),
        loss=FakeScalar(0.25),
        f=FloatOnly(),
        i=IndexOnly(),
        o=Opaque(),
        h=Hostile(),
        p=pathlib.Path("/x/y"),
        s={1, 2},
        nested={"a": [1, FloatOnly(), (2, 3)], 5: "five"},
        nan=float("nan"),
        inf=-math.inf,
        flag=True,
        none=None,
    )
    rec = read_lines(metrics)[0]
    assert rec["step"] == 4
    assert rec["loss"] == 0.25
    assert rec["f"] == 1.5
    assert rec["i"] == 7
    assert rec["o"] == "opaque!"
    assert isinstance(rec["h"], str)
    assert rec["p"] == "/x/y"
    assert isinstance(rec["s"], str)
    assert rec["nested"] == {"a": [1, 1.5, [2, 3]], "5": "five"}
    assert rec["nan"] is None and rec["inf"] is None
    assert rec["flag"] is True and rec["none"] is None
    assert capsys.readouterr().err == ""


def test_log_with_numpy_values_if_available(tmp_path, monkeypatch):
    if os.environ.get("GPUQ_TEST_STRICT") == "1":
        import numpy as np  # scripts/test installs it: a missing numpy must fail, not skip
    else:
        np = pytest.importorskip("numpy")
    metrics = tmp_path / "m.jsonl"
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(metrics))
    gpuq.log(step=np.int64(5), loss=np.float32(0.5), arr=np.arange(3), flag=np.bool_(True))
    rec = read_lines(metrics)[0]
    assert rec["step"] == 5 and rec["loss"] == 0.5 and rec["flag"] is True
    assert isinstance(rec["arr"], str)


def test_log_concurrent_threads_do_not_interleave(tmp_path, monkeypatch):
    metrics = tmp_path / "m.jsonl"
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(metrics))

    def worker(n):
        for i in range(100):
            gpuq.log(step=i, worker=n, pad="x" * 200)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(read_lines(metrics)) == 400


# --- directories -------------------------------------------------------------------------


def test_checkpoint_dir_created_from_env(tmp_path, monkeypatch):
    target = tmp_path / "ckpts" / "job-7"
    monkeypatch.setenv("GPUQ_CHECKPOINT_DIR", str(target))
    path = gpuq.checkpoint_dir()
    assert isinstance(path, pathlib.Path)
    assert path == target
    assert path.is_dir()


def test_output_dir_created_from_env(tmp_path, monkeypatch):
    target = tmp_path / "out"
    monkeypatch.setenv("GPUQ_OUTPUT_DIR", str(target))
    assert gpuq.output_dir() == target
    assert target.is_dir()


def test_dirs_fallback_outside_gpuq(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = gpuq.checkpoint_dir()
    out = gpuq.output_dir()
    assert ckpt == tmp_path / ".gpuq" / "checkpoints" and ckpt.is_dir()
    assert out == tmp_path / ".gpuq" / "outputs" and out.is_dir()
    assert ckpt.is_absolute()


def test_checkpoint_dir_never_raises_when_uncreatable(monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_CHECKPOINT_DIR", "/proc/nonexistent/ckpt")
    path = gpuq.checkpoint_dir()
    assert path == pathlib.Path("/proc/nonexistent/ckpt")
    assert "gpuq: warning" in capsys.readouterr().err


# --- attempt / job_id / params / inside_gpuq ---------------------------------------------


@pytest.mark.parametrize(
    "value,expected",
    [(None, 1), ("1", 1), ("2", 2), (" 3 ", 3), ("", 1), ("abc", 1), ("2.5", 1), ("0", 1), ("-4", 1)],
)
def test_attempt(monkeypatch, value, expected):
    if value is not None:
        monkeypatch.setenv("GPUQ_ATTEMPT", value)
    assert gpuq.attempt() == expected


@pytest.mark.parametrize("value,expected", [(None, None), ("42", 42), ("x", None), ("", None)])
def test_job_id(monkeypatch, value, expected):
    if value is not None:
        monkeypatch.setenv("GPUQ_JOB_ID", value)
    assert gpuq.job_id() == expected


def test_inside_gpuq(monkeypatch):
    assert gpuq.inside_gpuq() is False
    monkeypatch.setenv("GPUQ_JOB_ID", "12")
    assert gpuq.inside_gpuq() is True


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, {}),
        ('{"lr": 0.001, "layers": [1, 2], "name": "x"}', {"lr": 0.001, "layers": [1, 2], "name": "x"}),
        ("{}", {}),
        ("not json", {}),
        ("[1, 2]", {}),
        ("3", {}),
        ("", {}),
        ('{"a": ', {}),
    ],
)
def test_params(monkeypatch, value, expected):
    if value is not None:
        monkeypatch.setenv("GPUQ_PARAMS", value)
    assert gpuq.params() == expected


def test_params_returns_fresh_dict(monkeypatch):
    monkeypatch.setenv("GPUQ_PARAMS", '{"a": 1}')
    gpuq.params()["a"] = 2
    assert gpuq.params() == {"a": 1}


def test_version():
    assert gpuq.__version__ == "0.1.0"
    pyproject = (pathlib.Path(SDK_DIR) / "pyproject.toml").read_text()
    assert 'version = "%s"' % gpuq.__version__ in pyproject


# --- stop handling -----------------------------------------------------------------------


def run_child(code, env, timeout=30):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.skipif(not hasattr(os, "kill") or sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_should_stop_after_signal(child_env, signame):
    code = """
        import os, signal, time
        import gpuq
        print("before", gpuq.should_stop())
        print("installed", gpuq.install_stop_handler())
        os.kill(os.getpid(), signal.%s)
        for _ in range(100):
            if gpuq.should_stop():
                break
            time.sleep(0.01)
        print("after", gpuq.should_stop())
    """ % signame
    proc = run_child(code, child_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["before", "False", "installed", "True", "after", "True"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_should_stop_installs_handler_lazily(child_env):
    # should_stop() alone installs the handler; SIGTERM no longer kills the process.
    code = """
        import os, signal, time
        import gpuq
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        gpuq.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        print(gpuq.should_stop())
    """
    proc = run_child(code, child_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_install_stop_handler_off_main_thread_is_harmless(child_env):
    code = """
        import threading
        import gpuq
        out = []
        t = threading.Thread(target=lambda: out.append((gpuq.install_stop_handler(), gpuq.should_stop())))
        t.start(); t.join()
        print(out[0], gpuq.install_stop_handler())
    """
    proc = run_child(code, child_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(False, False) True"


@pytest.mark.parametrize("value,expected", [(None, None), ("27", 27), ("0", 0), ("-1", None), ("x", None)])
def test_trial_max_step(monkeypatch, value, expected):
    if value is not None:
        monkeypatch.setenv("GPUQ_TRIAL_MAX_STEP", value)
    else:
        monkeypatch.delenv("GPUQ_TRIAL_MAX_STEP", raising=False)
    assert gpuq.trial_max_step() == expected


def test_should_stop_at_the_trials_step_limit(tmp_path, monkeypatch):
    from gpuq import _stop

    monkeypatch.setattr(_stop, "_last_step", None)
    monkeypatch.setattr(_stop, "_paused_at", None)
    monkeypatch.setattr(_stop, "_stop_requested", False)
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(tmp_path / "m.jsonl"))
    monkeypatch.setenv("GPUQ_TRIAL_MAX_STEP", "3")
    gpuq.log(step=2, loss=1.0)
    assert not gpuq.should_stop()
    gpuq.log(loss=0.5)  # no step: the limit is not reached by it
    assert not gpuq.should_stop()
    gpuq.log(step=3, loss=0.4)
    assert gpuq.should_stop()


class _RungDaemon:
    """A stand-in for the daemon's POST /v1/jobs/{id}/rung, answering `answer`."""

    def __init__(self, answer, status=200):
        import http.server

        calls = self.calls = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                calls.append((self.path, self.headers.get("Authorization")))
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _trial_env(monkeypatch, tmp_path, url, limit):
    from gpuq import _stop

    monkeypatch.setattr(_stop, "_last_step", None)
    monkeypatch.setattr(_stop, "_paused_at", None)
    monkeypatch.setattr(_stop, "_stop_requested", False)
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(tmp_path / "m.jsonl"))
    monkeypatch.setenv("GPUQ_TRIAL_MAX_STEP", str(limit))
    monkeypatch.setenv("GPUQ_URL", url)
    monkeypatch.setenv("GPUQ_JOB_ID", "7")
    monkeypatch.setenv("GPUQ_SWEEP_ID", "2")
    monkeypatch.setenv("GPUQ_TRIAL_TOKEN", "gpuqjob_7_x")


def test_a_trial_promoted_at_its_rung_trains_on(tmp_path, monkeypatch):
    daemon = _RungDaemon({"train_on": True, "max_step": 9, "reason": "promoted"})
    try:
        _trial_env(monkeypatch, tmp_path, daemon.url, 3)
        gpuq.log(step=3, loss=0.4)
        assert not gpuq.should_stop()
        assert gpuq.trial_max_step() == 9
        assert daemon.calls == [("/v1/jobs/7/rung", "Bearer gpuqjob_7_x")]
        gpuq.log(step=8, loss=0.3)
        assert not gpuq.should_stop()
        assert len(daemon.calls) == 1, "not asked below the new limit"
    finally:
        daemon.close()


def test_a_trial_told_to_pause_stops_and_is_not_asked_again(tmp_path, monkeypatch):
    daemon = _RungDaemon({"train_on": False, "max_step": 3, "reason": "not promoted"})
    try:
        _trial_env(monkeypatch, tmp_path, daemon.url, 3)
        gpuq.log(step=3, loss=0.4)
        assert gpuq.should_stop()
        assert gpuq.should_stop()
        assert gpuq.trial_max_step() == 3
        assert len(daemon.calls) == 1
    finally:
        daemon.close()


@pytest.mark.parametrize("answer,status", [({"error": "no"}, 403), ("garbage", 200), ({"train_on": True, "max_step": 2}, 200)])
def test_a_refusal_or_a_nonsense_answer_pauses(tmp_path, monkeypatch, answer, status):
    daemon = _RungDaemon(answer, status)
    try:
        _trial_env(monkeypatch, tmp_path, daemon.url, 3)
        gpuq.log(step=3, loss=0.4)
        assert gpuq.should_stop()
        assert gpuq.trial_max_step() == 3
    finally:
        daemon.close()


def test_no_daemon_to_ask_pauses(tmp_path, monkeypatch):
    from gpuq import _sweep

    monkeypatch.setattr(_sweep, "TRIES", 1)
    _trial_env(monkeypatch, tmp_path, "http://127.0.0.1:9", 3)
    gpuq.log(step=3, loss=0.4)
    assert gpuq.should_stop()


def test_without_a_step_limit_logging_never_asks_to_stop(tmp_path, monkeypatch):
    from gpuq import _stop

    monkeypatch.setattr(_stop, "_last_step", None)
    monkeypatch.setattr(_stop, "_stop_requested", False)
    monkeypatch.delenv("GPUQ_TRIAL_MAX_STEP", raising=False)
    monkeypatch.setenv("GPUQ_METRICS_FILE", str(tmp_path / "m.jsonl"))
    gpuq.log(step=10**9, loss=1.0)
    assert not gpuq.should_stop()


def test_tune_params_puts_a_trials_knobs_over_the_scripts_defaults(monkeypatch):
    import gpuq

    defaults = {"batch_size": 256, "amp": "off", "compile": "off", "num_workers": 0,
                "pin_memory": False, "channels_last": False, "lr": 0.1}
    monkeypatch.delenv("GPUQ_PARAMS", raising=False)
    assert gpuq.tune_params(defaults) == defaults
    monkeypatch.setenv("GPUQ_PARAMS", '{"batch_size": 1024, "amp": "bf16", "num_workers": 2, '
                                      '"pin_memory": true, "compile": "max-autotune", "lr": 0.5}')
    got = gpuq.tune_params(defaults)
    assert got == {"batch_size": 1024, "amp": "bf16", "compile": "max-autotune", "num_workers": 2,
                   "pin_memory": True, "channels_last": False, "lr": 0.5}
    assert defaults["batch_size"] == 256, "the defaults are not changed"


def test_tune_params_ignores_knobs_of_the_wrong_type(monkeypatch):
    import gpuq

    defaults = {"batch_size": 256, "amp": "off", "pin_memory": False}
    monkeypatch.setenv("GPUQ_PARAMS", '{"batch_size": "big", "amp": "fp8", "pin_memory": 3, "num_workers": -1}')
    assert gpuq.tune_params(defaults) == defaults
    monkeypatch.setenv("GPUQ_PARAMS", "not json")
    assert gpuq.tune_params(defaults) == defaults
    assert gpuq.tune_params() == {}
