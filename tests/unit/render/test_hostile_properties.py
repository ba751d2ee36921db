"""Hostile submitter layers drawn from the real schemas, for every example queue spec.

The layers come from `tests/hostile.py`: the Kubernetes OpenAPI definitions and the CRD
schemas, walked with a bias to security-relevant fields and hostile values. Each one is
rendered through `launch_agent.render.pipeline.render` and must end one of two ways:

- refused: `InvalidInput`, every problem naming a `runSpec` path and a reason;
- accepted: the workload has no violation by the independent checker (`tests/pss_checker.py`,
  written from the Pod Security Standards, not from `launch_agent.render.security`), and,
  under a narrow grant, everything outside the grant is exactly what the same run renders to
  without a layer (what the policy checks is what the merge applies).

Under `overridable: ["**"]` the submitter may change anything, so only the checker holds the
line; under narrow grants (`**.containers[*].env`, `**.volumes`, `**.resources`) the layer
targets the granted field, and sometimes anything else (which must be refused).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from launch_agent.model.queue_spec import InvalidInput, QueueSpec
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import build_queue_spec
from tests import hostile
from tests.pss_checker import Allowed, violations

from .helpers import EXAMPLES, make_item

SETTINGS = RenderSettings()
SPEC_FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
EVERYTHING = ["**"]


def _load(file: str, overridable: list[str]) -> tuple[QueueSpec, dict[str, Any], Allowed]:
    raw = yaml.safe_load((EXAMPLES / file).read_text())
    raw["spec"]["overridable"] = overridable
    spec, _ = build_queue_spec(copy.deepcopy(raw))
    return spec, raw, Allowed.from_queue_spec(raw, api_key_secret=SETTINGS.api_key_secret)


def _template(spec: QueueSpec) -> dict[str, Any]:
    return copy.deepcopy(dict(spec.template))


def _outcome(
    spec: QueueSpec, item: dict[str, Any], *, noting: bool = True
) -> dict[str, Any] | None:
    """The rendered workload, or None when refused with a precise error."""
    if noting:
        note(f"item: {json.dumps(item, default=repr)}")
    refused: InvalidInput | None = None
    try:
        result = render(spec, item, None, SETTINGS)
    except InvalidInput as error:
        refused = error
    if refused is None:
        return result.workload
    assert refused.problems, "InvalidInput without a problem"
    for problem in refused.problems:
        assert problem.path.startswith("runSpec"), f"{problem} names no runSpec path"
        assert problem.reason.strip(), f"{problem.path}: no reason"
    return None


@pytest.mark.parametrize("file", SPEC_FILES)
@settings(
    max_examples=22,
    deadline=None,
    # Shrinking hundreds of small draws takes minutes; the noted item and the violation's
    # path already say what went wrong.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_anything_granted_still_renders_a_safe_workload(file: str, data: st.DataObject) -> None:
    spec, _raw, allowed = _load(file, EVERYTHING)
    ch = hostile.HypothesisChooser(data.draw)
    template = _template(spec)
    layer = hostile.whole_layer(ch, template) if ch.chance(40) else hostile.pod_layer(ch, template)
    item = make_item(layer, **hostile.hostile_overrides(ch))
    workload = _outcome(spec, item)
    if workload is not None:
        assert violations(workload, allowed=allowed) == []


def _strip_container_field(field: str) -> Callable[[Any], None]:
    def strip(node: Any) -> None:
        if isinstance(node, dict):
            containers = node.get("containers")
            if isinstance(containers, list):
                for c in containers:
                    if isinstance(c, dict):
                        c.pop(field, None)
            for v in node.values():
                strip(v)
        elif isinstance(node, list):
            for v in node:
                strip(v)

    return strip


def _strip_pod_field(field: str) -> Callable[[Any], None]:
    def strip(node: Any) -> None:
        if isinstance(node, dict):
            if "containers" in node:
                node.pop(field, None)
            for v in node.values():
                strip(v)
        elif isinstance(node, list):
            for v in node:
                strip(v)

    return strip


def _both(*strips: Callable[[Any], None]) -> Callable[[Any], None]:
    def strip(node: Any) -> None:
        for one in strips:
            one(node)

    return strip


CONTAINER = hostile.k8s("Container")["properties"]
POD = hostile.k8s("PodSpec")["properties"]
# (grant, draws a layer for a template, removes the granted part from a rendered workload)
NARROW: list[
    tuple[str, Callable[[hostile.Chooser, dict[str, Any]], Any], Callable[[Any], None]]
] = [
    (
        "**.containers[*].env",
        lambda ch, t: hostile.container_field_layer(ch, t, "env", CONTAINER["env"]),
        _strip_container_field("env"),
    ),
    (
        "**.volumes",
        lambda ch, t: hostile.pod_field_layer(ch, t, "volumes", POD["volumes"]),
        _strip_pod_field("volumes"),
    ),
    (
        "**.resources",
        lambda ch, t: hostile.container_field_layer(ch, t, "resources", CONTAINER["resources"]),
        # `**.resources` also grants the pod-level `spec.resources` (core/v1 PodSpec.resources,
        # KEP-2837 pod-level resources), which the fallback `pod_layer` draw can set.
        _both(_strip_container_field("resources"), _strip_pod_field("resources")),
    ),
]


@pytest.mark.parametrize("file", SPEC_FILES)
@pytest.mark.parametrize(("grant", "make_layer", "strip"), NARROW, ids=[n[0] for n in NARROW])
@settings(
    max_examples=8,
    deadline=None,
    # Shrinking hundreds of small draws takes minutes; the noted item and the violation's
    # path already say what went wrong.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_narrow_grant_changes_only_what_it_grants(
    file: str,
    grant: str,
    make_layer: Callable[[hostile.Chooser, dict[str, Any]], Any],
    strip: Callable[[Any], None],
    data: st.DataObject,
) -> None:
    spec, _raw, allowed = _load(file, [grant])
    ch = hostile.HypothesisChooser(data.draw)
    template = _template(spec)
    # Mostly the granted field; sometimes anything at all, which must be refused or be an echo.
    layer = make_layer(ch, template) if ch.chance(80) else hostile.pod_layer(ch, template)
    run_name = {"name": ch.pick(hostile.HOSTILE_STRINGS)} if ch.chance(50) else {}
    workload = _outcome(spec, make_item(layer, **run_name))
    if workload is None:
        return
    assert violations(workload, allowed=allowed) == []
    baseline = render(spec, make_item(None, **run_name), None, SETTINGS).workload
    strip(workload)
    strip(baseline)
    assert workload == baseline, "a change outside the grant reached the workload"


ATTACK_SPECS = hostile.queue_specs(namespace="ns")
ATTACK_CASES = [
    (cls, queue, index)
    for cls, makers in hostile.ATTACKS.items()
    for index, (queue, _make) in enumerate(makers)
]


@pytest.mark.parametrize(
    ("cls", "queue", "index"),
    ATTACK_CASES,
    ids=[f"{c}-{i}-{q}" for c, q, i in ATTACK_CASES],
)
def test_each_known_attack_is_refused_or_rendered_safe(cls: str, queue: str, index: int) -> None:
    # The attack classes of the security review, on every kind (the e2e test cannot run all
    # of them: the sandbox's operators do not hold every hostile workload).
    raw = ATTACK_SPECS[queue]
    spec, _ = build_queue_spec(copy.deepcopy(raw))
    make = hostile.ATTACKS[cls][index][1]
    item = {"runQueueItemId": "UnVuUXVldWVJdGVtOjE=", "runSpec": make(hostile.RandomChooser(index))}
    workload = _outcome(spec, item, noting=False)
    if workload is not None:
        allowed = Allowed.from_queue_spec(raw, api_key_secret=SETTINGS.api_key_secret)
        assert violations(workload, allowed=allowed) == []


def test_the_schemas_are_the_real_ones() -> None:
    # The strategies must walk the shipped schemas, not an empty stand-in that draws nothing.
    assert "securityContext" in hostile.k8s("PodSpec")["properties"]
    for (api_version, kind), _file in hostile.CRD_FILES.items():
        assert hostile.workload_schema(api_version, kind)["properties"]["spec"]["properties"]
    assert Path(hostile.CRD_DIR).is_dir()
