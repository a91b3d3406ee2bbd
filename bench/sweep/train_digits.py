#!/usr/bin/env python3
"""A sweep trial: a small PyTorch MLP on a dataset that scikit-learn ships.

One step is one epoch (``--epochs-per-step`` for more). Every step logs ``gpuq.log(step=step, val_acc=..., val_loss=...)``.
As a gpuq trial it takes its hyperparameters from ``gpuq.params()`` (GPUQ_PARAMS), trains to
``gpuq.trial_max_step()`` (GPUQ_TRIAL_MAX_STEP), checkpoints to ``gpuq.checkpoint_dir()``
(GPUQ_CHECKPOINT_DIR) and resumes from there when promoted:

    command: [python, bench/sweep/train_digits.py]

Outside gpuq, ``--max-step`` gives the step to train to (and ``--params`` a JSON object).
Exit status: 0 once it reached its step limit (a trial that reached its rung), 75 when
asked to stop by SIGTERM/SIGUSR1 (gpuq requeues it; it resumes from the checkpoint).

``record_curves.py`` imports :func:`train` to record learning curves without a daemon.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import gpuq
except ImportError:  # not installed: use the SDK from this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    import gpuq

EXIT_REQUEUE = 75

# The search space's defaults, for a run without parameters. Every trial takes
# the same data split (SPLIT_SEED), so trials differ only in their parameters.
DEFAULTS = {
    "lr": 0.01,
    "layers": 2,
    "width": 128,
    "dropout": 0.1,
    "batch_size": 64,
    "weight_decay": 1e-4,
    "seed": 0,
}
SPLIT_SEED = 0
DATASETS = ("digits", "breast_cancer", "wine")


def load_data(name):
    """(x_train, y_train, x_val, y_val, classes) as tensors; a fixed stratified 80/20 split."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    loader = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
    }[name]
    x, y = loader(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.2, random_state=SPLIT_SEED, stratify=y)
    # Standardise with the training split's statistics only, so nothing of the
    # validation set leaks into training.
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0
    x_tr, x_va = (x_tr - mean) / std, (x_va - mean) / std
    as_x = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    as_y = lambda a: torch.tensor(a, dtype=torch.long)  # noqa: E731
    return as_x(x_tr), as_y(y_tr), as_x(x_va), as_y(y_va), int(y.max()) + 1


def make_model(inputs, classes, layers, width, dropout):
    mods, size = [], inputs
    for _ in range(layers):
        mods += [nn.Linear(size, width), nn.ReLU(), nn.Dropout(dropout)]
        size = width
    mods.append(nn.Linear(size, classes))
    return nn.Sequential(*mods)


def resolve(params):
    """The trial's hyperparameters: GPUQ_PARAMS over the defaults, with types fixed."""
    p = dict(DEFAULTS)
    p.update({k: v for k, v in params.items() if v is not None})
    return {
        "lr": float(p["lr"]),
        "layers": int(p["layers"]),
        "width": int(p["width"]),
        "dropout": float(p["dropout"]),
        "batch_size": int(p["batch_size"]),
        "weight_decay": float(p["weight_decay"]),
        "seed": int(p["seed"]),
    }


def save_checkpoint(path, state):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a stop mid-write never leaves half a checkpoint


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        out = model(x)
        loss = F.cross_entropy(out, y).item()
        acc = (out.argmax(dim=1) == y).float().mean().item()
    model.train()
    # A diverged run gives NaN/inf; the metrics file stores those as null.
    return acc, (loss if math.isfinite(loss) else float("nan"))


