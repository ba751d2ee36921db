"""`QuotaAdmission` without a cluster: the decisions render applies (suspended, stamped) or the
refusal, and the pop caps
the poller gets per queue (queue specs loaded from a real directory)."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from launch_agent.commands.bench_quota_agent import measure
from launch_agent.model.config import AgentConfig
from launch_agent.model.run_item import parse_run_item
from launch_agent.quota import PodSet, RunState
from launch_agent.quota.requests import STAMP, QuotaStamp
from launch_agent.render.decisions import Admission, NotAdmitted
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.runtime.admission.quota import QuotaAdmission
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore
from launch_agent.runtime.startup import StartupError
from tests.e2e.conftest import BASIC_SPEC

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "queue-specs"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
G = 10**9

TREE: dict[str, Any] = {
    "root": {
        "name": "root",
        "min": {"cpu": 8},
        "max": {"cpu": 8},
        "children": [{"name": "a.1", "min": {"cpu": 4}}, {"name": "b.1", "min": {"cpu": 4}}],
    }
}


def spec_text(name: str, queues: list[str], leaf: str | None) -> str:
    text = BASIC_SPEC.replace("name: basic", f"name: {name}").replace(
        "[q1]", "[" + ", ".join(queues) + "]"
    )
    if leaf is not None:
        text = text.replace(
            "  namespace: default\n", f"  namespace: default\n  quota:\n    leaf: {leaf}\n"
        )
    return text


async def admission_for(
    tmp_path: Path, max_pending: int = 3, runs: RunTable | None = None
) -> QuotaAdmission:
    (tmp_path / "a.yaml").write_text(spec_text("team-a", ["qa1", "qa2"], "a.1"))
    (tmp_path / "b.yaml").write_text(spec_text("team-b", ["qb"], "b.1"))
    (tmp_path / "z.yaml").write_text(spec_text("team-z", ["qz"], "zz"))
    lws = (EXAMPLES / "leaderworkerset.yaml").read_text()
    (tmp_path / "lws.yaml").write_text(
        lws.replace(
            "  namespace: ml-training\n", "  namespace: ml-training\n  quota:\n    leaf: b.1\n"
        )
    )
    specs = SpecStore(tmp_path, Metrics())
    await specs.reload()
    config = AgentConfig.model_validate(
        {
            "max_jobs": -1,
            "quota": {"mode": "agent", "tree": TREE, "max_pending_per_leaf": max_pending},
        }
    )
    return QuotaAdmission.from_config(
        config, specs, runs if runs is not None else RunTable(), now=lambda: NOW
    )


RUN_SPEC: dict[str, Any] = {
    "entity": "ent",
    "project": "proj",
    "resource": "kubernetes",
    "docker": {"docker_image": "registry.example/img:1"},
    "priority": 1,
}


def admit(admission: QuotaAdmission, queue: str, rqi: str = "UnVuUXVldWVJdGVtOjE=") -> Admission:
    spec = admission.specs.for_queue(queue)
    assert spec is not None
    return admission.admit(rqi, queue, spec, RUN_SPEC)


def rendered(
    admission: QuotaAdmission, queue: str, rqi: str = "UnVuUXVldWVJdGVtOjE="
) -> dict[str, Any]:
    """The workload as the dispatcher creates it: rendered with the admission's decisions."""
    spec = admission.specs.for_queue(queue)
    assert spec is not None
    item = parse_run_item({"runQueueItemId": rqi, "runSpec": RUN_SPEC})
    decisions = admit(admission, queue, rqi)
    return render(
        spec, item, None, RenderSettings(), queue_name=queue, decisions=decisions
    ).workload


async def test_a_job_is_created_suspended_with_its_stamp(tmp_path: Path) -> None:
    admission = await admission_for(tmp_path)
    workload = rendered(admission, "qa2")
    assert workload["spec"]["suspend"] is True
    stamp = QuotaStamp.load(workload["metadata"]["annotations"][STAMP])
    assert stamp == QuotaStamp(
        "a.1", 3, Fraction(int(NOW.timestamp())), (PodSet(1, {"cpu": G, "memory": 1024**3 * G}),)
    )


async def test_what_the_quota_cannot_hold_back_is_refused(tmp_path: Path) -> None:
    admission = await admission_for(tmp_path)
    with pytest.raises(NotAdmitted) as caught:
        admit(admission, "lws-multihost")
    refusal = caught.value.message
    assert caught.value.reason == "quota"
    assert refusal.startswith("queue spec 'lws-multihost' (lws.yaml): quota.mode agent holds")
    assert "has no suspend field" in refusal and "quota.mode kueue or off" in refusal
    with pytest.raises(NotAdmitted) as caught:
        admit(admission, "qz")
    assert caught.value.message == (
        "queue spec 'team-z' (z.yaml): spec.quota.leaf: 'zz' is not a leaf of quota.tree"
        " (leaves: a.1, b.1)"
    )


