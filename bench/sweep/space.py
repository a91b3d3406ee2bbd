"""The search space of the sweep benchmarks, shared by record_curves.py (the
simulator's curves) and compare.py (the daemon's run), written as a gpuq sweep
file's `parameters`: loguniform and uniform are [low, high), int is [low, high]
with both ends included. No dependencies: compare.py runs without torch.
"""

SPACE = {
    "lr": {"loguniform": [1e-4, 1.0]},
    "layers": {"choice": [1, 2, 3]},
    "width": {"int": [16, 256]},
    "dropout": {"uniform": [0.0, 0.8]},
    "batch_size": {"choice": [16, 32, 64, 128, 256]},
    "weight_decay": {"loguniform": [1e-6, 1e-1]},
}
