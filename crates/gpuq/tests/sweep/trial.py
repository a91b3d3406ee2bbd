"""A sweep trial for the tests: trains a made-up model step by step, with a
checkpoint, so a promoted trial must resume where it paused.

val_loss = x + 1/step (lower x is better at every step). Each attempt appends
"attempt start_step max_step gpus" to outputs/attempts.txt, and "end step" when
it ends. CRASH_TRIALS (comma-separated trial ids) makes those trials exit 3 on
every attempt. PAUSE_ONLY=1 stops at the step limit without asking the daemon
(gpuq.should_stop() asks whether to train on in place), so every promotion
goes through a pause and a restart from the checkpoint.
"""

import json
import os
import sys
import time

import gpuq

gpuq.install_stop_handler()
params = gpuq.params()
trial = os.environ.get("GPUQ_TRIAL_ID", "")
checkpoint = gpuq.checkpoint_dir() / "state.json"
start = json.loads(checkpoint.read_text())["step"] if checkpoint.exists() else 0
limit = gpuq.trial_max_step() or 9
with open(gpuq.output_dir() / "attempts.txt", "a") as f:
    gpus = os.environ.get("GPUQ_GPUS", "")  # indices (CUDA_VISIBLE_DEVICES: UUIDs when confined)
    f.write(f"{gpuq.attempt()} {start} {limit} {gpus}\n")
if trial in os.environ.get("CRASH_TRIALS", "").split(","):
    print("crashing on purpose", flush=True)
    sys.exit(3)
pause = float(os.environ.get("STEP_SECONDS", "0.05"))
pause_only = os.environ.get("PAUSE_ONLY") == "1"
step = start
while step < (gpuq.trial_max_step() or 9):
    step += 1
    time.sleep(pause)
    gpuq.log(step=step, val_loss=float(params["x"]) + 1.0 / step)
    checkpoint.write_text(json.dumps({"step": step}))
    if pause_only and step >= (gpuq.trial_max_step() or 9):
        break
    if gpuq.should_stop():
        break
with open(gpuq.output_dir() / "attempts.txt", "a") as f:
    f.write(f"end {step}\n")
sys.exit(0)
