"""The holes the red-team audit closed, through the running agent (docs/security.md, "Every
submitter-controlled value"): each hostile item fails in W&B naming its runSpec path, nothing
is created for it, and the ordinary items around it run.

- a run id holding a newline and a fake log line (it was logged with %s after the create);
- a 300,000-character entity (it filled the workload's annotations past 256 KiB: the API
  server's 422 named `metadata.annotations`, not the runSpec);
- a label value the API server refuses (`team: a b`; the same 422), and an env name it
  refuses (a fullwidth `ＷANDB_API_KEY`);
- NUL in a run name or a layer's env value (runc cannot start such a process: the pod would
  never run, with no reason the submitter sees; the sandbox starts it);
- a 300,000-character job name with no builder configured (the refusal quoted all of it);
- a 900 KB run name on a PyTorchJob, copied into both replica templates: 1.8 MB, over etcd's
  1.5 MiB, which kube-apiserver answers with a 500 that a client retries (the sandbox stores
  any size, so here the old agent simply created it).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import BASIC_SPEC, CRDS, Env, pytorch_spec, run_spec, until

OPEN_SPEC = BASIC_SPEC.replace("name: basic", "name: open").replace("[q1]", "[q-open]")
OPEN_SPEC = OPEN_SPEC[: OPEN_SPEC.index("  overridable:")] + '  overridable: ["**"]\n'
DDP_SPEC = pytorch_spec(worker=True)
FORGED = "\n2026-12-01 00:00:00,000 ERROR   launch_agent.runtime.dispatcher: forged"


def _env(entry: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": [{"name": "main", "env": [entry]}]}}}}


# (id, queue, runSpec changes, message fragments)
HOSTILE: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("run-id-forges-a-log-line", "q1", {"run_id": "abc" + FORGED}, ["runSpec.run_id", "control"]),
    ("entity-300k", "q1", {"entity": "e" * 300_000}, ["runSpec.entity", "at most 128"]),
    (
        "label-value-with-a-space",
        "q-open",
        {"resource_args": {"kubernetes": {"metadata": {"labels": {"team": "a b"}}}}},
        ['runSpec.resource_args.kubernetes.metadata.labels["team"]', "not a valid label value"],
    ),
    (
        "env-name-look-alike",
        "q-open",
        {"resource_args": {"kubernetes": _env({"name": "\uff37ANDB_API_KEY", "value": "x"})}},
        ["containers[main].env[\uff37ANDB_API_KEY]", "not a valid env var name"],
    ),
    (
        "env-value-nul",
        "q-open",
        {"resource_args": {"kubernetes": _env({"name": "MODE", "value": "a\x00b"})}},
        ["containers[main].env[MODE].value", "NUL"],
    ),
    ("run-name-nul", "q1", {"name": "run\x00x"}, ["runSpec.name", "NUL"]),
    (
        "job-name-300k-without-a-builder",
        "q1",
        {"docker": None, "job": "j" * 300_000},
        ["needs an image build", "(300,002 characters)"],
    ),
    (
        "pytorchjob-over-etcd-limit",
        "q-ddp",
        {"name": "n" * 900_000, "overrides": {}},
        ["runSpec.name", "PyTorchJob would be 1,8", "2 pod templates", "1.5 MiB"],
    ),
]


@pytest.mark.parametrize(
    ("queue", "changes", "fragments"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE]
)
async def test_audited_hole_fails_in_wandb_and_the_agent_goes_on(
    env: Env,
    caplog: pytest.LogCaptureFixture,
    queue: str,
    changes: dict[str, Any],
    fragments: list[str],
) -> None:
    caplog.set_level(logging.INFO, logger="launch_agent")
    await env.kube.load_crds_from(CRDS)
    (Path(env.specs_dir) / "open.yaml").write_text(OPEN_SPEC)
    (Path(env.specs_dir) / "ddp.yaml").write_text(DDP_SPEC)
    for name in ("q-open", "q-ddp"):
        env.state.add_queue(name)
    before = env.push(run_spec("good-before"))
    bad = env.push({**run_spec("bad-1"), **changes}, queue=queue)
    after = env.push(run_spec("good-after"))
    async with env.running(env.agent(env.config(queues=["q1", "q-open", "q-ddp"]))) as agent:
        await until(lambda: bad.state is ItemState.FAILED, within=30, message="hostile failed")
        await until(
            lambda: before.state is ItemState.CLAIMED and after.state is ItemState.CLAIMED,
            within=30,
            message="the ordinary items claimed",
        )
        exposition = generate_latest(agent.metrics.registry).decode()
    # Metric label values are the agent's own words (queues, kinds, stages, reasons): nothing
    # the submitter wrote becomes a series, so hostile items cannot grow the series count.
    values = set(re.findall(r'="((?:[^"\\]|\\.)*)"', exposition))
    odd = {v for v in values if not re.fullmatch(r"[A-Za-z0-9_.:/+ -]{0,63}", v)}
    assert values and not odd, odd
    failures = re.findall(r"launch_agent_failures_total\{([^}]*)\}", exposition)
    assert failures in (
        ['reason="malformed",stage="agent"'],
        ['reason="render",stage="agent"'],
        ['reason="build_not_configured",stage="build"'],
    )
    assert bad.failure is not None
    assert bad.failure.stage == ("build" if "job" in changes else "agent")
    for fragment in fragments:
        assert fragment in bad.failure.message, bad.failure.message[:2000]
    assert len(bad.failure.message) < 10_000  # the reason, not the value echoed back
    runs = sorted(j["metadata"]["labels"]["wandb.ai/run-id"] for j in env.jobs())
    assert runs == ["good-after", "good-before"]
    assert env.kube.objects.list("pytorchjobs", namespace="default") == []
    # No record, whatever it says, carries the forged line as a line of its own.
    assert not [r for r in caplog.records if FORGED in r.getMessage()]
