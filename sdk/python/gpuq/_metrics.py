"""Metrics logging: one JSON object per line, appended to the job's metrics file."""

import json
import math
import os
import time

from . import _stop
from ._env import metrics_file
from ._util import warn_once

_MAX_DEPTH = 8


def _number(value):
    """A float with non-finite values (NaN, +-inf) mapped to None, as JSON has no such numbers."""
    return value if math.isfinite(value) else None


def _to_json(value, depth=0):
    """Convert ``value`` into plain JSON types (dict, list, str, int, float, bool, None).

    Numbers from numpy, torch and friends become ``int``/``float`` (via ``.item()``,
    ``__index__`` or ``__float__``); anything else falls back to ``str(value)``.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _number(float(value))
    if depth >= _MAX_DEPTH:
        return _safe_str(value)
    if isinstance(value, dict):
        return {_safe_str(k) if not isinstance(k, str) else k: _to_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v, depth + 1) for v in value]
    # numpy / torch scalars and 0-d arrays / tensors.
    item = getattr(value, "item", None)
    if callable(item):
        try:
            v = item()
            if v is not value and isinstance(v, (bool, int, float, str)):
                return _to_json(v, depth + 1)
        except Exception:
            pass
    if hasattr(value, "__index__"):
        try:
            return int(value.__index__())
        except Exception:
            pass
    if hasattr(value, "__float__"):
        try:
            return _number(float(value))
        except Exception:
            pass
    return _safe_str(value)


def _safe_str(value):
    try:
        return str(value)
    except Exception:
        try:
            return repr(value)
        except Exception:
            return "<unprintable %s>" % type(value).__name__


def log(step=None, **metrics):
    """Record metrics for the current job.

    Appends one JSON line ``{"step": step, <metrics...>, "time": <unix seconds>}`` to the
    file named by ``GPUQ_METRICS_FILE`` (``./.gpuq/metrics.jsonl`` outside gpuq); ``step``
    is omitted when None. Values that are not JSON-serialisable are converted with
    ``int()``/``float()`` when possible, else ``str()``; NaN and infinities are written as
    ``null``.

    This function never raises: on failure it prints a single warning to stderr for the
    whole process and drops the record. In multi-process (e.g. DDP) training, call it from
    rank 0 only.
    """
    try:
        record = {}
        if step is not None:
            record["step"] = _to_json(step)
            _stop.note_step(record["step"])
        for key, value in metrics.items():
            record[key] = _to_json(value)
        record["time"] = time.time()
        line = json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n"

        path = metrics_file()
        parent = path.parent
        if str(parent) not in ("", "."):
            os.makedirs(str(parent), exist_ok=True)
        # One write() on an O_APPEND descriptor: lines from concurrent writers do not interleave.
        fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = line.encode("utf-8")
            written = os.write(fd, data)
            while written < len(data):
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)
    except Exception as exc:
        warn_once("log", "gpuq.log() could not record metrics (%s: %s); further failures are silent"
                  % (type(exc).__name__, exc))
