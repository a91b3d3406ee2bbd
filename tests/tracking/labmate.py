"""A labmate's attacks on other users' tracking, with the official MLflow client.

    python labmate.py create NAME          # makes the experiment NAME, prints its id
    python labmate.py attack NAME RUN_ID   # tries each attack, prints one JSON object

MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN name the daemon and the labmate's
own token. Each attack's outcome is "ok" or "ERROR_CODE: message".
"""

import json
import sys

from mlflow import MlflowClient
from mlflow.entities import RunTag
from mlflow.exceptions import MlflowException


def outcome(action):
    try:
        action()
        return "ok"
    except MlflowException as e:
        return f"{e.error_code}: {e.message}"


client = MlflowClient()
mode, name = sys.argv[1], sys.argv[2]
if mode == "create":
    print(client.create_experiment(name))
    sys.exit(0)

victim = sys.argv[3]
experiment = client.get_experiment_by_name(name).experiment_id
# Her own run, in the project's experiment: that much anyone may do.
mine = client.create_run(experiment).info.run_id
result = {
    "rename": outcome(lambda: client.rename_experiment(experiment, name + "-hers")),
    "tag": outcome(
        lambda: client.set_experiment_tag(experiment, "mlflow.note.content", "moved to hers")
    ),
    "delete": outcome(lambda: client.delete_experiment(experiment)),
    "set_job_tag": outcome(lambda: client.set_tag(mine, "gpuq.job_id", victim)),
    "create_with_job_tag": outcome(
        lambda: client.create_run(experiment, tags={"gpuq.job_id": victim})
    ),
    "batch_sweep_tag": outcome(
        lambda: client.log_batch(mine, tags=[RunTag("gpuq.sweep_id", "1")])
    ),
    "delete_job_tag": outcome(lambda: client.delete_tag(mine, "gpuq.job_id")),
    "nest_under_victim": outcome(
        lambda: client.create_run(experiment, tags={"mlflow.parentRunId": victim})
    ),
    "reparent_to_victim": outcome(lambda: client.set_tag(mine, "mlflow.parentRunId", victim)),
    "nest_under_own": outcome(
        lambda: client.create_run(experiment, tags={"mlflow.parentRunId": mine})
    ),
}
print(json.dumps(result))