def train(params, max_step, dataset="digits", ckpt_path=None, on_step=None, should_stop=None, log=print,
          epochs_per_step=1):
    """Train to step ``max_step`` (or until ``should_stop()`` after a step), resuming from
    ``ckpt_path`` when it exists and saving there at the end. A step is ``epochs_per_step``
    epochs (1 unless a step must cost more than starting the process: see README.md).

    ``on_step(step, val_acc, val_loss, cpu_seconds)`` is called after each step, where
    ``cpu_seconds`` is the process CPU time of that step (training and evaluation). Returns
    the last step trained (or resumed at) and whether it stopped before ``max_step``.
    ``max_step`` may be a function, read again after each step: a sweep trial promoted at
    its rung trains on in place (``gpuq.trial_max_step()`` grows).
    """
    limit = max_step if callable(max_step) else (lambda: max_step)
    torch.set_num_threads(1)
    hp = resolve(params)
    x_tr, y_tr, x_va, y_va, classes = load_data(dataset)
    torch.manual_seed(hp["seed"])
    model = make_model(x_tr.shape[1], classes, hp["layers"], hp["width"], hp["dropout"])
    opt = torch.optim.SGD(model.parameters(), lr=hp["lr"], momentum=0.9, weight_decay=hp["weight_decay"])
    step, last = 0, None
    if ckpt_path is not None and os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, weights_only=True)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["torch_rng"])  # dropout masks go on as if never stopped
        step, last = ckpt["step"], ckpt.get("last")
        if ckpt.get("epochs_per_step", 1) != epochs_per_step:
            raise SystemExit("the checkpoint was trained with %d epochs per step, not %d"
                             % (ckpt.get("epochs_per_step", 1), epochs_per_step))
        if step >= limit():
            log("resumed at step %d, the step limit (%d): nothing to train" % (step, limit()))
        else:
            log("resumed from step %d; continuing at step %d" % (step, step + 1))
    else:
        log("starting at step 1: %s on %s" % (json.dumps(hp, sort_keys=True), dataset))

    def checkpoint():
        if ckpt_path is not None:
            save_checkpoint(ckpt_path, {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "step": step,
                "epochs_per_step": epochs_per_step,
                "last": last,
                "params": hp,
            })

    if step >= limit() and last is not None and on_step is not None:
        # Already trained this far (the report may have been lost with the
        # previous attempt): report it again so the sweep sees its rung.
        on_step(step, last[0], last[1], 0.0)
    stopped = False
    n = x_tr.shape[0]
    while step < limit():
        t0 = time.process_time()
        for k in range(epochs_per_step):
            # A permutation seeded by (trial seed, epoch) instead of a running
            # generator: a resumed run sees exactly the batches it would have seen.
            seed = hp["seed"] * 1_000_003 + step * epochs_per_step + k
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
            for i in range(0, n, hp["batch_size"]):
                idx = order[i:i + hp["batch_size"]]
                loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        step += 1
        acc, vloss = evaluate(model, x_va, y_va)
        last = (acc, vloss)
        if on_step is not None:
            on_step(step, acc, vloss, time.process_time() - t0)
        if should_stop is not None and should_stop():
            stopped = step < limit()
            break
    checkpoint()
    return step, stopped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-step", type=int, default=None, help="step to train to outside gpuq (default 27)")
    ap.add_argument("--params", default=None, help="JSON object of hyperparameters (default: gpuq.params())")
    ap.add_argument("--dataset", choices=DATASETS, default="digits")
    ap.add_argument("--epochs-per-step", type=int, default=1, help="epochs in one step (default 1)")
    args = ap.parse_args()
    gpuq.install_stop_handler()  # SIGTERM now sets a flag; the step ends, then we save
    params = json.loads(args.params) if args.params else gpuq.params()
    limit = gpuq.trial_max_step()
    max_step = limit if limit is not None else (args.max_step if args.max_step is not None else 27)

    def on_step(step, acc, vloss, seconds):
        gpuq.log(step=step, val_acc=acc, val_loss=vloss)
        print("step %d val_acc %.4f val_loss %.4f (%.3f cpu s)" % (step, acc, vloss, seconds), flush=True)

    ckpt = str(gpuq.checkpoint_dir() / "ckpt.pt")
    if args.epochs_per_step < 1:
        ap.error("--epochs-per-step must be at least 1")
    # Read again after each step: promoted at its rung, a trial trains on in place.
    step, stopped = train(params, lambda: gpuq.trial_max_step() or max_step, args.dataset, ckpt, on_step,
                          gpuq.should_stop,
                          log=lambda m: print(m, flush=True), epochs_per_step=args.epochs_per_step)
    if stopped:
        print("stop requested at step %d: checkpoint saved, exiting %d" % (step, EXIT_REQUEUE), flush=True)
        sys.exit(EXIT_REQUEUE)
    print("reached step %d: checkpoint saved" % step, flush=True)


if __name__ == "__main__":
    main()
