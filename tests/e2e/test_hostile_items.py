"""1,000 hostile items between ordinary ones, fed to the running agent.

The hostile items come from a fixed seed: a mix of the attack classes of the security review
(command injection through git sources, type changes that slip past the allow-list, `$(...)`
expansion of the API key, Secret and token reads, pod templates outside enforcement, `..` in
host paths, legacy seccomp annotations, capabilities as a string, reserved labels, deep and
huge runSpecs) and layers drawn from the real schemas (`tests/hostile.py`). Every example queue
spec serves a queue of its own that grants `**` (anything), plus one with narrow grants, so
most of the layers reach the renderer instead of stopping at the policy.

What must hold:

- every hostile item ends in W&B either failed with a clear message, or acknowledged with a
  created workload that the independent checker (`tests/pss_checker.py`) finds safe;
- the agent keeps running: its run task never ends, the supervisor is never asked to stop, and
  it registers with W&B once;
- every ordinary item's workload is created and succeeds;
- nothing is left pending or leased at the end.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests import hostile
from tests.e2e.conftest import CRDS, Env, run_spec, until
from tests.pss_checker import Allowed, violations

SEED = 20261201
HOSTILE = 1000
ORDINARY = 20
API_KEY_SECRET = "wandb-api-key-test-agent"  # the agent's name is test-agent
PLURALS = (
    "jobs",
    "jobsets",
    "pytorchjobs",
    "trainjobs",
    "leaderworkersets",
    "rayjobs",
    "jobs.batch.volcano.sh",
)
SANDBOX_TOO_SLOW = ("huge-config",)  # see tests/hostile.py; covered at render level
SIMULATION_CANNOT_HOLD = ("jobset-gke", "leaderworkerset", "volcano-job", "rayjob")
CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "items"


def _corpus_items() -> list[tuple[str, str, dict[str, Any]]]:
    """`tests/corpus/items/*.yaml` cases whose input is a runSpec, if that corpus exists."""
    out = []
    for path in sorted(CORPUS.glob("*.yaml")) if CORPUS.is_dir() else []:
        if ".input." in path.name:
            continue  # a raw-text input (a YAML tag, an alias bomb) for its case's loader test
        case = yaml.safe_load(path.read_text())
        spec = case.get("input", {}).get("runSpec") if isinstance(case, dict) else None
        if isinstance(spec, dict):
            out.append((f"corpus:{path.stem}", "open-job", spec))
    return out


@dataclass
class Hostile:
    cls: str
    queue: str
    spec: dict[str, Any]


def hostile_items(specs: dict[str, dict[str, Any]]) -> list[Hostile]:
    ch = hostile.RandomChooser(SEED, ints=(0, 1, -1, 2, 3))
    out = [Hostile(c, q, s) for c, q, s in _corpus_items()]
    fixed = [
        (cls, q, make)
        for cls, makers in hostile.ATTACKS.items()
        for q, make in makers
        if q in specs and cls not in SANDBOX_TOO_SLOW
    ]
    while len(out) < HOSTILE:
        if ch.chance(45):
            cls, queue, make = ch.pick(fixed)
            out.append(Hostile(cls, queue, make(ch)))
        else:
            queue, spec = hostile.schema_item(ch, specs)
            out.append(Hostile(f"schema:{queue}", queue, spec))
    return out[:HOSTILE]


# ----------------------------------------------------------------------------- the test

# A failure message is clear when it says where (a runSpec path, a field) or what (the queue
# spec's refusal, the API server's, the build's), and is no bare Python exception.
CLEAR = re.compile(
    r"runSpec|refused|malformed|invalid|not allowed|may not|must|needs|is not|too |limit|exceed",
    re.IGNORECASE,
)
CRASH = re.compile(r"Traceback|\b(Type|Key|Attribute|Index|Value|Recursion)Error\b")


def _clear(message: str) -> bool:
    return bool(message.strip()) and CLEAR.search(message) is not None and not CRASH.search(message)


@pytest.fixture
async def hostile_env(env: Env) -> tuple[Env, dict[str, dict[str, Any]]]:
    await env.kube.load_crds_from(CRDS)
    # The kinds Kueue can suspend are created suspended: nothing runs the hostile workloads,
    # the checker reads them. The sandbox's JobSet, LeaderWorkerSet, Volcano and RayJob
    # operators create children even then (LWS and Volcano cannot be suspended) and their
    # loop stops at the first child the API server refuses, so those kinds are covered by
    # the render-level tests (tests/unit/render/test_hostile_properties.py) instead.
    specs = hostile.queue_specs(kueue="hostile", skip=SIMULATION_CANNOT_HOLD)
    for queue, raw in specs.items():
        (env.specs_dir / f"{queue}.yaml").write_text(yaml.safe_dump(raw))
        env.state.add_queue(queue)
    return env, specs


def _workloads(env: Env) -> dict[str, list[dict[str, Any]]]:
    by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for plural in PLURALS:
        for obj in env.kube.objects.list(plural, namespace="default"):
            rqi = (obj["metadata"].get("annotations") or {}).get(
                "launch-agent.io/run-queue-item-id"
            )
            if rqi:
                by_item[rqi].append(obj)
    return by_item


def _judge(
    items: list[tuple[Hostile, RunQueueItem]],
    workloads: dict[str, list[dict[str, Any]]],
    allowed: dict[str, Allowed],
) -> dict[str, list[str]]:
    """Class → what went wrong with its items (runs in a thread: a thousand checks)."""
    wrong: dict[str, list[str]] = defaultdict(list)
    for h, item in items:
        if item.state is ItemState.FAILED:
            message = item.failure.message if item.failure else ""
            if not _clear(message):
                wrong[h.cls].append(f"{item.id}: unclear failure {message[:200]!r}")
        elif item.state is ItemState.CLAIMED:
            created = workloads.get(item.id, [])
            if not created:
                wrong[h.cls].append(f"{item.id}: acknowledged without a workload")
            for w in created:
                for v in violations(w, allowed=allowed[h.queue])[:3]:
                    wrong[h.cls].append(f"{item.id}: {v}")
        else:
            wrong[h.cls].append(f"{item.id}: still {item.state} after {item.pops} pop(s)")
    return wrong


async def test_hostile_items_fail_clearly_or_run_safely(
    hostile_env: tuple[Env, dict[str, dict[str, Any]]],
) -> None:
    env, specs = hostile_env
    generated = await asyncio.to_thread(hostile_items, specs)
    allowed = {
        q: Allowed.from_queue_spec(raw, api_key_secret=API_KEY_SECRET) for q, raw in specs.items()
    }
    config = env.config(queues=["q1", *specs])
    started = time.monotonic()
    async with env.running(env.agent(config)) as agent:
        pushed: list[tuple[Hostile, RunQueueItem]] = []
        ordinary: list[RunQueueItem] = []
        step = HOSTILE // ORDINARY
        for start in range(0, HOSTILE, step):
            for h in generated[start : start + step]:
                pushed.append((h, env.push(h.spec, queue=h.queue)))
                await asyncio.sleep(0)  # one push per loop turn: the agent keeps working
            ordinary.append(env.push(run_spec(f"ordinary-{len(ordinary)}")))
            await asyncio.sleep(0.05)  # batches arrive while the agent works
        everything = [i for _, i in pushed] + ordinary

        def settled() -> bool:
            return all(i.state in (ItemState.CLAIMED, ItemState.FAILED) for i in everything)

        settled_in_time = True
        try:
            await until(settled, within=60, message="every item claimed or failed")
        except AssertionError:
            settled_in_time = False
        dispatched = time.monotonic() - started

        failures: list[str] = []
        # The agent never stopped or restarted while it took all of that.
        if agent.supervisor.stopping.is_set():
            failures.append("the agent was asked to stop")
        if len(env.state.agents) != 1:
            failures.append(f"the agent registered {len(env.state.agents)} times")

        # Read and judged in a thread: a thousand workloads are too much for one loop turn.
        workloads = await asyncio.to_thread(_workloads, env)
        wrong = await asyncio.to_thread(_judge, pushed, workloads, allowed)
        classes = Counter(h.cls for h, _ in pushed)
        for cls, problems in sorted(wrong.items()):
            failures.append(
                f"{cls}: {len(problems)} problem(s) in {classes[cls]} item(s):\n    "
                + "\n    ".join(problems[:4])
            )
        if not settled_in_time:
            failures.append("items were left pending or leased after 60 s")
        if dispatched > 90:
            failures.append(f"dispatching took {dispatched:.0f} s")

        not_claimed = [
            (i.id, i.state, i.failure) for i in ordinary if i.state is not ItemState.CLAIMED
        ]
        if not_claimed:
            failures.append(f"ordinary items not claimed: {not_claimed}")
        else:
            try:
                await until(
                    lambda: all(agent.runs.get(i.id) is None for i in ordinary),
                    # Small steps: each call steps a thousand workloads in one loop turn, and
                    # 30 s at a time could take >100 ms of CPU there (the guardrail's limit).
                    advance=lambda: env.advance(5),
                    message="every ordinary run finished",
                )
            except AssertionError as exc:
                failures.append(str(exc))
            failed = [(i.id, i.failure) for i in ordinary if i.failure is not None]
            if failed:
                failures.append(f"ordinary runs failed: {failed}")
        assert not failures, "\n".join(failures)
