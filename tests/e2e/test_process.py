"""`launch-agent run` as a process: start-up errors, SIGTERM, and SIGKILL at every step of a run.

The sandbox servers run in the test; the agent is a real subprocess talking HTTP to them. A
crash is a SIGKILL while the agent is held at one step by a fault delay on the sandbox side:
after the pop (the create is in flight), after the create (the ack is in flight), after the ack.
A second process then starts with the same configuration; whatever the step, the item ends with
exactly one workload and in the right state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import BASIC_SPEC, Env, run_spec, until

START_TIMEOUT = 60.0


@dataclass
class Proc:
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "\n".join(self.lines)


async def _drain(proc: Proc) -> None:
    assert proc.process.stderr is not None
    async for raw in proc.process.stderr:
        proc.lines.append(raw.decode(errors="replace").rstrip())


def write_config(env: Env, path: Path, **overrides: object) -> Path:
    data: dict[str, object] = {
        "queues": ["q1"],
        "entity": "ent",
        "base_url": env.wandb.url,
        "queue_specs_dir": str(env.specs_dir),
        "namespaces": ["default"],
        "max_jobs": -1,
        "agent_name": "proc-agent",
        "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
        "health": {"host": "127.0.0.1", "port": 0},
        "tracking": {"stop_check_seconds": 0.2},
        "shutdown_grace_seconds": 3,
    }
    data.update(overrides)
    path.write_text(yaml.safe_dump(data))
    return path


@contextlib.asynccontextmanager
async def agent_process(
    env: Env, config: Path, *, api_key: str | None = None
) -> AsyncIterator[Proc]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    environ["WANDB_API_KEY"] = api_key or env.wandb.api_key
    environ["NETRC"] = os.devnull
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "launch_agent",
        "run",
        "--config",
        str(config),
        "--kubeconfig",
        str(env.kubeconfig),
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


async def test_a_key_wandb_refuses_fails_at_once_naming_the_url(env: Env, tmp_path: Path) -> None:
    config = write_config(env, tmp_path / "c.yaml")
    async with agent_process(env, config, api_key="f" * 40) as proc:
        code = await asyncio.wait_for(proc.process.wait(), START_TIMEOUT)
    assert code == 1
    assert env.wandb.url in proc.output()
    assert "API key" in proc.output()


async def test_missing_queues_are_listed_by_name(env: Env, tmp_path: Path) -> None:
    # Specs serve them (else the agent refuses to start for that); W&B has no such queues.
    served = BASIC_SPEC.replace("name: basic", "name: more").replace("[q1]", "[nope, gone]")
    (env.specs_dir / "more.yaml").write_text(served)
    config = write_config(env, tmp_path / "c.yaml", queues=["q1", "nope", "gone"])
    async with agent_process(env, config) as proc:
        code = await asyncio.wait_for(proc.process.wait(), START_TIMEOUT)
    assert code == 1
    assert "nope, gone" in proc.output()


async def test_an_unusable_kubeconfig_is_one_clear_line(env: Env, tmp_path: Path) -> None:
    config = write_config(env, tmp_path / "c.yaml", log_format="json")
    env.kubeconfig = tmp_path / "broken-kubeconfig"
    env.kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    async with agent_process(env, config) as proc:
        code = await asyncio.wait_for(proc.process.wait(), START_TIMEOUT)
    assert code == 1
    assert proc.lines[-1].startswith("error: cannot load the Kubernetes configuration from")
    assert "Traceback" not in proc.output()


async def test_sigterm_reports_killed_and_leaves_workloads_running(
    env: Env, tmp_path: Path
) -> None:
    env.cluster.script("launch-agent.io/run-id=t1", "succeed after=1h")
    item = env.push(run_spec("t1"))
    config = write_config(env, tmp_path / "c.yaml")
    async with agent_process(env, config) as proc:
        await until(lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack")
        proc.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.process.wait(), 30)
    assert code == 0, proc.output()
    assert [a.status for a in env.state.agents.values()] == ["KILLED"]
    assert len(env.jobs()) == 1, "the workload keeps running for the next start"


CRASH_POINTS = [
    # (where the agent is held when it is killed, the sandbox fault that holds it there)
    ("pop-in-flight", "wandb", "popFromRunQueue"),
    ("create-in-flight", "kube", "POST jobs"),
    ("ack-in-flight", "wandb", "ackRunQueueItem"),
    ("after-ack", None, None),
]


@pytest.mark.parametrize(
    ("point", "server", "route"), CRASH_POINTS, ids=[c[0] for c in CRASH_POINTS]
)
async def test_sigkill_at_each_step_then_restart_gives_exactly_one_workload(
    env: Env, tmp_path: Path, point: str, server: str | None, route: str | None
) -> None:
    env.cluster.script("launch-agent.io/run-id=c1", "succeed after=20s")
    item = env.push(run_spec("c1"))
    config = write_config(env, tmp_path / "c.yaml")
    rule = None
    if server is not None and route is not None:
        faults = env.kube.faults if server == "kube" else env.wandb.faults
        rule = faults.add(FaultRule(route, delay=4.0, times=1))
    async with agent_process(env, config) as proc:
        if rule is not None:
            await until(lambda: rule.fired == 1, within=START_TIMEOUT, message=f"held at {point}")
            await asyncio.sleep(0.3)
        else:
            await until(lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT)
        proc.process.kill()
    if rule is not None:
        faults.remove(rule)
    async with agent_process(env, config) as proc:
        await until(
            lambda: item.state is ItemState.CLAIMED,
            within=START_TIMEOUT,
            message=f"claimed after restart ({point})\n{proc.output()}",
        )
        assert len(env.jobs()) == 1
        env.advance(30)
        await until(lambda: env.jobs() and "Complete" in str(env.jobs()[0].get("status")))
        proc.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.process.wait(), 30)
    assert item.state is ItemState.CLAIMED
    assert item.failure is None
    assert item.associated_run_id == "c1"
    assert len(env.jobs()) == 1


@pytest.mark.long
async def test_the_process_outlives_a_60_second_wandb_outage(env: Env, tmp_path: Path) -> None:
    """60 s of 503s with the default retry policy: W&B's agent exits after ~19 s (reference
    §1.7). This process pauses popping and reporting, keeps tracking, then pops the item pushed
    during the outage and reports the failure that happened during it."""
    config = write_config(env, tmp_path / "c.yaml")
    env.cluster.script("launch-agent.io/run-id=doomed", "oomkilled after=2s")
    first = env.push(run_spec("before"))
    doomed = env.push(run_spec("doomed"))
    async with agent_process(env, config) as proc:
        await until(
            lambda: first.state is ItemState.CLAIMED and doomed.state is ItemState.CLAIMED,
            within=START_TIMEOUT,
            message="ack",
        )
        env.wandb.faults.outage(60.0, status=503)
        during = env.push(run_spec("during"))
        env.advance(5)  # the doomed run is OOMKilled while W&B is down
        await asyncio.sleep(60.0)
        assert proc.process.returncode is None, proc.output()
        assert during.state is ItemState.PENDING
        assert doomed.state is ItemState.CLAIMED, "no report can have reached W&B yet"
        await until(lambda: during.state is ItemState.CLAIMED, within=60, message="resumed")
        await until(lambda: doomed.state is ItemState.FAILED, within=60, message="late report")
        assert doomed.failure is not None
        assert "OOMKilled" in doomed.failure.message
        proc.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.process.wait(), 30) == 0
    during_jobs = env.kube.objects.list(
        "jobs", namespace="default", label_selector="launch-agent.io/run-id=during"
    )
    assert len(during_jobs) == 1
