#!/usr/bin/env python3
"""Train a small MLP (or CNN) on synthetic data, the gpuq way: metrics, checkpoints,
resume, requeue, and every knob `gpuq tune` tries (batch size, mixed precision,
torch.compile, DataLoader workers and pinned memory, channels-last).

Runs on a GPU when there is one and on the CPU otherwise. See README.md beside this file.
"""

import argparse
import os
import resource
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

EXIT_REQUEUE = 75  # tells gpuq to requeue the job; it resumes from the checkpoint


def parse_args():
    p = argparse.ArgumentParser(description="Small MLP classifier on synthetic data.")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--amp", action="store_true", help="mixed precision: float16 on CUDA, bfloat16 on CPU")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--compile-mode", default="default", help="default, reduce-overhead, max-autotune, ...")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--ckpt-every", type=int, default=100, help="checkpoint every N steps (0: only at stop/end)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--fail-at-step", type=int, default=None, help="simulate a crash at this step")
    p.add_argument("--fail-on-attempt", type=int, default=1, help="... but only on this attempt")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp", help="cnn: 3x32x32 images (channels-last applies)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes making batches")
    p.add_argument("--pin-memory", action="store_true", help="DataLoader pin_memory (faster host-to-GPU copies)")
    p.add_argument("--channels-last", action="store_true", help="channels-last memory format (cnn only)")
    p.add_argument("--input-work", type=int, default=0, help="CPU work per batch (augmentation passes), to model input cost")
    p.add_argument("--warmup-steps", type=int, default=3, help="steps left out of samples_per_s (compile, caches)")
    p.add_argument("--measure-seconds", type=float, default=None,
                   help="end after this long measured past the warm-up (a `gpuq tune` trial: every batch size gets the same window)")
    args = p.parse_args()
    # `gpuq tune` sets knobs through GPUQ_PARAMS (gpuq.tune_params); the flags are the defaults.
    knobs = gpuq.tune_params({
        "batch_size": args.batch_size,
        "amp": ("fp16" if torch.cuda.is_available() and args.device != "cpu" else "bf16") if args.amp else "off",
        "compile": args.compile_mode if args.compile else "off",
        "num_workers": args.num_workers,
        "pin_memory": args.pin_memory,
        "channels_last": args.channels_last,
    })
    args.batch_size = knobs["batch_size"]
    args.amp = knobs["amp"] != "off"
    args.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(knobs["amp"])
    args.compile = knobs["compile"] != "off"
    args.compile_mode = knobs["compile"] if args.compile else args.compile_mode
    args.num_workers = knobs["num_workers"]
    args.pin_memory = knobs["pin_memory"]
    args.channels_last = knobs["channels_last"]
    return args


class Batches(torch.utils.data.IterableDataset):
    """Batch `step` is a function of (seed, step) alone, whoever makes it: a resumed
    run, or any number of DataLoader workers (each makes every W-th batch; the
    loader hands them out in order), sees exactly the batches of a straight run."""

    def __init__(self, x, y, batch_size, seed, start, stop, work, image):
        super().__init__()
        self.x, self.y, self.batch_size, self.seed = x, y, batch_size, seed
        self.start, self.stop, self.work, self.image = start, stop, work, image

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        first, every = (info.id, info.num_workers) if info else (0, 1)
        for step in range(self.start + first, self.stop, every):
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
            idx = torch.randint(0, self.x.shape[0], (self.batch_size,), generator=g)
            xb = self.x[idx]
            for _ in range(self.work):  # augmentation stand-in: noise, a flip, a clamp
                xb = (xb + 0.01 * torch.randn(xb.shape, generator=g)).flip(-1).clamp(-6, 6)
            if self.image:
                xb = xb.view(-1, 3, 32, 32)
            yield xb, self.y[idx]


