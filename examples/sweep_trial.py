#!/usr/bin/env python3
"""A sweep trial with no dependencies: the trial of examples/sweep.yaml.

It fits one weight by gradient descent with momentum, both taken from the
trial's parameters (``gpuq.params()``), logs ``loss`` at every step, and keeps
its step in ``gpuq.checkpoint_dir()``, so a trial ASHA pauses at a rung and
promotes later resumes where it stopped. It trains while
``gpuq.trial_max_step()`` allows (read after every step: a promotion raises it).

    gpuq sweep examples/sweep.yaml      # from the repository root
"""

import json
import os
import sys
import time

try:
    import gpuq
except ImportError:  # not installed: use the SDK from this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
    import gpuq

TARGET = 3.0

gpuq.install_stop_handler()
params = gpuq.params()
lr, momentum = float(params.get("lr", 0.05)), float(params.get("momentum", 0.0))
checkpoint = gpuq.checkpoint_dir() / "trial.json"
state = json.loads(checkpoint.read_text()) if checkpoint.exists() else {"step": 0, "w": 0.0, "v": 0.0}
print("trial %s: lr=%.4g momentum=%.2g from step %d" % (os.environ.get("GPUQ_TRIAL_ID", "-"), lr, momentum, state["step"]), flush=True)
while state["step"] < (gpuq.trial_max_step() or 27):
    time.sleep(0.01)  # the "work"
    grad = 2.0 * (state["w"] - TARGET)
    state["v"] = momentum * state["v"] - lr * grad
    state["w"] += state["v"]
    state["step"] += 1
    gpuq.log(step=state["step"], loss=(state["w"] - TARGET) ** 2)
    tmp = checkpoint.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, checkpoint)
    if gpuq.should_stop():  # at the rung (unless promoted at once), or on SIGTERM
        break
print("stopped at step %d, loss %.3g" % (state["step"], (state["w"] - TARGET) ** 2), flush=True)
