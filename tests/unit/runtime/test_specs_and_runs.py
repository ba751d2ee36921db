"""The spec table's rules, directory scans, run records rebuilt from labels, and message clipping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.adapters.kube import KindNotInstalled
from launch_agent.model.queue_spec import Problem
from launch_agent.render.spec_load import load_queue_spec
from launch_agent.runtime.admission.slots import MaxJobs
from launch_agent.runtime.dispatcher import not_installed_message
from launch_agent.runtime.reporter import MAX_MESSAGE, clip
from launch_agent.runtime.runs import GONE_PODS, RunRecord, RunTable
from launch_agent.runtime.specs import Loaded, SpecTable, read_dir
from tests.e2e.conftest import BASIC_SPEC


def spec_for(*queues: str, name: str = "basic") -> Any:
    text = BASIC_SPEC.replace("[q1]", "[" + ", ".join(queues) + "]").replace(
        "name: basic", f"name: {name}"
    )
    return load_queue_spec(text)[0]


def ok(file: str, *queues: str) -> Loaded:
    return Loaded(file, f"digest-{file}-{'-'.join(queues)}", spec_for(*queues, name=file[:-5]))


def bad(file: str) -> Loaded:
    return Loaded(file, f"bad-{file}", None, (Problem("spec", "broken"),))


# (steps: list of (digests present, changed entries)), expected queue → file, refused files
TABLE = [
    ("one file", [(["a.yaml"], [ok("a.yaml", "q1")])], {"q1": "a.yaml"}, set()),
    (
        "invalid edit keeps the previous version",
        [(["a.yaml"], [ok("a.yaml", "q1")]), (["a.yaml"], [bad("a.yaml")])],
        {"q1": "a.yaml"},
        {"a.yaml"},
    ),
    (
        "valid edit replaces",
        [(["a.yaml"], [ok("a.yaml", "q1")]), (["a.yaml"], [ok("a.yaml", "q2")])],
        {"q2": "a.yaml"},
        set(),
    ),
    (
        "a queue served twice: the second file is refused",
        [(["a.yaml", "b.yaml"], [ok("a.yaml", "q1"), ok("b.yaml", "q1", "q2")])],
        {"q1": "a.yaml"},
        {"b.yaml"},
    ),
    (
        "a deleted file stops serving its queues",
        [(["a.yaml"], [ok("a.yaml", "q1")]), ([], [])],
        {},
        set(),
    ),
    ("a new invalid file serves nothing", [(["a.yaml"], [bad("a.yaml")])], {}, {"a.yaml"}),
]


@pytest.mark.parametrize(
    ("steps", "queues", "refused"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_spec_table(steps: list[Any], queues: dict[str, str], refused: set[str]) -> None:
    table = SpecTable()
    for present, changed in steps:
        digests = {f: table.known().get(f, "x") for f in present}
        for loaded in changed:
            digests[loaded.file] = loaded.digest
        table.apply(digests, changed)
    assert {q: f for q, (f, _) in table.by_queue.items()} == queues
    assert set(table.refused) == refused


def test_read_dir_skips_configmap_machinery_and_unchanged_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BASIC_SPEC)
    (tmp_path / "broken.yml").write_text("spec: [")
    (tmp_path / "notes.txt").write_text("not a spec")
    (tmp_path / "..data").mkdir()
    digests, changed = read_dir(tmp_path, {})
    assert sorted(digests) == ["a.yaml", "broken.yml"]
    by_file = {c.file: c for c in changed}
    assert by_file["a.yaml"].spec is not None
    assert by_file["broken.yml"].spec is None
    assert "invalid YAML" in str(by_file["broken.yml"].problems[0])
    again, changed = read_dir(tmp_path, digests)
    assert again == digests
    assert changed == []
    assert read_dir(tmp_path / "missing", {}) == ({}, [])


def test_run_record_is_rebuilt_from_a_workloads_labels() -> None:
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "basic-7",
            "namespace": "ml",
            "labels": {"launch-agent.io/run-id": "abc", "launch-agent.io/queue": "q1"},
            "annotations": {
                "launch-agent.io/run-queue-item-id": "UnVuUXVldWVJdGVtOjc=",
                "launch-agent.io/queue-name": "q1",
                "launch-agent.io/entity": "ent",
                "launch-agent.io/project": "proj",
            },
        },
    }
    record = RunRecord.from_object(obj)
    assert record is not None
    assert (record.rqi_id, record.queue, record.run_id) == ("UnVuUXVldWVJdGVtOjc=", "q1", "abc")
    assert (record.namespace, record.name, record.kind) == ("ml", "basic-7", "Job")
    # Whether the creator's ack reached W&B is unknown: W&B is asked before the clean-up.
    assert record.adopted and not record.acked
    assert record.label == "UnVuUXVldWVJdGVtOjc"
    assert RunRecord.from_object({"metadata": {"name": "x"}}) is None


def test_run_table_counts_and_forgets() -> None:
    changes: list[int] = []
    table = RunTable(lambda: changes.append(1))
    record = RunRecord("i1", "q", "e", "p", "r", "ns", "n", "batch/v1", "Job")
    assert table.add(record) is record
    assert table.add(RunRecord("i1", "q", "e", "p", "r", "ns", "n", "batch/v1", "Job")) is record
    table.dispatching = 2
    assert table.inflight == 3
    table.mark_finishing(record)
    assert table.inflight == 2
    table.remove(record)
    assert len(table) == 0
    assert table.finished_recently("i1")
    assert table.by_label(record.label) is None
    assert changes


def test_gone_pods_are_bounded() -> None:
    record = RunRecord("i1", "q", "e", "p", "r", "ns", "n", "batch/v1", "Job")
    for i in range(GONE_PODS + 5):
        record.pod_gone({"metadata": {"name": f"pod-{i}"}})
    assert len(record.gone_pods) == GONE_PODS
    assert f"pod-{GONE_PODS + 4}" in record.gone_pods


@given(st.text(max_size=3 * MAX_MESSAGE))
def test_clip_bounds_and_keeps_both_ends(text: str) -> None:
    out = clip(text)
    assert len(out) <= MAX_MESSAGE
    if len(text) <= MAX_MESSAGE:
        assert out == text
    else:
        assert out.startswith(text[: MAX_MESSAGE // 3])
        assert out.endswith(text[-100:])


@pytest.mark.parametrize(
    ("api_version", "kind", "hint"),
    [
        ("kubeflow.org/v1", "PyTorchJob", "install the Kubeflow training operator"),
        ("ray.io/v1", "RayJob", "install the KubeRay operator"),
        ("example.com/v1", "Thing", "serves the example.com API group"),
    ],
)
def test_not_installed_message(api_version: str, kind: str, hint: str) -> None:
    message = not_installed_message(KindNotInstalled(api_version, kind))
    assert message.startswith(f"{kind} ({api_version}) is not installed in this cluster: ")
    assert hint in message


@pytest.mark.parametrize(
    ("max_jobs", "inflight", "room"), [(-1, 100, None), (1, 0, 1), (1, 1, 0), (4, 1, 3), (2, 5, 0)]
)
def test_max_jobs_admission(max_jobs: int, inflight: int, room: int | None) -> None:
    assert MaxJobs(max_jobs).room(inflight) == room


@given(st.lists(st.tuples(st.sampled_from(["add", "finish", "remove"]), st.integers(0, 5))))
def test_inflight_counts_exactly_the_unfinished_records(ops: list[tuple[str, int]]) -> None:
    table = RunTable()
    records = {
        i: RunRecord(f"i{i}", "q", "e", "p", "r", "ns", f"n{i}", "batch/v1", "Job")
        for i in range(6)
    }
    for op, i in ops:
        record = table.get(f"i{i}")
        if op == "add":
            if record is None:
                records[i] = RunRecord(
                    f"i{i}", "q", "e", "p", "r", "ns", f"n{i}", "batch/v1", "Job"
                )
            table.add(records[i])
        elif op == "finish" and record is not None:
            table.mark_finishing(record)
        elif op == "remove" and record is not None:
            table.remove(record)
        assert table.inflight == sum(1 for r in table if not r.finishing)
