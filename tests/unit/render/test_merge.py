"""The layered merge rules and the normalisation of W&B's queue-config forms, as tables."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from launch_agent.render.merge import MISSING, REMOVED, merge, merge_changes, normalise
from launch_agent.render.paths import Item

MERGE_CASES = [
    (
        "maps merge deeply",
        {"a": {"b": 1, "c": 2}},
        {"a": {"c": 3, "d": 4}},
        {"a": {"b": 1, "c": 3, "d": 4}},
    ),
    ("null removes a key", {"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    ("scalars replace", {"a": 1}, {"a": "x"}, {"a": "x"}),
    ("a map replaces a scalar", {"a": 1}, {"a": {"b": 1}}, {"a": {"b": 1}}),
    (
        "containers merge by name",
        {
            "containers": [
                {"name": "main", "image": "a", "args": ["x"]},
                {"name": "side", "image": "s"},
            ]
        },
        {"containers": [{"name": "main", "image": "b"}]},
        {
            "containers": [
                {"name": "main", "image": "b", "args": ["x"]},
                {"name": "side", "image": "s"},
            ]
        },
    ),
    (
        "a new name appends",
        {"containers": [{"name": "main"}]},
        {"containers": [{"name": "extra", "image": "e"}]},
        {"containers": [{"name": "main"}, {"name": "extra", "image": "e"}]},
    ),
    (
        "unnamed items merge by position (W&B's UI writes unnamed containers)",
        {"containers": [{"name": "main", "image": "a"}]},
        {"containers": [{"resources": {"limits": {"cpu": "1"}}}]},
        {"containers": [{"name": "main", "image": "a", "resources": {"limits": {"cpu": "1"}}}]},
    ),
    (
        "env merges by name",
        {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
        {"env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
        {
            "env": [
                {"name": "A", "value": "1"},
                {"name": "B", "value": "3"},
                {"name": "C", "value": "4"},
            ]
        },
    ),
    (
        "volumes and volumeMounts merge by name",
        {
            "volumes": [{"name": "v", "emptyDir": {}}],
            "volumeMounts": [{"name": "v", "mountPath": "/a"}],
        },
        {
            "volumes": [{"name": "w", "secret": {"secretName": "s"}}],
            "volumeMounts": [{"name": "v", "mountPath": "/b"}],
        },
        {
            "volumes": [
                {"name": "v", "emptyDir": {}},
                {"name": "w", "secret": {"secretName": "s"}},
            ],
            "volumeMounts": [{"name": "v", "mountPath": "/b"}],
        },
    ),
    (
        "ports merge by name",
        {"ports": [{"name": "http", "containerPort": 80}]},
        {"ports": [{"name": "http", "containerPort": 8080}]},
        {"ports": [{"name": "http", "containerPort": 8080}]},
    ),
    ("command replaces", {"command": ["a", "b"]}, {"command": ["c"]}, {"command": ["c"]}),
    ("args replace", {"args": ["--x"]}, {"args": []}, {"args": []}),
    (
        "other lists replace",
        {"tolerations": [{"key": "a"}]},
        {"tolerations": [{"key": "b"}]},
        {"tolerations": [{"key": "b"}]},
    ),
    (
        "Ray worker groups merge by groupName",
        {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "x": 1}]},
        {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 4}]},
        {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 4, "x": 1}]},
    ),
    (
        "JobSet replicated jobs merge by name",
        {"replicatedJobs": [{"name": "w", "replicas": 1}, {"name": "d", "replicas": 1}]},
        {"replicatedJobs": [{"name": "w", "replicas": 3}]},
        {"replicatedJobs": [{"name": "w", "replicas": 3}, {"name": "d", "replicas": 1}]},
    ),
]


@pytest.mark.parametrize(
    ("rule", "base", "overlay", "expected"), MERGE_CASES, ids=[c[0] for c in MERGE_CASES]
)
def test_merge_rules(
    rule: str, base: dict[str, Any], overlay: dict[str, Any], expected: dict[str, Any]
) -> None:
    before = (copy.deepcopy(base), copy.deepcopy(overlay))
    assert merge(base, overlay) == expected
    assert (base, overlay) == before, "merge must not modify its inputs"


JOB_FORM = {
    "spec": {
        "template": {"spec": {"containers": [{"env": [{"name": "MY_ENV_VAR", "value": "v"}]}]}}
    },
    "metadata": {"labels": {"queue": "k8s-test"}},
    "namespace": "wandb",
}
CR_FORM = {"kubernetes": {"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "spec": {"x": 1}}}


@pytest.mark.parametrize(
    ("raw", "api_version", "kind", "namespace", "problems"),
    [
        (JOB_FORM, "batch/v1", "Job", "wandb", []),
        (CR_FORM, "kubeflow.org/v1", "PyTorchJob", None, []),
        (
            {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"namespace": "a"}},
            "ray.io/v1",
            "RayJob",
            "a",
            [],
        ),
        (
            {"kind": "PyTorchJob", "spec": {}},
            None,
            "PyTorchJob",
            None,
            ["spec.template.apiVersion"],
        ),
        ({"apiVersion": "ray.io/v1", "spec": {}}, "ray.io/v1", None, None, ["spec.template.kind"]),
        (
            {"namespace": "a", "metadata": {"namespace": "b"}},
            "batch/v1",
            "Job",
            "a",
            ["spec.template.metadata.namespace"],
        ),
        ({"spec": []}, "batch/v1", "Job", None, ["spec.template.spec"]),
    ],
)
def test_normalise_forms(
    raw: dict[str, Any],
    api_version: str | None,
    kind: str | None,
    namespace: str | None,
    problems: list[str],
) -> None:
    manifest, ns, found, _warnings = normalise(raw, "spec.template")
    assert manifest.get("apiVersion") == api_version
    assert manifest.get("kind") == kind
    assert ns == namespace
    assert "namespace" not in manifest
    assert [p.path for p in found] == problems


def test_normalise_drops_wandb_runner_keys_with_a_warning() -> None:
    manifest, _ns, problems, warnings = normalise(
        {"spec": {}, "configFile": "/x", "context": "c", "wait_for_ready": True}, "t"
    )
    assert not problems
    assert {"configFile", "context", "wait_for_ready"}.isdisjoint(manifest)
    assert sorted(w.path for w in warnings) == ["t.configFile", "t.context", "t.wait_for_ready"]


def test_submitter_layer_keeps_the_templates_kind() -> None:
    manifest, _ns, problems, _w = normalise({"spec": {"x": 1}}, "layer", infer_job=False)
    assert not problems
    assert "apiVersion" not in manifest and "kind" not in manifest


CHANGE_CASES = [
    # (what, base, overlay, [(path, value, base value)]) -- what the policy is asked about
    ("an echo changes nothing", {"a": {"b": [1]}}, {"a": {"b": [1]}}, []),
    ("{} over a mapping changes nothing", {"a": {"b": 1}}, {"a": {}}, []),
    ("{} over a scalar is a change", {"a": "x"}, {"a": {}}, [(("a",), {}, "x")]),
    ("[] over a named list adds nothing", {"env": [{"name": "A"}]}, {"env": []}, []),
    ("null removes", {"a": 1}, {"a": None}, [(("a",), REMOVED, 1)]),
    ("null of a missing key is reported", {}, {"a": None}, [(("a",), REMOVED, MISSING)]),
    ("a new key", {}, {"a": {"b": 1}}, [(("a",), {"b": 1}, MISSING)]),
    (
        "a new named item, by its name",
        {"env": [{"name": "A"}]},
        {"env": [{"name": "B", "value": "1"}]},
        [(("env", Item("B")), {"name": "B", "value": "1"}, MISSING)],
    ),
    (
        "an unnamed item is the base item at its index",
        {"containers": [{"name": "main", "image": "a"}]},
        {"containers": [{"image": "b"}]},
        [(("containers", Item("main"), "image"), "b", "a")],
    ),
    (
        "a name set to null removes the name",
        {"containers": [{"name": "main"}]},
        {"containers": [{"name": None}]},
        [(("containers", Item("main"), "name"), REMOVED, "main")],
    ),
]


@pytest.mark.parametrize(
    ("what", "base", "overlay", "changes"), CHANGE_CASES, ids=[c[0] for c in CHANGE_CASES]
)
def test_merge_reports_every_change_it_makes(
    what: str, base: dict[str, Any], overlay: dict[str, Any], changes: list[Any]
) -> None:
    merged, found = merge_changes(base, overlay)
    assert merged == merge(base, overlay)
    assert [(c.path, c.value, c.base) for c in found] == changes


class CountingDict(dict[str, Any]):
    """A list item that counts how often the merge reads its name."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingDict.reads += 1
        return super().get(key, default)


def _name_reads(n: int) -> int:
    base = {"env": [CountingDict(name=f"V{i}", value="a") for i in range(n)]}
    # Reversed, so a scan from the front would read every base item not yet merged.
    overlay = {"env": [CountingDict(name=f"V{i}", value="b") for i in reversed(range(n))]}
    CountingDict.reads = 0
    merged, changes = merge_changes(base, overlay)
    assert len(changes) == n and merged["env"][-1]["value"] == "b"
    return CountingDict.reads


def test_merging_named_lists_is_linear() -> None:
    # Counting name look-ups, not time: the old merge scanned the base for every overlay item
    # (n² reads); an index by name reads each item a constant number of times.
    small, large = _name_reads(500), _name_reads(4000)
    assert large <= 8 * small * 1.1, (small, large)
    assert large < 4000 * 10
