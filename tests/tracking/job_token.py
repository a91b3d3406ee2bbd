"""Run inside a gpuq job: what the job's own token (MLFLOW_TRACKING_TOKEN) may do.

    python job_token.py OTHER_JOB_ID

Logs to the job's run and to a run nested under it with the official MLflow
client, then tries, with the same token, to write another run of the same
user, make an experiment, and submit, cancel and list jobs through gpuq's API.
Prints one line "RESULT {json}": each outcome is "ok", an MLflow error code
and message, or an HTTP status and body.
"""

import json
import os
import sys
import urllib.error
import urllib.request

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

other = sys.argv[1]
url = os.environ["MLFLOW_TRACKING_URI"].rstrip("/")
token = os.environ["MLFLOW_TRACKING_TOKEN"]


def outcome(action):
    try:
        action()
        return "ok"
    except MlflowException as e:
        return f"{e.error_code}: {e.message}"


def api(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method=method,
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return f"{reply.status}"
    except urllib.error.HTTPError as e:
        return f"{e.code}: {e.read().decode()}"


result = {}
with mlflow.start_run() as run:
    result["own_run"] = run.info.run_id
    mlflow.log_metric("acc", 0.9, step=1)
    with mlflow.start_run(nested=True) as child:
        mlflow.log_metric("inner", 1.0)
        result["nested"] = child.info.run_id
client = MlflowClient()
result["read_other_run"] = outcome(lambda: client.get_run(other))
result["write_other_run"] = outcome(lambda: client.log_metric(other, "planted", 1.0))
result["make_experiment"] = outcome(lambda: client.create_experiment("made-by-a-job"))
result["submit"] = api(
    "POST", "/v1/jobs", {"spec": {"command": ["true"]}, "cwd": "/tmp", "env": {}}
)
result["cancel_other"] = api("POST", f"/v1/jobs/{other}/cancel")
result["list"] = api("GET", "/v1/jobs")
result["token"] = api("POST", "/v1/tokens", {"user": os.environ.get("USER", "root")})
print("RESULT " + json.dumps(result), flush=True)
