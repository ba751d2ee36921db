"""The chaos bench's queues: queue specs of three kinds and the quota tree they share.

- `chaos-a`, `chaos-b`: batch/v1 Jobs, each on its own small leaf (`team-a`, `team-b`) of one
  2-CPU subtree: a team is guaranteed 1 CPU (ten 100m runs) and may borrow the rest, so runs
  wait for quota and a team's borrowed runs are evicted (suspended) when the other reclaims;
- `chaos-jobset`: a JobSet (driver and workers), `chaos-pytorch`: a PyTorchJob (master and
  workers), both on one roomy leaf (`crs`): custom resources with children of their own.

The agent runs with `quota.mode: agent` over this tree, so every workload is created
suspended and resumed when the tree admits it.
"""

from __future__ import annotations

from typing import Any

JOB_QUEUES = ("chaos-a", "chaos-b")
CR_QUEUES = ("chaos-jobset", "chaos-pytorch")
QUEUES = JOB_QUEUES + CR_QUEUES
LEAVES = {"chaos-a": "team-a", "chaos-b": "team-b", "chaos-jobset": "crs", "chaos-pytorch": "crs"}
# What the API server stores each queue's workloads as (the plural the orphan check lists).
PLURALS = {"chaos-a": "jobs", "chaos-b": "jobs", "chaos-jobset": "jobsets"}
PLURALS["chaos-pytorch"] = "pytorchjobs"
WORKLOAD_PLURALS = ("jobs", "jobsets", "pytorchjobs")

TREE: dict[str, Any] = {
    "root": {
        "name": "root",
        "min": {"cpu": 100},
        "max": {"cpu": 100},
        "children": [
            {
                "name": "teams",
                "min": {"cpu": 2},
                "max": {"cpu": 2},
                "children": [
                    {"name": "team-a", "min": {"cpu": 1}, "max": {"cpu": 2}},
                    {"name": "team-b", "min": {"cpu": 1}, "max": {"cpu": 2}},
                ],
            },
            {"name": "crs", "min": {"cpu": 98}, "max": {"cpu": 98}},
        ],
    }
}

_CONTAINER = """\
{indent}containers:
{indent}  - name: {name}
{indent}    image: ${{image_uri}}
{indent}    resources:
{indent}      requests: {{cpu: 100m, memory: 64Mi}}"""


def _container(indent: int, name: str = "main") -> str:
    return _CONTAINER.format(indent=" " * indent, name=name)


_TEMPLATES = {
    "chaos-a": "job",
    "chaos-b": "job",
    "chaos-jobset": "jobset",
    "chaos-pytorch": "pytorch",
}


def _template(kind: str) -> str:
    if kind == "job":
        return f"""\
    apiVersion: batch/v1
    kind: Job
    spec:
      template:
        spec:
{_container(10)}"""
    if kind == "jobset":
        return f"""\
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    spec:
      failurePolicy:
        maxRestarts: 0
      replicatedJobs:
        - name: driver
          replicas: 1
          template:
            spec:
              template:
                spec:
{_container(18)}
        - name: workers
          replicas: 1
          template:
            spec:
              parallelism: 2
              completions: 2
              template:
                spec:
{_container(18)}"""
    return f"""\
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    spec:
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          restartPolicy: Never
          template:
            spec:
{_container(14, "pytorch")}
        Worker:
          replicas: 1
          restartPolicy: Never
          template:
            spec:
{_container(14, "pytorch")}"""


def queue_spec(queue: str) -> str:
    """The queue spec serving `queue` (as an admin would write it)."""
    return f"""\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: spec-{queue}
spec:
  queues: [{queue}]
  namespace: default
  quota:
    leaf: {LEAVES[queue]}
  template:
{_template(_TEMPLATES[queue])}
  overridable:
    - overrides.args
"""
