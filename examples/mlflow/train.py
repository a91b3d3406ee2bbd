"""A PyTorch trainer that tracks itself with MLflow's own client, unchanged.

Under gpuq nothing is configured by hand: the job's environment carries
MLFLOW_TRACKING_URI (the daemon), MLFLOW_TRACKING_TOKEN (a token for this job)
and MLFLOW_RUN_ID (the job's run), so ``mlflow.start_run()`` attaches to the
job's own run. Hyperparameters come from the spec's ``params`` (GPUQ_PARAMS).
It also reports one figure through ``gpuq.log`` to show both paths land in one store.

    gpuq run --param lr=0.05 --param hidden=32 -- python examples/mlflow/train.py --steps 50
"""

import argparse
import json
import os
import time

import mlflow
import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--log-every", type=int, default=1)
    args = ap.parse_args()

    params = json.loads(os.environ.get("GPUQ_PARAMS") or "{}")
    lr = float(params.get("lr", 0.05))
    hidden = int(params.get("hidden", 32))
    torch.manual_seed(int(os.environ.get("GPUQ_SEED", "0")))

    # A small regression problem: y = sum(x) + noise.
    x = torch.randn(512, 8)
    y = x.sum(dim=1, keepdim=True) + 0.01 * torch.randn(512, 1)
    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)

    try:
        import gpuq  # the SDK; optional
    except ImportError:
        gpuq = None

    with mlflow.start_run() as run:
        mlflow.log_params({"optimizer": "sgd", "steps": args.steps})
        mlflow.set_tag("trainer", "examples/mlflow/train.py")
        started = time.time()
        for step in range(args.steps):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if step % args.log_every == 0 or step == args.steps - 1:
                mlflow.log_metrics({"loss": loss.item(), "lr": lr}, step=step)
        elapsed = max(time.time() - started, 1e-9)
        if gpuq is not None:
            gpuq.log(step=args.steps, samples_per_second=512 * args.steps / elapsed)
        out = os.environ.get("GPUQ_OUTPUT_DIR", ".")
        path = os.path.join(out, "model.pt")
        torch.save(model.state_dict(), path)
        mlflow.log_artifact(path, artifact_path="weights")
        print(f"run {run.info.run_id} final loss={loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
