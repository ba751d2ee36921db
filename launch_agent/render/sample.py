"""A sample run-queue item for a queue spec, as the W&B server would hand it to the agent.

`launch-agent validate` renders every spec with it. Like a real item, its
`resource_args.kubernetes` repeats the template (W&B merges its own copy of the queue config
into every item), which exercises the rule that values equal to the template are not
overrides; it sets `overrides` only where the spec grants them.
"""

from __future__ import annotations

from typing import Any

from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.paths import glob_matches_prefix, parse_glob

SAMPLE_ITEM_ID = "UnVuUXVldWVJdGVtOjEyMzQ1Njc4OQ=="  # RunQueueItem:123456789
SAMPLE_IMAGE = "registry.example.com/team/train:1.0.0"


def sample_item(spec: QueueSpec) -> dict[str, Any]:
    globs = [parse_glob(g) for g in spec.overridable]

    def granted(key: str) -> bool:
        return any(glob_matches_prefix(g, ("overrides", key)) for g in globs)

    overrides: dict[str, Any] = {}
    if granted("args"):
        overrides["args"] = ["--epochs", "3"]
    if granted("run_config"):
        overrides["run_config"] = {"lr": 0.001, "batch_size": 64}
    return {
        "runQueueItemId": SAMPLE_ITEM_ID,
        "runSpec": {
            "entity": "sample-entity",
            "project": "sample-project",
            "name": "sample-run",
            "author": "sample-user",
            "resource": "kubernetes",
            "docker": {"docker_image": SAMPLE_IMAGE},
            "resource_args": {"kubernetes": dict(spec.template)},
            "overrides": overrides,
        },
    }
