"""The pure render refuses what the loaders would: a too-deep item, wrongly shaped pod parts."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.shape import MAP, POD_TEMPLATE, check

from .helpers import job_template, make_item, make_spec

SETTINGS = RenderSettings()


def _nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        node = {"spec": node}
    return node


@pytest.mark.parametrize("depth", [120, 900, 5000])
def test_a_too_deep_layer_is_refused_not_a_recursion_error(depth: int) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(_nested(depth)), None, SETTINGS)
    [problem] = exc.value.problems
    assert problem.path.startswith("runSpec.resource_args.kubernetes.spec.spec.")
    assert problem.reason == "nested deeper than 100 levels"


@pytest.mark.parametrize(("depth", "refused"), [(97, False), (98, True)])
def test_the_depth_bound_is_the_loaders(depth: int, refused: bool) -> None:
    # runSpec is level 1, resource_args 2, the layer (resource_args.kubernetes) 3: 97 wrappers
    # around the innermost mapping put it at level 100, the loaders' limit (safe_load.py).
    spec = make_spec(job_template(image="i"), overridable=["**"])
    try:
        render(spec, make_item(_nested(depth)), None, SETTINGS)
        reasons: list[str] = []
    except InvalidInput as exc:
        reasons = [p.reason for p in exc.problems]
    assert ("nested deeper than 100 levels" in reasons) is refused, reasons


def test_shape_check_names_each_bad_item_and_source() -> None:
    tmpl = {
        "spec": {
            "containers": [{"name": "a", "env": [{"name": "E", "valueFrom": "x"}]}, 3],
            "volumes": [{"name": "v", "secret": 0, "emptyDir": None}],
            "securityContext": {"seccompProfile": []},
        }
    }
    found = {str(p): r for p, r in check(tmpl, MAP, POD_TEMPLATE, ())}
    assert len(found) == 4, found
    assert all(r.startswith("must be a mapping, not ") for r in found.values())
