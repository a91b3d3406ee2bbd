"""Checks a finished gpuq job's run from outside, with the official MLflow client.

    python check_from_outside.py JOB_ID PROJECT OTHER_USERS_TOKEN DOWNLOAD_DIR

MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN name the daemon and a token that
may read the run. Exits non-zero with the failed check on stderr.
"""

import math
import os
import sys

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

job, project, other_token, download_dir = sys.argv[1:5]
client = MlflowClient()

experiment = mlflow.get_experiment_by_name(project)
assert experiment is not None, f"no experiment named {project}"

runs = mlflow.search_runs(
    experiment_ids=[experiment.experiment_id],
    filter_string="params.lr = '0.05' and metrics.loss < 100 and attributes.status = 'FINISHED'",
    order_by=["metrics.loss ASC"],
    output_format="list",
)
assert [r.info.run_id for r in runs] == [job], [r.info.run_id for r in runs]
run = runs[0]
assert run.data.params["hidden"] == "16", run.data.params
assert run.data.params["optimizer"] == "sgd", run.data.params
assert run.data.tags["trainer"] == "examples/mlflow/train.py", run.data.tags
assert "samples_per_second" in run.data.metrics, run.data.metrics  # from gpuq.log()

none = mlflow.search_runs(
    experiment_ids=[experiment.experiment_id],
    filter_string="params.lr = '0.5'",
    output_format="list",
)
assert none == [], none

history = client.get_metric_history(job, "loss")
steps = [m.step for m in history]
assert steps == list(range(40)), steps
assert all(math.isfinite(m.value) for m in history)
assert history[-1].value < history[0].value, (history[0].value, history[-1].value)

names = [f.path for f in client.list_artifacts(job, "weights")]
assert names == ["weights/model.pt"], names
path = client.download_artifacts(job, "weights/model.pt", download_dir)
import torch  # noqa: E402

state = torch.load(path, weights_only=True)
assert "0.weight" in state, list(state)

# Another user's token reads the run but cannot write to it.
os.environ["MLFLOW_TRACKING_TOKEN"] = other_token
other = MlflowClient()
assert other.get_run(job).info.run_id == job
try:
    other.log_metric(job, "vandal", 1.0)
except MlflowException as e:
    assert e.error_code == "PERMISSION_DENIED", e.error_code
else:
    raise AssertionError("another user's token wrote to the run")
try:
    other.set_tag(job, "owner", "mallory")
except MlflowException as e:
    assert e.error_code == "PERMISSION_DENIED", e.error_code
else:
    raise AssertionError("another user's token tagged the run")
print("all checks passed")
