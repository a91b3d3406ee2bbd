"""Job context: ids, attempt number, parameters and directories.

Every function here tolerates a missing or malformed environment and never raises.
"""

import json
import os
import pathlib

from ._util import getenv, local_dir, warn_once

ENV_JOB_ID = "GPUQ_JOB_ID"
ENV_ATTEMPT = "GPUQ_ATTEMPT"
ENV_PARAMS = "GPUQ_PARAMS"
ENV_METRICS_FILE = "GPUQ_METRICS_FILE"
ENV_CHECKPOINT_DIR = "GPUQ_CHECKPOINT_DIR"
ENV_OUTPUT_DIR = "GPUQ_OUTPUT_DIR"
ENV_TRIAL_MAX_STEP = "GPUQ_TRIAL_MAX_STEP"


def inside_gpuq():
    """True when the process runs as a gpuq job (``GPUQ_JOB_ID`` is set)."""
    return getenv(ENV_JOB_ID) is not None


def job_id():
    """The gpuq job id as an int, or None outside gpuq (or when malformed)."""
    value = getenv(ENV_JOB_ID)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def attempt():
    """The attempt number, starting at 1; 1 when unset or malformed.

    gpuq increments it each time the job is retried or requeued, so a trainer can
    tell a fresh start (1) from a restart (2, 3, ...).
    """
    value = getenv(ENV_ATTEMPT)
    if value is None:
        return 1
    try:
        n = int(value)
    except (TypeError, ValueError):
        return 1
    return n if n >= 1 else 1


def trial_max_step():
    """The step a sweep trial may train to in this attempt, or None (not a trial, or malformed).

    A sweep runs a trial to its rung's step, pauses it there, and may later promote it
    with a higher one: the trial resumes from its checkpoint and trains on. Once
    :func:`gpuq.log` has recorded this step, :func:`gpuq.should_stop` is True.
    """
    value = getenv(ENV_TRIAL_MAX_STEP)
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None


def params():
    """Job parameters: the JSON object in ``GPUQ_PARAMS`` as a dict.

    Returns a new ``{}`` when the variable is unset, not valid JSON, or not a JSON object.
    """
    value = getenv(ENV_PARAMS)
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except Exception:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _ensure_dir(env_name, fallback):
    path = getenv(env_name)
    if path is None:
        path = local_dir(fallback)
    try:
        path = os.path.abspath(os.path.expanduser(path))
    except Exception:
        pass
    try:
        os.makedirs(path, exist_ok=True)
    except Exception as exc:
        warn_once("dir:" + env_name, "cannot create directory %r: %s" % (path, exc))
    return pathlib.Path(path)


def checkpoint_dir():
    """Directory for checkpoints that survive retries and requeues, created if missing.

    Inside gpuq it is ``GPUQ_CHECKPOINT_DIR``; outside, ``./.gpuq/checkpoints``.
    """
    return _ensure_dir(ENV_CHECKPOINT_DIR, "checkpoints")


def output_dir():
    """Directory for the job's outputs (artifacts, results), created if missing.

    Inside gpuq it is ``GPUQ_OUTPUT_DIR``; outside, ``./.gpuq/outputs``.
    """
    return _ensure_dir(ENV_OUTPUT_DIR, "outputs")


def metrics_file():
    """Path of the metrics file that :func:`gpuq.log` appends to."""
    path = getenv(ENV_METRICS_FILE)
    if path is None:
        path = local_dir("metrics.jsonl")
    return pathlib.Path(path)
