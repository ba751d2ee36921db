"""The shapes a real `kubectl get <workload>,pods,events -o json` capture has, beyond the
fixtures' own: every upstream fixture is rewritten the way another cluster, kubectl version or
admin would have captured it, and `launch-agent diagnose -f` must print the same verdict.

- Events from `kubectl get events.events.k8s.io` (events.k8s.io/v1: `regarding`, `note`,
  `eventTime` with microseconds and no `count`, repeats in `series`), and core/v1 Events
  without `count`;
- timestamps with fractional seconds; `managedFields`, `resourceVersion`, `generation` on
  every object;
- Kueue Workloads served as v1beta2 instead of v1beta1 (and back);
- another workload of the namespace in the same capture, with its pods, Events and Kueue
  Workload (`kubectl get jobs,pods,events` lists them all), picked by name;
- the capture split into typed lists (JobList, PodList, EventList) inside a List, as a JSON
  array, or as JSON documents appended one after the other to one file; `-o yaml`, one
  document or several separated by `---`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from launch_agent.tracking.dump import choose_workload, items_of
from launch_agent.tracking.fields import one_line

UPSTREAM = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
CASES = sorted(p for p in UPSTREAM.glob("*/*.json") if not p.name.endswith(".expected.json"))
Item = dict[str, Any]


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _expected(path: Path) -> dict[str, Any]:
    return _load(path.with_name(path.stem + ".expected.json"))


def _diagnose(
    capsys: pytest.CaptureFixture[str], path: Path, doc: dict[str, Any], *extra: str
) -> tuple[int, dict[str, Any] | None, str]:
    argv = ["diagnose", "-f", str(path), "--now", doc["_now"], "-o", "json"]
    code = main([*argv, *doc.get("_args", []), *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def events_v1(item: Item) -> Item:
    """A core/v1 Event as `kubectl get events.events.k8s.io -o json` prints it."""
    if item.get("kind") != "Event" or item.get("apiVersion") != "v1":
        return item
    first = (
        item.get("firstTimestamp")
        or item.get("eventTime")
        or item["metadata"].get("creationTimestamp")
    )
    new: Item = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": item["metadata"],
        "eventTime": first if "." in first else first.replace("Z", ".000000Z"),
        "reportingController": (item.get("source") or {}).get("component", "kubelet"),
        "reportingInstance": "gpu-node-3",
        "action": "Failed",
        "reason": item.get("reason"),
        "regarding": item.get("involvedObject"),
        "note": item.get("message"),
        "type": item.get("type"),
    }
    if isinstance(item.get("series"), dict):
        # Recorded through events.k8s.io/v1 already (the core view of one): its series as is.
        new["series"] = item["series"]
    elif (item.get("count") or 1) > 1:
        last = item.get("lastTimestamp") or first
        new["series"] = {"count": item["count"], "lastObservedTime": last.replace("Z", ".4829Z")}
    return new


def no_count(item: Item) -> Item:
    if item.get("kind") == "Event" and item.get("count") == 1:
        item = {k: v for k, v in item.items() if k != "count"}
    return item


def _fractional(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _fractional(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fractional(v) for v in value]
    if isinstance(value, str) and len(value) == 20 and value[10] == "T" and value[-1] == "Z":
        return value[:-1] + ".000000Z"
    return value


def fractional(item: Item) -> Item:
    result: Item = _fractional(item)
    return result


def kubectl_fields(item: Item) -> Item:
    item = copy.deepcopy(item)
    meta = item.setdefault("metadata", {})
    meta.setdefault("resourceVersion", "81234")
    meta.setdefault("generation", 2)
    meta["managedFields"] = [
        {
            "apiVersion": item.get("apiVersion"),
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:conditions": {}, ".": {}}},
            "manager": "kube-controller-manager",
            "operation": "Update",
            "subresource": "status",
            "time": "2026-11-30T11:50:00Z",
        }
    ]
    return item


def kueue_version_swapped(item: Item) -> Item:
    swap = {"kueue.x-k8s.io/v1beta1": "kueue.x-k8s.io/v1beta2"}
    swap.update({v: k for k, v in swap.items()})
    if item.get("kind") == "Workload" and item.get("apiVersion") in swap:
        item = {**item, "apiVersion": swap[item["apiVersion"]]}
    return item


REWRITES: dict[str, Callable[[Item], Item]] = {
    "events.k8s.io-v1": events_v1,
    "events-without-count": no_count,
    "fractional-seconds": fractional,
    "managedFields": kubectl_fields,
    "kueue-v1beta1-v1beta2": kueue_version_swapped,
}


@pytest.mark.parametrize("rewrite", REWRITES)
def test_a_capture_in_another_shape_gets_the_same_verdict(
    rewrite: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = 0
    for path in CASES:
        doc = _load(path)
        items = [REWRITES[rewrite](copy.deepcopy(i)) for i in doc["items"]]
        changed += items != doc["items"]
        target = tmp_path / path.name
        target.write_text(json.dumps({**doc, "items": items}))
        code, got, err = _diagnose(capsys, target, doc)
        assert code == 0, f"{_case_id(path)}: {err}"
        assert got == _expected(path), _case_id(path)
    assert changed  # the rewrite did rewrite real cases


def _workload_name(doc: dict[str, Any]) -> str:
    name: str = choose_workload(items_of(doc))["metadata"]["name"]
    return name


def _another_workload(path: Path) -> list[Item]:
    """The items of another fixture, renamed so that nothing is shared with `path`'s."""
    others = [p for p in CASES if p.parent.name != path.parent.name]
    other = _load(others[CASES.index(path) * 7 % len(others)])
    name = _workload_name(other)
    text = json.dumps(other["items"])
    text = text.replace(name, "zq" + name).replace('"abc"', '"zqabc"').replace('"uid-', '"zq-uid-')
    renamed: list[Item] = json.loads(text)
    return renamed


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_another_workload_in_the_capture_is_told_apart_by_name(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _load(path)
    items = [*doc["items"], *_another_workload(path)]
    target = tmp_path / "namespace.json"
    target.write_text(json.dumps({**doc, "items": items}))
    code, _, err = _diagnose(capsys, target, doc)
    assert code == 2 and "several workloads in the input" in err, err
    code, got, err = _diagnose(capsys, target, doc, _workload_name(doc))
    assert code == 0, err
    assert got == _expected(path)


def _typed_lists(items: list[Item]) -> list[Item]:
    lists: dict[str, list[Item]] = {}
    for item in items:
        lists.setdefault(f"{item['kind']}List", []).append(item)
    return [
        {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": found}
        for kind, found in lists.items()
    ]


def _nested(doc: dict[str, Any]) -> str:
    return json.dumps({**doc, "items": _typed_lists(doc["items"])})


def _array(doc: dict[str, Any]) -> str:
    return json.dumps(_typed_lists(doc["items"]))


def _appended(doc: dict[str, Any]) -> str:
    return "\n".join(json.dumps(lst, indent=4) for lst in _typed_lists(doc["items"])) + "\n"


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc)


def _yaml_documents(doc: dict[str, Any]) -> str:
    """`kubectl get job X -o yaml; echo ---; kubectl get pods -o yaml; ...`"""
    return "---\n".join(yaml.safe_dump(lst) for lst in _typed_lists(doc["items"]))


LAYOUTS = [_nested, _array, _appended, _yaml, _yaml_documents]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("path", CASES[::9], ids=_case_id)
def test_a_capture_split_into_typed_lists(
    layout: Callable[[dict[str, Any]], str],
    path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _load(path)
    target = tmp_path / "split.json"
    target.write_text(layout(doc))
    code, got, err = _diagnose(capsys, target, doc)
    assert code == 0, err
    assert got == _expected(path)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (
            '{"kind": "JobList", "items": [{"kind": "Job"}]}\n{"kind": "PodList", "items": 3}',
            [
                "[1].items: expected a list of objects",
            ],
        ),
        ('[{"kind": "PodList", "items": [{"kind": "Pod"}, 7]}]', ["[0].items[1]: expected an"]),
        (
            '{"kind": "List", "items": [{"kind": "EventList", "items": [{}]}]}',
            ["items[0].items[0]: no kind"],
        ),
        ('{"kind": "Job", "apiVersion": "batch/v1"} {"a": 1, "a": 2}', ["duplicate key"]),
        ('{"kind": "Job", "apiVersion": "batch/v1"} trailing', ["invalid JSON"]),
    ],
)
def test_a_bad_split_capture_names_the_bad_part(
    content: str, words: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "dump.json"
    target.write_text(content)
    assert main(["diagnose", "-f", str(target)]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err


@pytest.mark.parametrize(
    ("api_version", "kind", "state"),
    [
        ("batch/v1", "Job", "starting"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", "starting"),
        ("kubeflow.org/v1", "PyTorchJob", "starting"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", "starting"),
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "starting"),
        ("ray.io/v1", "RayJob", "starting"),
        # Not even Pending: the controller has not seen it (it may be down), so the start
        # deadline runs; Pending without pods would be a gang waiting in its queue.
        ("batch.volcano.sh/v1alpha1", "Job", "starting"),
    ],
)
def test_an_empty_status_is_a_workload_just_created(
    api_version: str, kind: str, state: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metadata = {"name": "run-abc", "namespace": "ml", "uid": "u1"}
    metadata["creationTimestamp"] = "2026-11-30T11:50:00Z"
    workload = {"apiVersion": api_version, "kind": kind, "metadata": metadata, "status": {}}
    target = tmp_path / "new.json"
    target.write_text(json.dumps(workload))
    doc = {"_now": "2026-11-30T11:51:00Z"}
    code, got, err = _diagnose(capsys, target, doc)
    assert code == 0, err
    assert got == {"state": state, "reason": None, "message": None, "pod": None, "container": None}


def _workload_of(doc: dict[str, Any]) -> Item:
    found: Item = next(i for i in doc["items"] if i["kind"] == "Workload")
    return found


def test_a_kueue_workload_without_owner_references_is_matched_by_the_job_uid_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = UPSTREAM / "job" / "kueue-deactivated-requeuing-limit.json"
    doc = _load(path)
    assert _workload_of(doc)["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == "uid-run-abc"
    del _workload_of(doc)["metadata"]["ownerReferences"]
    target = tmp_path / "trimmed.json"
    target.write_text(json.dumps(doc))
    code, got, err = _diagnose(capsys, target, doc)
    assert code == 0, err
    assert got == _expected(path)


def test_of_several_kueue_workloads_the_one_holding_the_run_back_explains_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LeaderWorkerSet has one Workload per group; an earlier one may linger for a Job."""
    path = UPSTREAM / "job" / "kueue-deactivated-requeuing-limit.json"
    doc = _load(path)
    admitted = copy.deepcopy(_workload_of(doc))
    admitted["metadata"].update(name="job-run-abc-00000", uid="uid-wl-old")
    admitted["spec"]["active"] = True
    admitted["status"] = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ]
    }
    for items in ([admitted, *doc["items"]], [*doc["items"], admitted]):
        target = tmp_path / "two.json"
        target.write_text(json.dumps({**doc, "items": items}))
        code, got, err = _diagnose(capsys, target, doc)
        assert code == 0, err
        assert got == _expected(path)


def test_a_long_message_keeps_its_cause_at_the_end() -> None:
    """containerd chains its errors: the registry's status comes last, after the URL."""
    chain = (
        'failed to pull and unpack image "r.example/a:1": failed to resolve reference'
        ' "r.example/a:1": failed to authorize: failed to fetch oauth token: unexpected status'
        " from GET request to https://r.example/v2/token?scope=repository%3Aa%3Apull"
        "&service=r.example: 403 Forbidden"
    )
    assert one_line(chain, 1000).endswith("https://r.example/v2/token: 403 Forbidden")
    short = one_line("x" * 50 + "\n  " + chain, 100)
    assert len(short) <= 100
    assert short.startswith("x" * 40) and " … " in short
    assert short.endswith("v2/token: 403 Forbidden")
    assert one_line("a\n b", 10) == "a b"