def peak_memory_mib(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def make_data(n, dim, classes, seed):
    """Synthetic classification: labels come from a fixed random linear "teacher"."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(dim, classes, generator=g)
    x = torch.randn(n, dim, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def save_checkpoint(path, step, model, opt, scaler):
    state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}
    if scaler.is_enabled():
        state["scaler"] = scaler.state_dict()
    tmp = "%s.tmp.%d" % (path, os.getpid())
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: never leaves a half-written checkpoint behind


def main():
    args = parse_args()
    gpuq.install_stop_handler()  # SIGTERM/SIGUSR1 now set a flag instead of killing us
    attempt = gpuq.attempt()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16

    amp_dtype = args.amp_dtype or amp_dtype
    # Data is generated with fixed seeds, so every attempt sees the same data.
    dim = 3 * 32 * 32 if args.model == "cnn" else 64
    x_all, y_all = make_data(16384 + 2048, dim, 10, args.seed)
    x_train, y_train = x_all[:16384], y_all[:16384]  # batches are made on the CPU, then moved
    x_val, y_val = x_all[16384:].to(device), y_all[16384:].to(device)
    if args.model == "cnn":
        x_val = x_val.view(-1, 3, 32, 32)

    torch.manual_seed(args.seed)
    if args.model == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.GELU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.GELU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, args.hidden), nn.GELU(), nn.Linear(args.hidden, 10),
        ).to(device)
    else:
        model = nn.Sequential(
            nn.Linear(64, args.hidden), nn.GELU(),
            nn.Linear(args.hidden, args.hidden), nn.GELU(),
            nn.Linear(args.hidden, 10),
        ).to(device)
    image_format = torch.channels_last if args.channels_last and args.model == "cnn" else torch.contiguous_format
    if args.model == "cnn":
        model = model.to(memory_format=image_format)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # The scaler guards float16 gradients against underflow; bfloat16 does not need one.
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and amp_dtype == torch.float16 and device.type == "cuda")

    ckpt_path = gpuq.checkpoint_dir() / "ckpt.pt"
    step = 0
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=True)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        if "scaler" in ckpt and scaler.is_enabled():
            scaler.load_state_dict(ckpt["scaler"])
        step = ckpt["step"]
        print("resumed from step %d (attempt %d)" % (step, attempt), flush=True)
    else:
        print("starting from scratch on %s (attempt %d, amp=%s, compile=%s)"
              % (device, attempt, args.amp, args.compile), flush=True)

    # Compile after loading: the checkpoint holds the plain model's state_dict.
    forward = torch.compile(model, mode=args.compile_mode) if args.compile else model

    model.train()
    loss_value = float("nan")
    loader = torch.utils.data.DataLoader(
        Batches(x_train, y_train, args.batch_size, args.seed, step, args.steps, args.input_work, args.model == "cnn"),
        batch_size=None, num_workers=args.num_workers, pin_memory=args.pin_memory and device.type == "cuda",
        persistent_workers=False)
    batches = iter(loader)
    t_last, steps_since_log = time.perf_counter(), 0
    started, first_step_s, timed_from, timed_steps, first = time.perf_counter(), None, None, 0, step
    while step < args.steps:
        if args.fail_at_step is not None and step + 1 == args.fail_at_step and attempt == args.fail_on_attempt:
            print("simulated crash at step %d (attempt %d)" % (step + 1, attempt), flush=True)
            sys.exit(1)

        # Per-step seeded batches: a resumed run sees exactly the batches it would have seen.
        xb, yb = next(batches)
        xb = xb.to(device, non_blocking=True)
        yb = yb.to(device, non_blocking=True)
        if args.model == "cnn":
            xb = xb.contiguous(memory_format=image_format)
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=args.amp):
            loss = F.cross_entropy(forward(xb), yb)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        step += 1
        steps_since_log += 1
        if first_step_s is None:
            loss.item()
            first_step_s = time.perf_counter() - started  # the first step: compile, warm caches
        if timed_from is None:
            if step >= first + args.warmup_steps:
                loss.item()
                timed_from, timed_steps = time.perf_counter(), 0
        else:
            timed_steps += 1

        measured_enough = (args.measure_seconds is not None and timed_from is not None and timed_steps > 0
                           and time.perf_counter() - timed_from >= args.measure_seconds)
        if measured_enough:
            args.steps = step  # this is the end of the run
        if step % args.log_every == 0 or step == args.steps:
            loss_value = loss.item()  # synchronises with the GPU
            now = time.perf_counter()
            sps = steps_since_log * args.batch_size / max(now - t_last, 1e-9)
            metrics = dict(loss=loss_value, samples_per_sec=sps, lr=opt.param_groups[0]["lr"])
            if timed_from is not None and timed_steps > 0:
                # Throughput after the warm-up: compile time and first-step costs left out.
                metrics["samples_per_s"] = timed_steps * args.batch_size / max(now - timed_from, 1e-9)
            metrics["warmup_s"] = first_step_s
            metrics["peak_memory_mib"] = peak_memory_mib(device)
            gpuq.log(step=step, **metrics)
            t_last, steps_since_log = now, 0
        if args.ckpt_every > 0 and step % args.ckpt_every == 0:
            save_checkpoint(ckpt_path, step, model, opt, scaler)
        if gpuq.should_stop():
            save_checkpoint(ckpt_path, step, model, opt, scaler)
            print("stop requested: saved step %d, exiting for requeue" % step, flush=True)
            sys.exit(EXIT_REQUEUE)

    save_checkpoint(ckpt_path, step, model, opt, scaler)
    model.eval()
    with torch.no_grad(), torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=args.amp):
        logits = forward(x_val)
        val_loss = F.cross_entropy(logits.float(), y_val).item()
        val_acc = (logits.argmax(dim=1) == y_val).float().mean().item()
    gpuq.log(step=step, val_loss=val_loss, val_acc=val_acc)
    if loss_value != loss_value:  # NaN: no step ran (resumed a finished job)
        loss_value = val_loss
    torch.save(model.state_dict(), gpuq.output_dir() / "model.pt")
    print("done step=%d loss=%.4f val_acc=%.3f" % (step, loss_value, val_acc), flush=True)


if __name__ == "__main__":
    main()
