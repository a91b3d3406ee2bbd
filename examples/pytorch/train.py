#!/usr/bin/env python3
"""Train a small MLP on synthetic data, the gpuq way: metrics, checkpoints, resume, requeue.

Runs on a GPU when there is one and on the CPU otherwise. See README.md beside this file.
"""

import argparse
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
    return p.parse_args()


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

    # Data is generated with fixed seeds, so every attempt sees the same data.
    x_all, y_all = make_data(16384 + 2048, 64, 10, args.seed)
    x_train, y_train = x_all[:16384].to(device), y_all[:16384].to(device)
    x_val, y_val = x_all[16384:].to(device), y_all[16384:].to(device)

    torch.manual_seed(args.seed)
    model = nn.Sequential(
        nn.Linear(64, args.hidden), nn.GELU(),
        nn.Linear(args.hidden, args.hidden), nn.GELU(),
        nn.Linear(args.hidden, 10),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # The scaler guards float16 gradients against underflow; bfloat16 does not need one.
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and amp_dtype == torch.float16)

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
    t_last, steps_since_log = time.perf_counter(), 0
    while step < args.steps:
        if args.fail_at_step is not None and step + 1 == args.fail_at_step and attempt == args.fail_on_attempt:
            print("simulated crash at step %d (attempt %d)" % (step + 1, attempt), flush=True)
            sys.exit(1)

        # Per-step seeded batches: a resumed run sees exactly the batches it would have seen.
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        idx = torch.randint(0, x_train.shape[0], (args.batch_size,), generator=g).to(device)
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=args.amp):
            loss = F.cross_entropy(forward(x_train[idx]), y_train[idx])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        step += 1
        steps_since_log += 1

        if step % args.log_every == 0 or step == args.steps:
            loss_value = loss.item()  # synchronises with the GPU
            now = time.perf_counter()
            sps = steps_since_log * args.batch_size / max(now - t_last, 1e-9)
            gpuq.log(step=step, loss=loss_value, samples_per_sec=sps, lr=opt.param_groups[0]["lr"])
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
