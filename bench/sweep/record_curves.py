#!/usr/bin/env python3
"""Record learning curves for the sweep simulator (`gpuq sim --sweep FILE`).

Trains ``train_digits.train`` in this process (no daemon) for N random configurations of
the search space below, each to ``--max-step`` epochs, plus every point of a small grid,
and writes one JSON object per line:

    {"task": ..., "metric": "val_acc", "goal": "maximize", ...}          header (first line)
    {"config": {...}, "curve": [[step, value, seconds], ...]}           a random draw
    {"config": {...}, "curve": [...], "grid": true}                      a grid point

``value`` is the metric after that step (null where it is not finite: a diverged run) and
``seconds`` the process CPU time of that step (training and evaluation, one thread): CPU
time, not wall time, so that other load on a shared machine does not leak into the curves.

    python bench/sweep/record_curves.py --out bench/sweep/digits_curves.jsonl
    python bench/sweep/record_curves.py --dataset breast_cancer --metric val_loss \\
        --out bench/sweep/breast_cancer_curves.jsonl
"""

import argparse
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_digits  # noqa: E402
from space import SPACE  # noqa: E402
# The grid: these parameters take every combination; the others keep
# train_digits.DEFAULTS.
GRID = {
    "lr": [3e-4, 3e-3, 3e-2, 3e-1],
    "layers": [1, 2, 3],
    "width": [32, 96, 256],
}
GOALS = {"val_acc": "maximize", "val_loss": "minimize"}


def draw(rng, spec):
    (kind, arg), = spec.items()
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1])))
    if kind == "uniform":
        return rng.uniform(arg[0], arg[1])
    if kind == "int":
        return rng.randint(arg[0], arg[1])
    if kind == "choice":
        return rng.choice(arg)
    raise ValueError("unknown parameter kind %r" % kind)


def grid_points():
    points = [{}]
    for name, values in GRID.items():
        points = [dict(p, **{name: v}) for p in points for v in values]
    return points


def record(config, max_step, dataset, metric, epochs_per_step):
    curve = []

    def on_step(step, acc, loss, seconds):
        value = acc if metric == "val_acc" else loss
        value = round(value, 6) if math.isfinite(value) else None
        curve.append([step, value, round(seconds, 5)])

    train_digits.train(config, max_step, dataset, on_step=on_step, log=lambda m: None, epochs_per_step=epochs_per_step)
    return curve


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", choices=train_digits.DATASETS, default="digits")
    ap.add_argument("--metric", choices=sorted(GOALS), default="val_acc")
    ap.add_argument("--configs", type=int, default=81, help="random configurations (default 81)")
    ap.add_argument("--max-step", type=int, default=81, help="steps per configuration (default 81)")
    ap.add_argument("--epochs-per-step", type=int, default=1, help="epochs in one step (default 1)")
    ap.add_argument("--seed", type=int, default=1, help="seeds the draws of the configurations")
    ap.add_argument("--no-grid", action="store_true", help="skip the grid points")
    args = ap.parse_args()

    import sklearn
    import torch

    rng = random.Random(args.seed)
    configs = [({name: draw(rng, spec) for name, spec in SPACE.items()}, False) for _ in range(args.configs)]
    if not args.no_grid:
        configs += [(p, True) for p in grid_points()]
    header = {
        "task": "train_digits.py MLP on sklearn load_%s, fixed stratified 80/20 split" % args.dataset,
        "metric": args.metric,
        "goal": GOALS[args.metric],
        "seconds": "process CPU seconds of the step (training + evaluation, torch.set_num_threads(1))",
        "step": "one epoch" if args.epochs_per_step == 1 else "%d epochs" % args.epochs_per_step,
        "space": SPACE,
        "grid": None if args.no_grid else GRID,
        "seed": args.seed,
        "versions": {"torch": torch.__version__, "sklearn": sklearn.__version__, "python": sys.version.split()[0]},
    }
    started = time.time()
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(header, sort_keys=True) + "\n")
        for i, (config, is_grid) in enumerate(configs):
            t0 = time.time()
            curve = record(config, args.max_step, args.dataset, args.metric, args.epochs_per_step)
            line = {"config": config, "curve": curve}
            if is_grid:
                line["grid"] = True
            f.write(json.dumps(line, sort_keys=True) + "\n")
            f.flush()
            last = curve[-1][1]
            print("%3d/%d %s %s=%s after %d steps, %.1f cpu s, %.1f s wall"
                  % (i + 1, len(configs), "grid" if is_grid else "rand", args.metric, last, len(curve),
                     sum(c[2] for c in curve), time.time() - t0), flush=True)
    os.replace(tmp, args.out)
    print("wrote %s: %d curves in %.0f s" % (args.out, len(configs), time.time() - started))


if __name__ == "__main__":
    main()
