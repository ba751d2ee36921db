"""Which wandb SDK errors mean "W&B did not answer" (retry later) and which "no such job"."""

from __future__ import annotations

import pytest
from wandb.errors import AuthenticationError, CommError, UsageError
from wandb.sdk.lib.service.service_connection import WandbApiFailedError

from launch_agent.adapters.job_artifact import unavailable


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        # What the SDK raised against the sandbox server for a missing project.
        (CommError("not found", ValueError("project 'proj' not found under entity 'ent'")), False),
        (CommError("connection refused", ConnectionError("refused")), True),
        (CommError("timed out", TimeoutError()), True),
        # What it raised for an unreachable base URL.
        (AuthenticationError("the service process is busy and did not respond in time"), True),
        # What the download raised during a W&B outage (wandb-core's own retries gave up):
        # it used to fail the item for good.
        (
            WandbApiFailedError(
                "Failed to execute API request: the service process is busy and did not"
                " respond in time."
            ),
            True,
        ),
        (ConnectionRefusedError(), True),
        (UsageError("artifact name must be entity/project/name"), False),
        (ValueError("Artifact 'x' not found in response"), False),
        (KeyError("source"), False),
    ],
)
def test_unavailable(error: BaseException, expected: bool) -> None:
    assert unavailable(error) is expected
