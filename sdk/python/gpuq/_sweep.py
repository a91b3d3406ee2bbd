"""A sweep trial at its rung asks the daemon whether it trains on in place.

ASHA promotes a trial into the slot it frees when its result ranks high enough
at once; then the trial need not save, exit and be started again: it trains
on in the same process. Any failure to ask (no daemon, no token, a timeout)
answers "pause", which is always safe: the trial saves, exits, and the sweep
resumes it from its checkpoint if it is promoted later.
"""

import json
import os
import time
import urllib.error
import urllib.request

from ._util import getenv

ENV_URL = "GPUQ_URL"
ENV_JOB_ID = "GPUQ_JOB_ID"
ENV_SWEEP_ID = "GPUQ_SWEEP_ID"
ENV_TRIAL_TOKEN = "GPUQ_TRIAL_TOKEN"
ENV_TOKEN = "GPUQ_TOKEN"
TIMEOUT_S = 30
TRIES = 3


def ask_at_rung():
    """The daemon's answer as a dict (``train_on``, ``max_step``, ``reason``), or None."""
    url, job = getenv(ENV_URL), getenv(ENV_JOB_ID)
    token = getenv(ENV_TRIAL_TOKEN) or getenv(ENV_TOKEN)
    if not (url and job and token and getenv(ENV_SWEEP_ID)):
        return None
    request = urllib.request.Request(
        "%s/v1/jobs/%s/rung" % (url.rstrip("/"), job),
        data=b"",
        method="POST",
        headers={"Authorization": "Bearer " + token},
    )
    for attempt in range(TRIES):
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                answer = json.loads(reply.read().decode("utf-8"))
            return answer if isinstance(answer, dict) else None
        except urllib.error.HTTPError:
            return None  # refused: the answer will not change
        except (OSError, ValueError):
            if attempt + 1 < TRIES:
                time.sleep(1.0)  # a daemon restarting
    return None


def train_on(limit):
    """Asks once at step ``limit``; returns the new step limit when the trial trains on."""
    answer = ask_at_rung()
    if not answer or answer.get("train_on") is not True:
        return None
    try:
        new = int(answer.get("max_step"))
    except (TypeError, ValueError):
        return None
    if new <= limit:
        return None
    os.environ["GPUQ_TRIAL_MAX_STEP"] = str(new)
    return new
