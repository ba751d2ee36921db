"""The override policy: which submitter values are overrides, and which are allowed."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings

from .helpers import job_template, make_item, make_spec

SETTINGS = RenderSettings()
TEMPLATE = job_template(
    image="${image_uri}", resources={"limits": {"cpu": "1"}}, env=[{"name": "A", "value": "1"}]
)


def containers(**c: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": [{"name": "main", **c}]}}}}


CASES = [
    # (what, overridable, submitter layer, overrides, forbidden paths)
    ("nothing set", [], None, {}, []),
    ("an exact echo of the template is not an override", [], TEMPLATE, {}, []),
    (
        "an echo in W&B's Job-spec form is not an override",
        [],
        {k: v for k, v in TEMPLATE.items() if k not in ("apiVersion", "kind")},
        {},
        [],
    ),
    (
        "a changed resource is forbidden by default",
        [],
        containers(resources={"limits": {"cpu": "2"}}),
        {},
        [
            "runSpec.resource_args.kubernetes.spec.template.spec.containers[main].resources.limits.cpu"
        ],
    ),
    (
        "a granted resource",
        ["**.containers[*].resources"],
        containers(resources={"limits": {"cpu": "2", "memory": "1Gi"}}),
        {},
        [],
    ),
    (
        "a grant for resources does not cover the image",
        ["**.containers[*].resources"],
        containers(image="evil:latest"),
        {},
        ["runSpec.resource_args.kubernetes.spec.template.spec.containers[main].image"],
    ),
    (
        "an unnamed container matches the template's first container",
        ["**.containers[main].resources"],
        {"spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "3"}}}]}}}},
        {},
        [],
    ),
    (
        "env: an equal entry is fine, a changed one is not",
        [],
        containers(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
        {},
        ["runSpec.resource_args.kubernetes.spec.template.spec.containers[main].env[B]"],
    ),
    (
        "deleting a template value is an override",
        [],
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "resources": None}]}}}},
        {},
        ["runSpec.resource_args.kubernetes.spec.template.spec.containers[main].resources"],
    ),
    (
        "a new sidecar is one new list item, refused whatever fields its grant names",
        ["**.containers[*].resources"],
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "main"}, {"name": "x", "image": "i"}]}
                }
            }
        },
        {},
        ["runSpec.resource_args.kubernetes.spec.template.spec.containers[x]"],
    ),
    (
        "securityContext is never granted implicitly",
        ["**.containers[*].resources"],
        containers(securityContext={"privileged": True}),
        {},
        [
            "runSpec.resource_args.kubernetes.spec.template.spec.containers[main].securityContext.privileged"
        ],
    ),
    (
        "labels can be granted with a glob",
        ["metadata.labels.*"],
        {"metadata": {"labels": {"team": "a", "example.com/x": "y"}}},
        {},
        [],
    ),
    ("overrides.args forbidden", [], None, {"args": ["--x"]}, ["runSpec.overrides.args"]),
    ("overrides.args granted", ["overrides.args"], None, {"args": ["--x"]}, []),
    ("empty args are not an override", [], None, {"args": []}, []),
    (
        "each overrides key is checked",
        ["overrides.args"],
        None,
        {
            "args": ["a"],
            "entry_point": ["python"],
            "run_config": {"a": 1},
            "files": {"f": "x"},
            "artifacts": {"a": "b"},
        },
        [
            "runSpec.overrides.entry_point",
            "runSpec.overrides.run_config",
            "runSpec.overrides.artifacts",
            "runSpec.overrides.files",
        ],
    ),
    (
        "a grant on overrides.** covers all",
        ["overrides.**"],
        None,
        {"entry_point": ["python"], "run_config": {"a": 1}},
        [],
    ),
    (
        "changing the kind is refused",
        ["**"],
        {"apiVersion": "ray.io/v1", "kind": "RayJob"},
        {},
        ["runSpec.resource_args.kubernetes.apiVersion", "runSpec.resource_args.kubernetes.kind"],
    ),
    (
        "changing the namespace is refused",
        ["**"],
        {"namespace": "other"},
        {},
        ["runSpec.resource_args.kubernetes.namespace"],
    ),
    ("the spec's namespace may be echoed", [], {"namespace": "ns"}, {}, []),
]


@pytest.mark.parametrize(
    ("what", "overridable", "layer", "overrides", "forbidden"), CASES, ids=[c[0] for c in CASES]
)
def test_override_policy(
    what: str,
    overridable: list[str],
    layer: dict[str, Any] | None,
    overrides: dict[str, Any],
    forbidden: list[str],
) -> None:
    spec = make_spec(TEMPLATE, overridable=overridable)
    item = make_item(layer, overrides=overrides)
    if not forbidden:
        render(spec, item, None, SETTINGS)
        return
    with pytest.raises(InvalidInput) as exc:
        render(spec, item, None, SETTINGS)
    assert [p.path for p in exc.value.problems] == forbidden
    assert all(
        "may not be overridden" in p.reason or "queue spec" in p.reason or "differs" in p.reason
        for p in exc.value.problems
    )


def test_violation_names_the_granted_paths() -> None:
    spec = make_spec(TEMPLATE, overridable=["overrides.args"])
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(containers(image="x")), None, SETTINGS)
    assert exc.value.problems[0].reason == (
        "may not be overridden: queue spec 'test-spec' lets submitters set only overrides.args"
    )


def test_granted_override_is_applied() -> None:
    spec = make_spec(TEMPLATE, overridable=["**.containers[*].resources"])
    out = render(spec, make_item(containers(resources={"limits": {"cpu": "8"}})), None, SETTINGS)
    c = out.workload["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == {"limits": {"cpu": "8"}}
