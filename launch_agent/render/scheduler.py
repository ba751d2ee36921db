"""The standard sweep scheduler (`wandb scheduler <sweep> ...`) as a Kubernetes Job.

W&B's agent runs this command as a local process next to itself (wandb 0.31.0 `agent.py`
`run_job` with `resource: local-process`, as `cli/cli.py` `launch_sweep` pushes it). Here it
runs as a Job the agent renders like any run: the built-in queue spec below (the admin chooses
the image and the namespace: `sweeps.scheduler_image`, `sweeps.scheduler_namespace`), through the
same render pipeline, so it gets the restricted pod profile, the W&B key only as a
`secretKeyRef`, the agent's labels and adoption after a restart.

Custom scheduler jobs (W&B's sweep-scheduler job, Optuna, ...) run the submitter's code: they
are rendered through the queue's own spec, and only when it sets `sweeps.customSchedulers`.
"""

from __future__ import annotations

import dataclasses
import shlex

from launch_agent.model.queue_spec import InvalidInput, Problem, QueueSpec
from launch_agent.model.run_item import RunItem

SCHEDULER_SPEC_NAME = "sweep-scheduler"

# The scheduler only talks to W&B: small requests, and no retries of a failed scheduler (W&B's
# agent does not restart one either; the sweep is cancelled instead).
_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}


def scheduler_queue_spec(queue: str, namespace: str, image: str) -> QueueSpec:
    """The built-in queue spec of the standard scheduler on `queue`."""
    template = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "scheduler", "image": image, "resources": _RESOURCES}],
                }
            },
        },
    }
    return QueueSpec(
        name=SCHEDULER_SPEC_NAME,
        queues=(queue,),
        namespace=namespace,
        template=template,
        overridable=("overrides.entry_point", "overrides.run_config"),
        description="the standard W&B sweep scheduler (built in)",
    )


def scheduler_run(run: RunItem, image: str) -> RunItem:
    """The standard scheduler item as the run the built-in spec renders.

    W&B runs `entry_point + args` through a shell (`LocalProcessRunner`), so `launch_sweep`
    quotes its arguments (`--queue 'q1'`); the shell's word splitting is applied here so the
    container gets the same words. The submitter's `resource_args` and image do not apply:
    the admin's spec and `sweeps.scheduler_image` decide where and from what it runs."""
    words = [*(run.entry_point or ()), *(run.args or ())]
    try:
        command = shlex.split(" ".join(words))
    except ValueError as exc:
        raise InvalidInput(
            [Problem("runSpec.overrides.entry_point", f"is not a valid shell command: {exc}")]
        ) from None
    if command[:2] != ["wandb", "scheduler"] or len(command) < 3:
        raise InvalidInput(
            [Problem("runSpec.overrides.entry_point", "must be `wandb scheduler <sweep> ...`")]
        )
    return dataclasses.replace(
        run, entry_point=tuple(command), args=None, docker_image=image, resource_args={}
    )
