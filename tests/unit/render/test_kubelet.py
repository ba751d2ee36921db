"""The kubelet's `$(VAR)` expansion cannot turn the submitter's text into the API key.

Each rendered container is run through `tests/kubelet_expansion.py`, an independent model of
expand.go and the kubelet's env/command/args resolution, with the API-key Secret holding a
known value: the value must appear only in `WANDB_API_KEY`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.kubelet import escape, references
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec
from tests.kubelet_expansion import container_view, expand, mapping_for

from .helpers import EXAMPLES, job_template, make_item, make_spec

SETTINGS = RenderSettings()
KEY = "sk-live-THE-KEY"
SECRETS = {(SETTINGS.api_key_secret, SETTINGS.api_key_secret_key): KEY}
ATTACK = "$(WANDB_API_KEY)"

TRICKY = [
    ATTACK,
    "$$(WANDB_API_KEY)",
    "$$$(WANDB_API_KEY)",
    "a$",
    "$",
    "$$",
    "$(",
    "$(unclosed",
    "$x $(A)$(B) $$ $",
    "(WANDB_API_KEY)",
    "plain text",
    "",
]


def _view(obj: dict[str, Any], pod_path: tuple[str, ...] = ("spec", "template")) -> dict[str, Any]:
    node: Any = obj
    for key in pod_path:
        node = node[key]
    return container_view(node["spec"]["containers"][0], SECRETS)


def _leaks(view: dict[str, Any]) -> list[str]:
    found = [n for n, v in view["env"].items() if KEY in v and n != "WANDB_API_KEY"]
    return found + [a for a in view["command"] + view["args"] if KEY in a]


@pytest.mark.parametrize("text", TRICKY)
def test_escape_is_undone_exactly_by_the_kubelet(text: str) -> None:
    everything = mapping_for({"WANDB_API_KEY": KEY, "A": "1", "B": "2", "x": "3"})
    assert expand(escape(text), everything) == text


def test_replacing_only_the_opener_would_not_be_enough() -> None:
    # The brief's first idea (`$(` → `$$(`) fails on this literal; `escape` does not.
    naive = "$$(WANDB_API_KEY)".replace("$(", "$$(")
    assert KEY in expand(naive, mapping_for({"WANDB_API_KEY": KEY}))
    assert expand(escape("$$(WANDB_API_KEY)"), mapping_for({"WANDB_API_KEY": KEY})) == (
        "$$(WANDB_API_KEY)"
    )


def test_references_follow_expand_go() -> None:
    assert references("$(A) $$(B) $$$(C) $(unclosed") == ["A", "C"]


def test_every_item_value_reaches_the_container_literally() -> None:
    spec = make_spec(overridable=["overrides.**"])
    item = make_item(
        name=ATTACK,
        overrides={
            "run_config": {"lr": ATTACK},
            "files": {"a.py": ATTACK},
            "artifacts": {"d": ATTACK},
            "args": [ATTACK, "--x=$$(WANDB_API_KEY)"],
            "entry_point": ["python", ATTACK],
        },
    )
    view = _view(render(spec, item, None, SETTINGS).workload)
    assert _leaks(view) == []
    assert view["env"]["WANDB_API_KEY"] == KEY
    assert view["env"]["WANDB_NAME"] == ATTACK
    assert json.loads(view["env"]["WANDB_CONFIG"]) == {"lr": ATTACK}
    assert json.loads(view["env"]["WANDB_LAUNCH_FILE_OVERRIDES"]) == {"a.py": ATTACK}
    assert json.loads(view["env"]["WANDB_ARTIFACTS"])["d"] == ATTACK
    assert view["args"] == [ATTACK, "--x=$$(WANDB_API_KEY)"]
    assert view["command"] == ["python", ATTACK]


def test_macros_in_expanded_fields_are_escaped() -> None:
    tmpl = job_template(
        image="${image_uri}",
        command=["sh", "-c", "echo ${run_name}"],
        args=["--name=${run_name}$"],
        env=[{"name": "RUN", "value": "${run_name}"}, {"name": "POD", "value": "$(HOSTNAME)"}],
    )
    view = _view(render(make_spec(tmpl), make_item(name=ATTACK), None, SETTINGS).workload)
    assert _leaks(view) == []
    assert view["env"]["RUN"] == ATTACK
    assert view["command"] == ["sh", "-c", f"echo {ATTACK}"]
    assert view["args"] == [f"--name={ATTACK}$"]
    # The admin's own references still work: only the item's values are escaped.
    assert view["env"]["POD"] == "$(HOSTNAME)"  # HOSTNAME is not defined before it


def test_a_macro_after_the_admins_dollar_cannot_complete_a_reference() -> None:
    tmpl = job_template(image="i", args=["$${run_name}"])
    with pytest.raises(InvalidInput) as exc:
        render(make_spec(tmpl), make_item(name="(WANDB_API_KEY)"), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == ["runSpec.name"]
    assert "would form a kubelet reference" in exc.value.problems[0].reason


def test_the_api_key_is_the_last_variable() -> None:
    # An env value can only expand variables listed before it: the admin's template (first)
    # and the agent's other variables cannot read the key.
    tmpl = job_template(image="i", env=[{"name": "LEAK", "value": ATTACK}])
    obj = render(make_spec(tmpl), make_item(name="n"), None, SETTINGS).workload
    env = obj["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-1]["name"] == "WANDB_API_KEY"
    assert env[0]["name"] == "LEAK"
    assert _view(obj)["env"]["LEAK"] == ATTACK


@pytest.mark.parametrize(
    ("container", "where"),
    [
        ({"env": [{"name": "X", "value": ATTACK}]}, "env[X].value"),
        ({"args": ["--k", ATTACK]}, "args[1]"),
        ({"command": ["sh", "-c", f"echo {ATTACK}"]}, "command[2]"),
    ],
)
def test_submitter_references_are_refused(container: dict[str, Any], where: str) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = {"spec": {"template": {"spec": {"containers": [{"name": "main", **container}]}}}}
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    (problem,) = exc.value.problems
    assert problem.path == (
        f"runSpec.resource_args.kubernetes.spec.template.spec.containers[main].{where}"
    )
    assert "$(WANDB_API_KEY) would be expanded by the kubelet" in problem.reason


def test_submitter_may_write_the_escaped_literal() -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "main", "args": ["$$(WANDB_API_KEY)"]}]}}
        }
    }
    view = _view(render(spec, make_item(layer), None, SETTINGS).workload)
    assert view["args"] == [ATTACK]


def test_rayjob_entrypoint_is_escaped_for_the_submitter_pod() -> None:
    spec, _ = load_queue_spec((EXAMPLES / "rayjob.yaml").read_text())
    item = make_item(overrides={"args": [ATTACK]})
    obj = render(spec, item, None, SETTINGS).workload
    # KubeRay makes this the submitter container's command; the kubelet gives back the text.
    assert expand(obj["spec"]["entrypoint"], mapping_for({"WANDB_API_KEY": KEY})) == (
        f"python train.py '{ATTACK}'"
    )
