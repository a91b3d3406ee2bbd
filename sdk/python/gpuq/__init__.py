"""gpuq: helpers for training scripts that run under the gpuq GPU job queue.

The daemon passes the job's context through environment variables:

=======================  ==========================================================
``GPUQ_JOB_ID``          id of the job (unset outside gpuq)
``GPUQ_ATTEMPT``         1 on the first run, incremented on each retry or requeue
``GPUQ_PARAMS``          JSON object with the job's parameters
``GPUQ_METRICS_FILE``    JSON-lines file read by ``gpuq`` for metrics
``GPUQ_CHECKPOINT_DIR``  directory kept across attempts, for checkpoints
``GPUQ_OUTPUT_DIR``      directory for the job's outputs
``GPUQ_TRIAL_MAX_STEP``  a sweep trial's step limit for this attempt
=======================  ==========================================================

Outside gpuq everything still works: files go under ``./.gpuq/`` in the current directory.
No function of this module raises because of a missing or malformed environment.

Stopping: to cancel, preempt or time out a job, the daemon sends SIGTERM, waits a grace
period, then sends SIGKILL. Poll :func:`should_stop` in the training loop; when it turns
True, save a checkpoint to :func:`checkpoint_dir` and exit with code 75 so that the job is
requeued and resumes from the checkpoint on its next attempt.

Example::

    import sys, gpuq

    gpuq.install_stop_handler()
    for step in range(start, steps):
        loss = train_step()
        gpuq.log(step=step, loss=loss)
        if gpuq.should_stop():
            save(gpuq.checkpoint_dir() / "ckpt.pt")
            sys.exit(75)
"""

from ._env import (
    attempt,
    checkpoint_dir,
    inside_gpuq,
    job_id,
    output_dir,
    params,
    trial_max_step,
)
from ._metrics import log
from ._stop import install_stop_handler, should_stop
from ._tune import tune_params

__version__ = "0.1.0"

#: Exit code that asks gpuq to requeue the job (``EX_TEMPFAIL``).
EXIT_REQUEUE = 75

__all__ = [
    "EXIT_REQUEUE",
    "__version__",
    "attempt",
    "checkpoint_dir",
    "inside_gpuq",
    "install_stop_handler",
    "job_id",
    "log",
    "output_dir",
    "params",
    "should_stop",
    "trial_max_step",
    "tune_params",
]
