"""`launch-agent run` as a process against a world, for what only a process shows: a SIGKILL
(no clean-up, no Lease released, requests cut mid-flight) and a start from a config file.

The same shape as `tests/e2e/test_process.py`'s helper, with the world's kubeconfig: on the
real tier the process talks to the upstream kube-apiserver as the admin (or as whoever the
kubeconfig given names).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.world import World

START_TIMEOUT = 90.0


@dataclass
class Proc:
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "\n".join(self.lines[-200:])

    def said(self, fragment: str) -> bool:
        return any(fragment in line for line in self.lines)


async def _drain(proc: Proc) -> None:
    assert proc.process.stderr is not None
    async for raw in proc.process.stderr:
        proc.lines.append(raw.decode(errors="replace").rstrip())


def write_config(world: World, path: Path, **overrides: Any) -> Path:
    """The world's agent configuration (`World.config_data`) as a config file."""
    data = world.config_data(**overrides)
    data.pop("api_key", None)  # from the environment, as a deployment passes it
    path.write_text(yaml.safe_dump(data))
    return path


@contextlib.asynccontextmanager
async def agent_process(
    world: World, config: Path, *, kubeconfig: Path | None = None
) -> AsyncIterator[Proc]:
    """A running `launch-agent run`; SIGKILLed on exit if it still runs."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    environ["WANDB_API_KEY"] = world.wandb.api_key
    environ["NETRC"] = os.devnull
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "launch_agent",
        "run",
        "--config",
        str(config),
        "--kubeconfig",
        str(kubeconfig or world.kubeconfig),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    proc = Proc(process)
    reader = asyncio.create_task(_drain(proc), name="agent-stderr")
    try:
        yield proc
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await asyncio.wait_for(reader, 10)