async def test_pop_caps_share_each_leaf_and_count_held_and_pending_runs(tmp_path: Path) -> None:
    admission = await admission_for(tmp_path, max_pending=3)
    assert admission.room(inflight=10_000) is None
    queues = ["qa1", "qa2", "qb", "qz", "unserved"]
    caps = [admission.queue_caps(queues) for _ in range(2)]
    # a.1's 3 slots are shared by qa1 and qa2, the remainder rotating; unknown leaves pop 1.
    assert {q: caps[0][q] for q in ("qb", "qz", "unserved")} == {"qb": 3, "qz": 1, "unserved": 1}
    assert sorted([caps[0]["qa1"], caps[0]["qa2"]]) == [1, 2]
    assert caps[0]["qa1"] != caps[1]["qa1"]
    with admission.holding("qb", "x"), admission.holding("qb", "y"):
        assert admission.queue_caps(queues)["qb"] == 1
        with admission.holding("qb", "y"):  # offered again while its dispatch runs
            assert admission.queue_caps(queues)["qb"] == 1
        assert admission.queue_caps(queues)["qb"] == 1
    assert admission.queue_caps(queues)["qb"] == 3
    stamp = QuotaStamp("b.1", 0, Fraction(0), (PodSet(1, {"cpu": 5 * G}),))
    for rid in ("r1", "r2", "r3"):
        admission.engine.submit(stamp.spec(rid))
    admission.engine.cycle()
    assert [admission.engine.runs[r].state for r in ("r1", "r2", "r3")] == [
        RunState.ADMITTED,
        RunState.PENDING,
        RunState.PENDING,
    ]
    assert admission.queue_caps(queues)["qb"] == 1
    with admission.holding("qb", "x"):
        assert admission.queue_caps(queues)["qb"] == 0


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        (None, "quota.tree: quota.mode is agent but no tree is configured"),
        (
            {"root": {**TREE["root"], "children": [{"name": "a.1", "min": {"cpu": 9}}]}},
            "quota.tree.root.min.cpu: the children of 'root' guarantee 9 cpu in total",
        ),
        (
            {"root": {**TREE["root"], "children": [{"name": "a.1", "max": {"gpu": 1}}]}},
            "quota.tree.root.children[0].max.gpu: resource 'gpu' is not declared in the root's max",
        ),
    ],
)
async def test_an_invalid_tree_fails_the_start(tmp_path: Path, tree: Any, expected: str) -> None:
    config = AgentConfig.model_validate({"quota": {"mode": "agent", "tree": tree}})
    with pytest.raises(StartupError) as caught:
        QuotaAdmission.from_config(
            config, SpecStore(tmp_path, Metrics()), RunTable(), now=lambda: NOW
        )
    assert expected in str(caught.value)


def record_for(rqi: str, workload: dict[str, Any]) -> RunRecord:
    meta = workload["metadata"]
    return RunRecord(
        rqi_id=rqi,
        queue="qa1",
        entity="ent",
        project="proj",
        run_id=rqi,
        namespace="default",
        name=meta["name"],
        api_version="batch/v1",
        kind="Job",
        last=workload,
    )


async def test_runs_are_submitted_in_stamp_order_whatever_order_their_creates_end(
    tmp_path: Path,
) -> None:
    runs = RunTable()
    admission = await admission_for(tmp_path, runs=runs)
    await admission.rebuild()
    records = []
    for rqi in ("first", "second", "third"):
        records.append(runs.add(record_for(rqi, rendered(admission, "qa1", rqi))))
    stamps = [QuotaStamp.load((r.last or {})["metadata"]["annotations"][STAMP]) for r in records]
    assert stamps[0].enqueued < stamps[1].enqueued < stamps[2].enqueued
    slots = admission.queue_caps(["qa1"])["qa1"]
    with admission.holding("qa1", "third"):
        admission.created(records[2])
    assert admission.engine.runs == {}, "waits for the earlier dispatches"
    assert admission.queue_caps(["qa1"])["qa1"] == slots - 1, "and keeps its pending slot"
    with admission.holding("qa1", "second"):
        pass  # the second dispatch failed after its stamp: it is skipped
    assert admission.engine.runs == {}
    assert admission.queue_caps(["qa1"])["qa1"] == slots - 1
    admission.created(records[0])
    assert list(admission.engine.runs) == ["first", "third"]
    assert admission.queue_caps(["qa1"])["qa1"] == slots - 2, "two pending runs, no holds"
    first, third = (admission.engine.runs[r] for r in ("first", "third"))
    assert first.enqueued < third.enqueued


async def test_the_rebuild_benchmark_charges_what_was_admitted() -> None:
    result = await measure(leaves=8, running=40, waiting=300, hours=2)  # a full tree
    assert result["engine_runs"] == 340
    assert result["root_cpu"] == 40, "every admitted run charged, no waiting run admitted"
    assert set(result) >= {"rebuild_seconds", "longest_callback_ms"}
