"""Every rendered example validates against Kubernetes' strict schemas and the CRDs; and the
validators do catch the faults they are there for (so these tests can fail)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.render.output_check import crd_validator, validate_object
from launch_agent.render.pipeline import render
from launch_agent.render.sample import sample_item
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec

from .helpers import EXAMPLES, ROOT

SHIPPED = ROOT / "launch_agent" / "render" / "schemas" / "crds"
CRDS = ROOT / "tests" / "fixtures" / "crds"


def rendered(file: str) -> dict[str, Any]:
    spec, _ = load_queue_spec((EXAMPLES / file).read_text())
    return render(spec, sample_item(spec), None, RenderSettings()).workload


EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("file", EXAMPLE_FILES)
def test_every_example_renders_to_valid_objects(file: str) -> None:
    assert validate_object(rendered(file)) == []


def test_examples_cover_every_kind_gke_and_kueue() -> None:
    kinds = set()
    for file in EXAMPLE_FILES:
        spec, _ = load_queue_spec((EXAMPLES / file).read_text())
        kinds.add((spec.api_version, spec.kind))
        if spec.gke_ml_diagnostics:
            kinds.add(("gke", spec.kind))
        if spec.kueue_queue_name:
            kinds.add(("kueue", ""))
    assert {("gke", "JobSet"), ("kueue", "")} <= kinds
    assert len([k for k in kinds if k[0] not in ("gke", "kueue")]) == 7


def _pod(obj: dict[str, Any], path: list[Any]) -> dict[str, Any]:
    node: Any = obj
    for key in path:
        node = node[key]
    result: dict[str, Any] = node
    return result


# (example, path to a container, fault, expected path fragment, expected message fragment)
FAULTS: list[tuple[str, list[str | int], dict[str, Any], str, str]] = [
    (
        "job.yaml",
        ["spec", "template", "spec", "containers", 0],
        {"imagee": "x"},
        "containers",
        "'imagee' was unexpected",
    ),
    ("job.yaml", ["spec"], {"backoffLimit": "zero"}, "spec.backoffLimit", "is not of type"),
    ("jobset-gke.yaml", ["spec"], {"replicatedJob": []}, "", "'replicatedJob' was unexpected"),
    (
        "jobset-gke.yaml",
        ["spec", "replicatedJobs", 0],
        {"replicas": "two"},
        "spec.replicatedJobs[0].replicas",
        "is not of type",
    ),
    (
        "jobset-gke.yaml",
        ["spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0],
        {"imagee": "x"},
        "containers",
        "'imagee' was unexpected",
    ),
    (
        "pytorchjob.yaml",
        ["spec", "runPolicy"],
        {"backofLimit": 1},
        "spec.runPolicy",
        "'backofLimit' was unexpected",
    ),
    (
        "rayjob.yaml",
        ["spec"],
        {"shutdownAfterJobFinishes": "yes"},
        "spec.shutdownAfterJobFinishes",
        "is not of type",
    ),
    (
        "leaderworkerset.yaml",
        ["spec", "leaderWorkerTemplate"],
        {"size": 2**40},
        "spec.leaderWorkerTemplate.size",
        "is not a 'int32'",
    ),
    (
        "volcano-job.yaml",
        ["spec", "tasks", 0],
        {"replicas": -1},
        "spec.tasks[0].replicas",
        "less than the minimum",
    ),
    (
        "trainjob.yaml",
        ["spec", "trainer"],
        {"numNode": 2},
        "spec.trainer",
        "'numNode' was unexpected",
    ),
]


@pytest.mark.parametrize(
    ("file", "path", "fault", "where", "message"),
    FAULTS,
    ids=[f"{f[0]}:{next(iter(f[2]))}" for f in FAULTS],
)
def test_validators_catch_faults(
    file: str, path: list[Any], fault: dict[str, Any], where: str, message: str
) -> None:
    obj = copy.deepcopy(rendered(file))
    _pod(obj, path).update(fault)
    problems = validate_object(obj)
    assert any(where in p.path and message in p.reason for p in problems), problems


def test_names_and_labels_are_checked() -> None:
    obj = rendered("rayjob.yaml")
    obj["metadata"]["name"] = "r" * 48
    obj["metadata"]["labels"]["bad"] = "has spaces"
    paths = [p.path for p in validate_object(obj)]
    assert paths == ["metadata.name", 'metadata.labels["bad"]']


def test_rayjob_defaulted_required_fields_are_not_false_errors() -> None:
    obj = rendered("rayjob.yaml")
    for group in obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        group.pop("minReplicas", None)
        group.pop("maxReplicas", None)
    assert validate_object(obj) == []


def test_shipped_crd_schemas_are_up_to_date() -> None:
    # The extraction script, run into a temporary copy, must reproduce the committed files.
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "extract", ROOT / "scripts" / "extract_crd_schemas.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for filename, version in module.WANTED:
        with (CRDS / filename).open("rb") as f:
            crd = yaml.load(f, Loader=yaml.CSafeLoader)  # libyaml: 6 MB of CRDs in ~1 s
        served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
        expected = module.strictify(served["schema"]["openAPIV3Schema"])
        target = SHIPPED / f"{crd['spec']['names']['plural']}.{crd['spec']['group']}_{version}.json"
        shipped = json.loads(Path(target).read_text())
        shipped.pop("x-launch-agent-source")
        assert shipped == expected, target.name
        assert (
            crd_validator((crd["spec"]["names"]["plural"], crd["spec"]["group"], version))
            is not None
        )
