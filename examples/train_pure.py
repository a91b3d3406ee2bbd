#!/usr/bin/env python3
"""A dependency-free "training" loop showing how a job cooperates with gpuq.

It fits a single weight ``w`` to a target by gradient descent, so the loss goes down
deterministically and a resumed run ends exactly where an uninterrupted one would.

* logs ``loss`` and ``w`` with ``gpuq.log`` every step;
* saves ``ckpt.json`` to ``gpuq.checkpoint_dir()`` every ``--ckpt-every`` steps (atomically);
* resumes from that checkpoint when it exists (e.g. on a retry after a crash);
* on SIGTERM / SIGUSR1 (``gpuq.should_stop()``) saves and exits with 75 so gpuq requeues it;
* ``--fail-at-step K --fail-on-attempt A`` crashes (exit 1) at step K on attempt A.

Run it under gpuq with ``gpuq run -- python examples/train_pure.py``, or directly: outside
gpuq, files go under ./.gpuq/.
"""

import argparse
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
EXIT_REQUEUE = 75


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="total number of steps")
    p.add_argument("--sleep", type=float, default=0.02, help="seconds of fake work per step")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps (0: only at stop/end)")
    p.add_argument("--fail-at-step", type=int, default=None, help="simulate a crash at this step")
    p.add_argument("--fail-on-attempt", type=int, default=1, help="... but only on this attempt")
    return p.parse_args()


def save_checkpoint(path, step, state):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step, "state": state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a reader sees the old or the new checkpoint, never half of one


def load_checkpoint(path):
    try:
        with open(path, encoding="utf-8") as f:
            ckpt = json.load(f)
        return int(ckpt["step"]), dict(ckpt["state"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        print("ignoring unreadable checkpoint %s: %s" % (path, exc), flush=True)
        return None


def main():
    args = parse_args()
    gpuq.install_stop_handler()  # catch SIGTERM from the very start
    attempt = gpuq.attempt()
    ckpt_path = gpuq.checkpoint_dir() / "ckpt.json"

    step, state = 0, {"w": 0.0}
    resumed = load_checkpoint(ckpt_path)
    if resumed is not None:
        step, state = resumed
        print("resumed from step %d (attempt %d)" % (step, attempt), flush=True)
    else:
        print("starting from scratch (attempt %d, job %s)" % (attempt, gpuq.job_id()), flush=True)

    loss = (state["w"] - TARGET) ** 2
    while step < args.steps:
        if args.fail_at_step is not None and step + 1 == args.fail_at_step and attempt == args.fail_on_attempt:
            print("simulated crash at step %d (attempt %d)" % (step + 1, attempt), flush=True)
            sys.exit(1)

        time.sleep(args.sleep)  # the "work"
        grad = 2.0 * (state["w"] - TARGET)
        state["w"] -= args.lr * grad
        loss = (state["w"] - TARGET) ** 2
        step += 1
        gpuq.log(step=step, loss=loss, w=state["w"], attempt=attempt)

        if args.ckpt_every > 0 and step % args.ckpt_every == 0:
            save_checkpoint(ckpt_path, step, state)
        if gpuq.should_stop():
            save_checkpoint(ckpt_path, step, state)
            print("stop requested: saved step %d, exiting for requeue" % step, flush=True)
            sys.exit(EXIT_REQUEUE)

    save_checkpoint(ckpt_path, step, state)
    with open(gpuq.output_dir() / "result.json", "w", encoding="utf-8") as f:
        json.dump({"step": step, "loss": loss, "w": state["w"]}, f)
    print("done step=%d loss=%.6g" % (step, loss), flush=True)


if __name__ == "__main__":
    main()
