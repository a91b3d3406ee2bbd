import os
import sys

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_DIR = os.path.join(REPO_ROOT, "sdk", "python")

if SDK_DIR not in sys.path:
    sys.path.insert(0, SDK_DIR)

GPUQ_VARS = (
    "GPUQ_JOB_ID",
    "GPUQ_ATTEMPT",
    "GPUQ_PARAMS",
    "GPUQ_METRICS_FILE",
    "GPUQ_CHECKPOINT_DIR",
    "GPUQ_OUTPUT_DIR",
    "GPUQ_TRIAL_MAX_STEP",
)


@pytest.fixture(autouse=True)
def clean_gpuq_env(monkeypatch):
    """Every test starts outside gpuq, whatever the environment running pytest holds."""
    for name in GPUQ_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def child_env():
    """Environment for child processes: the SDK importable, no GPUQ_* variables."""
    env = {k: v for k, v in os.environ.items() if k not in GPUQ_VARS}
    env["PYTHONPATH"] = SDK_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env
