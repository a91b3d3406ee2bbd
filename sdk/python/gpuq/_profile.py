"""`gpuq profile ID`: a capture of the job's next steps with torch.profiler.

The daemon writes a request (``{"id": N, "steps": K}``) to
``$GPUQ_CONTROL_DIR/profile.json``; :func:`gpuq.should_stop`, called once a
step, looks for it at most once a second, then profiles the next K calls and
writes to ``$GPUQ_OUTPUT_DIR/profiles/``: ``profile-N.json`` (a Chrome trace,
for Perfetto, chrome://tracing or TensorBoard), ``profile-N.txt`` (the top
operators and kernels) and, last, ``profile-N.done``. Nothing happens without
a request, and nothing here raises: a failed capture writes its error instead.
"""
import json
import os
import time

from ._util import getenv, warn_once

_CHECK_EVERY_S = 1.0
_state = {"checked": 0.0, "seen": None, "profiler": None, "left": 0, "id": None, "steps": 0}


def _request():
    control = getenv("GPUQ_CONTROL_DIR")
    if not control:
        return None
    try:
        with open(os.path.join(control, "profile.json")) as f:
            req = json.load(f)
        return int(req["id"]), max(1, min(500, int(req["steps"])))
    except Exception:
        return None


def _out_dir():
    from ._env import output_dir

    d = output_dir() / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _finish(error=None):
    prof, n, steps = _state["profiler"], _state["id"], _state["steps"]
    _state["profiler"] = None
    try:
        out = _out_dir()
        trace = out / ("profile-%d.json" % n)
        if error is None:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(str(trace))
            cuda = any(e.device_type.name == "CUDA" for e in prof.key_averages())
            sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
            table = prof.key_averages().table(sort_by=sort, row_limit=20)
            (out / ("profile-%d.txt" % n)).write_text("%d steps, sorted by %s\n%s\n" % (steps, sort, table))
        else:
            (out / ("profile-%d.txt" % n)).write_text("the capture failed: %s\n" % error)
        done = {"id": n, "steps": steps, "trace": str(trace) if error is None else None, "error": error}
        tmp = out / ("profile-%d.done.tmp" % n)
        tmp.write_text(json.dumps(done))
        os.replace(tmp, out / ("profile-%d.done" % n))
    except Exception as e:  # the job's training must go on
        warn_once("profile-write", "gpuq: could not write the profile: %s" % e)


def step():
    """One training step passed (called by gpuq.should_stop)."""
    if _state["profiler"] is not None:
        try:
            _state["profiler"].step()
        except Exception as e:
            _finish(error=str(e))
            return
        _state["left"] -= 1
        if _state["left"] <= 0:
            _finish()
        return
    now = time.monotonic()
    if now - _state["checked"] < _CHECK_EVERY_S:
        return
    _state["checked"] = now
    req = _request()
    if req is None or req[0] == _state["seen"]:
        return
    _state["seen"] = req[0]
    _state["id"], _state["steps"] = req
    try:
        import torch.profiler as tp

        activities = [tp.ProfilerActivity.CPU]
        import torch

        if torch.cuda.is_available():
            activities.append(tp.ProfilerActivity.CUDA)
        prof = tp.profile(activities=activities, record_shapes=False, with_stack=False)
        prof.__enter__()
        _state["profiler"], _state["left"] = prof, req[1]
    except Exception as e:
        _state["profiler"] = None
        try:
            out = _out_dir()
            (out / ("profile-%d.txt" % req[0])).write_text("the capture could not start: %s\n" % e)
            (out / ("profile-%d.done" % req[0])).write_text(json.dumps({"id": req[0], "steps": 0, "trace": None, "error": str(e)}))
        except Exception:
            pass
