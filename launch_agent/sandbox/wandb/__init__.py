"""The sandbox's W&B Launch server: W&B's GraphQL protocol and semantics on a loopback port.

`async with WandbServer() as wb:` gives `wb.url` (the `WANDB_BASE_URL`), `wb.api_key`,
`wb.state` (the Python API: queues, items, agents, runs) and `wb.faults` / `wb.log` (fault
injection and accounting). See docs/sandbox.md, "W&B Launch server".
"""

from launch_agent.sandbox.wandb.server import DEFAULT_API_KEY, WandbServer
from launch_agent.sandbox.wandb.state import (
    LAUNCH_PROJECT,
    ItemReport,
    ItemState,
    LaunchAgent,
    LaunchState,
    Run,
    RunQueue,
    RunQueueItem,
    WandbError,
)

__all__ = [
    "DEFAULT_API_KEY",
    "LAUNCH_PROJECT",
    "ItemReport",
    "ItemState",
    "LaunchAgent",
    "LaunchState",
    "Run",
    "RunQueue",
    "RunQueueItem",
    "WandbError",
    "WandbServer",
]
