"""Status dumps in the shape and words the upstream controllers write, replayed through
`launch-agent diagnose -f` (the tracker's own `assess`), each against the verdict next to it.

Every `tests/fixtures/upstream/<kind>/<case>.json` is a `v1 List` as `kubectl get
<workload>,pods,events -o json` prints it, naming its upstream source in `_source`, the time
to judge it at in `_now` and extra flags in `_args`; `<case>.expected.json` is exactly what
`-o json` must print. The rest of this module is the robustness of `-f`: any order, both Event
APIs, missing fields, and bad input as a clear error with exit status 2.
"""

from __future__ import annotations

import io
import json
import random
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.cli import main
from launch_agent.tracking import assess
from launch_agent.tracking.dump import DumpError, items_of, select

UPSTREAM = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
CASES = sorted(p for p in UPSTREAM.glob("*/*.json") if not p.name.endswith(".expected.json"))
KINDS = ("job", "jobset", "pytorchjob", "trainjob", "leaderworkerset", "rayjob", "volcano")


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _diagnose(
    capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["diagnose", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and "-o" in argv else None), err


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _argv(path: Path, doc: dict[str, Any]) -> list[str]:
    return ["--now", doc["_now"], "-o", "json", *doc.get("_args", [])]


def test_every_kind_has_fixtures_and_there_are_enough() -> None:
    assert {p.parent.name for p in CASES} == set(KINDS)
    assert len(CASES) >= 60
    for path in CASES:
        assert path.with_name(path.stem + ".expected.json").is_file(), path
        assert _load(path).get("_source"), f"{path} names no upstream source"


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_fixture_verdict(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _load(path)
    expected = json.loads(path.with_name(path.stem + ".expected.json").read_text())
    code, got, err = _diagnose(capsys, "-f", str(path), *_argv(path, doc))
    assert code == 0, err
    assert got == expected
    assert got is not None and list(got) == ["state", "reason", "message", "pod", "container"]


@pytest.mark.parametrize("path", CASES[::7], ids=_case_id)
def test_order_of_the_list_does_not_matter(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _load(path)
    expected = json.loads(path.with_name(path.stem + ".expected.json").read_text())
    for seed in range(3):
        items = list(doc["items"])
        random.Random(seed).shuffle(items)
        shuffled = tmp_path / f"{seed}.json"
        shuffled.write_text(json.dumps({**doc, "items": items}))
        code, got, err = _diagnose(capsys, "-f", str(shuffled), *_argv(path, doc))
        assert code == 0, err
        assert got == expected


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = UPSTREAM / "job" / "failedcreate-quota-past-deadline.json"
    doc = _load(path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    code, got, err = _diagnose(capsys, "-f", "-", *_argv(path, doc))
    assert code == 0, err
    assert got is not None and got["state"] == "failed" and got["reason"] == "FailedCreate"
    assert "did not start within 30m: 9 FailedCreate events: Error creating:" in got["message"]


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    path = UPSTREAM / "job" / "blame-main-over-istio-137.json"
    assert main(["diagnose", "-f", str(path), "--now", _load(path)["_now"]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["STATE", "failed"]
    assert out[1].split() == ["REASON", "ExitCode"]
    assert out[3].split() == ["POD", "run-abc-x7k2p"]
    assert out[4].split() == ["CONTAINER", "main"]


def test_the_deadline_moves_with_now_and_start_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(UPSTREAM / "job" / "failedcreate-quota-before-deadline.json")
    early = _diagnose(capsys, "-f", path, "--now", "2026-11-30T12:00:00Z", "-o", "json")[1]
    late = _diagnose(capsys, "-f", path, "--now", "2026-11-30T12:21:00Z", "-o", "json")[1]
    short = _diagnose(
        capsys, "-f", path, "--now", "2026-11-30T12:00:00Z", "--start-timeout", "300", "-o", "json"
    )[1]
    assert early is not None and late is not None and short is not None
    assert (early["state"], late["state"], short["state"]) == ("starting", "failed", "failed")
    assert short["message"].startswith("Job run-abc did not start within 5m: 3 FailedCreate")


def test_a_config_file_sets_the_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "launch-config.yaml"
    config.write_text("tracking:\n  start_timeout_seconds: 60\n")
    path = str(UPSTREAM / "job" / "failedcreate-quota-before-deadline.json")
    code, got, err = _diagnose(
        capsys, "-f", path, "-c", str(config), "--now", "2026-11-30T12:00:00Z", "-o", "json"
    )
    assert code == 0, err
    assert got is not None and got["message"].startswith("Job run-abc did not start within 1m:")


def _bare(doc: dict[str, Any]) -> dict[str, Any]:
    """Only the fields a trimmed dump keeps: no uids, ownerReferences, timestamps or spec."""

    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            drop = {"uid", "ownerReferences", "resourceVersion", "spec", "qosClass", "imageID"}
            return {k: strip(v) for k, v in obj.items() if k not in drop}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    return {**doc, "items": [strip(i) for i in doc["items"]]}


@pytest.mark.parametrize(
    ("case", "state", "reason", "container"),
    [
        ("job/oomkilled", "failed", "OOMKilled", "main"),
        ("jobset/failed-jobs-oom", "failed", "OOMKilled", "main"),
        ("pytorchjob/oomkilled-master", "failed", "OOMKilled", "pytorch"),
        ("rayjob/worker-pull-not-found", "failed", "ImagePullBackOff", "ray-worker"),
        ("volcano/failed-all-pods-done", "failed", "ExitCode", "main"),
    ],
)
def test_pods_are_matched_by_labels_when_fields_are_missing(
    case: str,
    state: str,
    reason: str,
    container: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _load(UPSTREAM / f"{case}.json")
    trimmed = tmp_path / "trimmed.json"
    trimmed.write_text(json.dumps(_bare(doc)))
    code, got, err = _diagnose(capsys, "-f", str(trimmed), "--now", doc["_now"], "-o", "json")
    assert code == 0, err
    assert got is not None
    assert (got["state"], got["reason"], got["container"]) == (state, reason, container)


def test_pods_of_another_workload_are_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _load(UPSTREAM / "job" / "running.json")
    other = json.loads(json.dumps(_load(UPSTREAM / "job" / "oomkilled.json")["items"][1]))
    other["metadata"].update(name="other-x1", uid="pod-other", labels={"job-name": "other"})
    other["metadata"]["ownerReferences"][0].update(name="other", uid="uid-other")
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({**doc, "items": [*doc["items"], other]}))
    code, got, err = _diagnose(capsys, "-f", str(path), "--now", doc["_now"], "-o", "json")
    assert code == 0, err
    assert got == {
        "state": "running",
        "reason": None,
        "message": None,
        "pod": None,
        "container": None,
    }


def test_a_typed_list_and_a_single_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _load(UPSTREAM / "rayjob" / "retrying-is-not-final.json")
    single = tmp_path / "single.json"
    single.write_text(json.dumps(doc["items"][0]))
    code, got, err = _diagnose(capsys, "-f", str(single), "--now", doc["_now"], "-o", "json")
    assert code == 0, err
    assert got is not None and (got["state"], got["reason"]) == ("running", "Restarting")
    typed = tmp_path / "typed.json"
    typed.write_text(
        json.dumps({"apiVersion": "ray.io/v1", "kind": "RayJobList", "items": doc["items"]})
    )
    code, got, err = _diagnose(capsys, "-f", str(typed), "--now", doc["_now"], "-o", "json")
    assert code == 0, err
    assert got is not None and got["state"] == "running"


def test_kind_picks_one_of_several_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _load(UPSTREAM / "job" / "running.json")["items"][0]
    ray = json.loads(json.dumps(_load(UPSTREAM / "rayjob" / "complete-succeeded.json")["items"][0]))
    ray["metadata"]["name"] = "other"
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job, ray]}))
    code, _, err = _diagnose(capsys, "-f", str(path), "-o", "json")
    assert code == 2
    assert "several workloads in the input (Job/run-abc, RayJob/other): name one" in err
    assert "diagnose -f FILE [NAMESPACE/]NAME" in err
    code, got, err = _diagnose(capsys, "-f", str(path), "--kind", "rayjob", "-o", "json")
    assert code == 0, err
    assert got is not None and got["state"] == "succeeded"
    code, got, err = _diagnose(capsys, "-f", str(path), "other", "-o", "json")
    assert code == 0, err
    assert got is not None and got["state"] == "succeeded"


def test_a_name_picks_one_of_several_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kubectl get jobs,pods,events` lists every Job of the namespace: --kind cannot tell two
    Jobs apart, their name can, and the other Job's pods, Events and Workload are ignored."""
    running = _load(UPSTREAM / "job" / "running.json")
    oom = _load(UPSTREAM / "job" / "oomkilled.json")
    renamed = json.loads(
        json.dumps(oom["items"]).replace("run-abc", "run-xyz").replace('"abc"', '"xyz"')
    )
    path = tmp_path / "namespace.json"
    items = [*running["items"], *renamed]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    now = ["--now", running["_now"], "-o", "json"]
    code, _, err = _diagnose(capsys, "-f", str(path), *now)
    assert code == 2
    assert "several workloads in the input (Job/run-abc, Job/run-xyz): name one" in err
    code, got, err = _diagnose(capsys, "-f", str(path), "run-abc", *now)
    assert code == 0, err
    assert got is not None and got["state"] == "running"
    code, got, err = _diagnose(capsys, "-f", str(path), "ml/run-xyz", "--kind", "job", *now)
    assert code == 0, err
    assert got is not None and (got["state"], got["reason"]) == ("failed", "OOMKilled")
    assert got["pod"] is not None and got["pod"].startswith("run-xyz-")
    code, _, err = _diagnose(capsys, "-f", str(path), "other-ns/run-xyz", *now)
    assert code == 2
    assert "no workload named 'other-ns/run-xyz' in the input" in err


def test_a_workload_named_like_anothers_child_is_not_its_child(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Jobs `train` and `train-2` are siblings: only a JobSet's Jobs are named after it."""
    running = _load(UPSTREAM / "job" / "running.json")
    oom = _load(UPSTREAM / "job" / "oomkilled.json")
    renamed = json.loads(
        json.dumps(oom["items"]).replace("run-abc", "run-abc-2").replace('"abc"', '"abc2"')
    )
    path = tmp_path / "siblings.json"
    items = [*running["items"], *renamed]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, _, err = _diagnose(capsys, "-f", str(path), "--now", running["_now"], "-o", "json")
    assert code == 2
    assert "several workloads in the input (Job/run-abc, Job/run-abc-2)" in err


def test_a_rayjobs_submitter_job_is_not_the_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """KubeRay's K8sJobMode submitter is a batch Job named after the RayJob."""
    ray = _load(UPSTREAM / "rayjob" / "retrying-is-not-final.json")["items"][0]
    submitter = json.loads(json.dumps(_load(UPSTREAM / "job" / "running.json")["items"][0]))
    path = tmp_path / "ray.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [submitter, ray]}))
    code, got, err = _diagnose(capsys, "-f", str(path), "-o", "json")
    assert code == 0, err
    assert got is not None and (got["state"], got["reason"]) == ("running", "Restarting")


@pytest.mark.parametrize(
    ("content", "argv", "words"),
    [
        ("{not json", [], ["error: ", "dump.json:1:2: invalid JSON"]),
        ("[1, 2]", [], ["expected a JSON object"]),
        ('{"kind": "List", "items": {"a": 1}}', [], ["items: expected a list"]),
        ('{"kind": "List", "items": [1]}', [], ["items[0]: expected an object"]),
        ('{"kind": "List", "items": [{"metadata": {}}]}', [], ["items[0]: no kind"]),
        ('{"kind": "List", "items": [{"kind": "Pod", "apiVersion": "v1"}]}', [], ["no workload"]),
        ('{"kind": "List", "items": []}', [], ["no workload"]),
        ('{"kind": "Job", "apiVersion": "batch/v1", "a": 1, "a": 2}', [], ["duplicate key"]),
        ('{"kind": "Job", "apiVersion": "batch/v1"}', ["--kind", "cronjob"], ["unknown kind"]),
        ('{"kind": "Job", "apiVersion": "batch/v1"}', ["--kind", "rayjob"], ["no RayJob"]),
        ('{"kind": "Job", "apiVersion": "batch/v1"}', ["--now", "yesterday"], ["--now"]),
        ('{"kind": "Job", "apiVersion": "batch/v1"}', ["--start-timeout", "0"], ["> 0"]),
    ],
)
def test_bad_input_is_a_clear_error_with_status_2(
    content: str,
    argv: list[str],
    words: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "dump.json"
    path.write_text(content)
    code = main(["diagnose", "-f", str(path), *argv])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    for word in words:
        assert word in err


def test_a_missing_file_and_missing_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", "-f", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["diagnose"]) == 2
    assert "NAMESPACE/NAME or -f FILE" in capsys.readouterr().err
    assert main(["diagnose", "just-a-name"]) == 2
    assert "expected NAMESPACE/NAME" in capsys.readouterr().err


def test_a_partial_workload_never_crashes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fields of the wrong type, as a CRD without status validation allows, read as absent."""
    mangled = [
        {"kind": "Job", "apiVersion": "batch/v1", "metadata": None, "status": []},
        {"kind": "RayJob", "apiVersion": "ray.io/v1", "status": {"jobDeploymentStatus": 3}},
        {"kind": "JobSet", "apiVersion": "jobset.x-k8s.io/v1alpha2", "status": {"conditions": "x"}},
        {
            "kind": "List",
            "items": [
                {"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": "j"}},
                {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": {"labels": {"job-name": "j"}},
                    "status": {"containerStatuses": [None, {"state": {"waiting": "x"}}]},
                },
                {"kind": "Event", "apiVersion": "v1", "type": "Warning", "count": "many"},
                {
                    "kind": "Event",
                    "apiVersion": "events.k8s.io/v1",
                    "type": "Warning",
                    "regarding": "x",
                    "reason": "FailedCreate",
                },
            ],
        },
    ]
    for i, doc in enumerate(mangled):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(doc))
        code, got, err = _diagnose(capsys, "-f", str(path), "-o", "json")
        assert code == 0, err
        assert got is not None and got["state"] in ("starting", "failed", "running", "queued")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 200) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += _paths(value, (*prefix, i))
    return found


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_field_of_any_fixture_may_be_anything(data: st.DataObject) -> None:
    """Replace fields of a real dump with arbitrary JSON: the judgement never raises."""
    path = data.draw(st.sampled_from(CASES))
    doc = json.loads(path.read_text())
    items = doc["items"]
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.sampled_from(_paths(items)))
        target: Any = items
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] = data.draw(JSON)
    try:
        inputs = select(items_of({"kind": "List", "items": items}))
    except DumpError:
        return  # refused with a reason: what -f prints with exit status 2
    state, diagnosis = assess(
        inputs.workload,
        inputs.pods,
        datetime(2026, 11, 30, 12, 30, tzinfo=UTC),
        events=inputs.events,
        kueue_workload=inputs.kueue_workload,
    )
    assert state.value in (
        "queued",
        "starting",
        "running",
        "succeeded",
        "failed",
        "preempted",
        "stopped",
    )
    assert diagnosis is None or isinstance(diagnosis.message, str)
