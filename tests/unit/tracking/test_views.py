"""The typed metadata view every layer reads objects through: it never raises, and a missing
or mistyped field reads as absent, in the run records, the informers' cache and the builder."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.adapters.builder import owner_job
from launch_agent.adapters.kube.cache import key_of, version_of
from launch_agent.model import labels as L
from launch_agent.runtime.runs import RunRecord, item_of, reported
from launch_agent.tracking.views import Meta, ObjectBody


def body(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta}


def test_reads_the_fields_of_a_well_formed_object() -> None:
    obj: ObjectBody = {
        "metadata": {
            "name": "run-1",
            "namespace": "ml",
            "resourceVersion": "42",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"a": "1"},
            "annotations": {"b": "2"},
            "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}],
        }
    }
    meta = Meta(obj)
    assert meta.present
    assert (meta.name, meta.namespace, meta.resource_version) == ("run-1", "ml", "42")
    assert meta.creation_timestamp == "2026-01-02T03:04:05Z"
    assert meta.label("a") == "1" and meta.annotation("b") == "2"
    assert meta.label("missing") is None
    assert meta.controller("Job") == "j" and meta.controller("JobSet") is None


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "a string",
        {},
        {"metadata": None},
        {"metadata": ["not", "a", "mapping"]},
        {
            "metadata": {
                "name": 7,
                "namespace": None,
                "labels": ["x"],
                "annotations": "y",
                "ownerReferences": ["z", 3, None],
            }
        },
    ],
)
def test_absent_or_mistyped_fields_read_as_absent(obj: object) -> None:
    meta = Meta(obj)
    assert (meta.name, meta.namespace, meta.resource_version) == ("", "", "")
    assert dict(meta.labels) == {} and dict(meta.annotations) == {}
    assert meta.label("x") is None and meta.annotation("y") is None
    assert meta.controller("Job") is None


def test_run_records_ignore_mistyped_metadata_instead_of_raising() -> None:
    # A list where a mapping belongs raised AttributeError in the hand-written readers.
    assert RunRecord.from_object(body(annotations=["x"], labels={})) is None
    assert item_of(body(annotations=["x"])) is None
    assert reported(body(annotations=["x"])) is False


def test_run_record_rebuilt_from_its_workload() -> None:
    obj = body(
        name="w",
        namespace="ml",
        labels={L.QUEUE: "q-label", L.RUN_ID: "r1"},
        annotations={L.RUN_QUEUE_ITEM_ID: "rqi-1", L.ENTITY: "e", L.PROJECT: "p"},
    )
    record = RunRecord.from_object(obj)
    assert record is not None
    assert (record.rqi_id, record.queue, record.entity, record.project) == (
        "rqi-1",
        "q-label",
        "e",
        "p",
    )
    assert (record.run_id, record.namespace, record.name, record.kind) == ("r1", "ml", "w", "Job")
    assert item_of(obj) == "rqi-1"
    assert not reported(obj)


def test_owner_job_skips_mistyped_owner_references() -> None:
    pod = body(ownerReferences=["junk", {"kind": "Job", "name": "b"}], labels={"job-name": "a"})
    # Not a controller reference, and junk beside it: the label names the Job.
    assert owner_job(pod) == "a"
    pod = body(ownerReferences=[{"kind": "Job", "name": "b", "controller": True}])
    assert owner_job(pod) == "b"
    assert owner_job(body()) is None


def test_cache_keys_and_versions() -> None:
    assert key_of(body(name="n", namespace="ns")) == ("ns", "n")
    assert key_of({"metadata": "junk"}) == ("", "")
    assert version_of(body(resourceVersion="9")) == "9"
    assert version_of({}) == ""
