"""Render behaviour: environment, secrets, macros, names, labels, Kueue, diagnostics, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launch_agent.model import labels as L
from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render import naming
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.wandb_env import CHUNK

from .helpers import RQI, job_template, make_item, make_spec

SETTINGS = RenderSettings(agent_name="agent-a", base_url="https://wandb.example.com")


def _main(obj: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return c


def _env(obj: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _main(obj)["env"]}


def test_wandb_environment_matches_the_reference_agent() -> None:
    spec = make_spec(overridable=["overrides.**"])
    item = make_item(
        run_id="run12345",
        name="my-run",
        author="alice",
        sweep_id="sw1",
        _resume_count=1,
        job="ent/proj/job-x:v1",
        overrides={"run_config": {"lr": 0.1}, "files": {"a.py": "x"}, "artifacts": {"d": "e"}},
    )
    env = _env(render(spec, item, None, SETTINGS).workload)
    assert env == {
        "WANDB_BASE_URL": "https://wandb.example.com",
        "WANDB_API_KEY": {
            "secretKeyRef": {"name": "wandb-api-key-launch-agent", "key": "password"}
        },
        "WANDB_PROJECT": "proj",
        "WANDB_ENTITY": "ent",
        "WANDB_LAUNCH": "True",
        "WANDB_RUN_ID": "run12345",
        "WANDB_DOCKER": "registry.example.com/img:1",
        "WANDB_NAME": "my-run",
        "WANDB_USERNAME": "alice",
        "WANDB_SWEEP_ID": "sw1",
        "WANDB_RESUME": "allow",
        "WANDB_LAUNCH_QUEUE_NAME": "q",
        "WANDB_LAUNCH_QUEUE_ENTITY": "ent",
        "WANDB_LAUNCH_TRACE_ID": RQI,
        "WANDB_CONFIG": '{"lr": 0.1}',
        "WANDB_LAUNCH_FILE_OVERRIDES": '{"a.py": "x"}',
        "WANDB_ARTIFACTS": '{"_wandb_job": "ent/proj/job-x:v1", "d": "e"}',
    }


def test_long_run_config_is_chunked_like_wandb() -> None:
    config = {"blob": "x" * (2 * CHUNK)}
    spec = make_spec(overridable=["overrides.run_config"])
    env = _env(render(spec, make_item(overrides={"run_config": config}), None, SETTINGS).workload)
    assert "WANDB_CONFIG" not in env
    chunks = [env[f"WANDB_CONFIG_{i}"] for i in range(3)]
    assert all(len(c) <= CHUNK for c in chunks)
    assert json.loads("".join(chunks)) == config


def test_api_key_only_as_secret_ref_even_with_a_per_run_key() -> None:
    spec = make_spec()
    item = make_item(_wandb_api_key="sk-live-SECRET")
    out = render(spec, item, None, SETTINGS)
    assert "sk-live-SECRET" not in json.dumps(out.objects)
    assert [w.path for w in out.warnings] == ["runSpec._wandb_api_key"]


def test_user_env_with_the_same_name_is_replaced_not_duplicated() -> None:
    tmpl = job_template(
        env=[{"name": "WANDB_PROJECT", "value": "x"}, {"name": "KEEP", "value": "1"}]
    )
    env = _main(render(make_spec(tmpl), make_item(), None, SETTINGS).workload)["env"]
    names = [e["name"] for e in env]
    assert names.count("WANDB_PROJECT") == 1
    assert names[0] == "KEEP"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${run_id}", "run12345"),
        ("${image_uri}", "registry.example.com/img:1"),
        ("${project_name}/${entity_name}", "proj/ent"),
        ("${run_name}", "my-run"),
        ("${author}", "alice"),
        ("${queue_name}", "q"),
        ("${HOME}", "${HOME}"),  # the agent's environment is never substituted
        ("${WANDB_API_KEY}", "${WANDB_API_KEY}"),
        ("${unknown} $run_id ${run_id", "${unknown} $run_id ${run_id"),
    ],
)
def test_macros_are_allow_listed(value: str, expected: str) -> None:
    tmpl = job_template(env=[{"name": "X", "value": value}])
    item = make_item(run_id="run12345", name="my-run", author="alice")
    assert _env(render(make_spec(tmpl), item, None, SETTINGS).workload)["X"] == expected


def test_names_labels_and_annotations() -> None:
    out = render(make_spec(name="gpu-queue"), make_item(run_id="abc"), None, SETTINGS).workload
    meta = out["metadata"]
    assert meta["name"] == "gpu-queue-123456789"
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {
        L.AGENT: "agent-a",
        L.QUEUE: "q",
        L.RUN_QUEUE_ITEM: "UnVuUXVldWVJdGVtOjEyMzQ1Njc4OQ",
        L.RUN_ID: "abc",
        L.WANDB_RUN_ID: "abc",
        L.WANDB_AGENT: "agent-a",
    }
    assert meta["annotations"][L.RUN_QUEUE_ITEM_ID] == RQI
    assert out["spec"]["template"]["metadata"]["labels"] == meta["labels"]


@pytest.mark.parametrize(
    ("rqi", "max_len", "expected"),
    [
        (RQI, 63, "spec-123456789"),
        ("not base64!", 63, "spec-" + naming.item_short_id("not base64!")),
        (RQI, 12, "sp-123456789"),
        (RQI, 10, "r123456789"),
    ],
)
def test_workload_name_is_deterministic_and_short(rqi: str, max_len: int, expected: str) -> None:
    name = naming.workload_name("spec", rqi, max_len)
    assert name == expected
    assert len(name) <= max_len
    assert name == naming.workload_name("spec", rqi, max_len)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("UnVuUXVldWVJdGVtOjE=", "UnVuUXVldWVJdGVtOjE"),
        ("a+b/c==", "a-b_c"),
        ("ends-with/", None),  # "_" at the end is not a label value: hashed
        ("x" * 64, None),
        ("queue with spaces", None),
    ],
)
def test_label_values(value: str, expected: str | None) -> None:
    out = naming.label_value(value)
    assert L.is_label_value(out)
    if expected is None:
        assert out.startswith("h-")
    else:
        assert out == expected


def test_derived_run_id_is_stable() -> None:
    a = naming.derived_run_id(RQI)
    assert a == naming.derived_run_id(RQI) and len(a) == 8 and a.isalnum()
    assert a != naming.derived_run_id(RQI + "x")
    out = render(make_spec(), make_item(), None, SETTINGS).workload
    assert _env(out)["WANDB_RUN_ID"] == a


def test_kueue_label_and_suspend() -> None:
    spec = make_spec(kueue={"queueName": "team-a"})
    out = render(spec, make_item(), None, SETTINGS).workload
    assert out["metadata"]["labels"][L.KUEUE_QUEUE_NAME] == "team-a"
    assert out["spec"]["suspend"] is True


def test_gke_diagnostics_on_an_unsupported_kind_warns() -> None:
    spec = make_spec(diagnostics={"gkeManagedMLDiagnostics": True})
    out = render(spec, make_item(), None, SETTINGS)
    assert out.workload["metadata"]["labels"][L.GKE_ML_DIAGNOSTICS] == "true"
    assert [w.path for w in out.warnings] == ["spec.diagnostics.gkeManagedMLDiagnostics"]


@pytest.mark.parametrize(
    ("template_image", "image_arg", "expected"),
    [
        ("${image_uri}", None, "registry.example.com/img:1"),
        (None, None, "registry.example.com/img:1"),
        (None, "built.example.com/x:2", "built.example.com/x:2"),
        ("pinned.example.com/y:3", None, "pinned.example.com/y:3"),
    ],
)
def test_image(template_image: str | None, image_arg: str | None, expected: str) -> None:
    tmpl = job_template(**({"image": template_image} if template_image else {}))
    out = render(make_spec(tmpl), make_item(), image_arg, SETTINGS).workload
    assert _main(out)["image"] == expected


def test_args_and_entry_point_replace_the_main_containers() -> None:
    spec = make_spec(job_template(command=["old"], args=["--old"]), overridable=["overrides.**"])
    out = render(
        spec,
        make_item(overrides={"args": ["--lr", 0.5], "entry_point": ["python", "t.py"]}),
        None,
        SETTINGS,
    )
    assert _main(out.workload)["command"] == ["python", "t.py"]
    assert _main(out.workload)["args"] == ["--lr", "0.5"]


@pytest.mark.parametrize(
    ("item", "path", "reason"),
    [
        ({"runSpec": {}}, "runQueueItemId", "is required"),
        ({"runQueueItemId": "x"}, "runSpec", "is required"),
        ({"runQueueItemId": "x", "runSpec": {"project": "p"}}, "runSpec.entity", "is required"),
        (make_item(resource="sagemaker"), "runSpec.resource", "only runs 'kubernetes'"),
        (make_item(overrides={"args": "--x"}), "runSpec.overrides.args", "must be a list"),
        (
            make_item(overrides={"args": ["ok", {"no": 1}]}),
            "runSpec.overrides.args[1]",
            "must be a string",
        ),
        (
            make_item(overrides={"run_config": [1]}),
            "runSpec.overrides.run_config",
            "must be a mapping",
        ),
        (make_item([]), "runSpec.resource_args.kubernetes", "must be a mapping"),  # type: ignore[arg-type]
        (make_item(_resume_count=-1), "runSpec._resume_count", "non-negative"),
        (make_item(docker={}), "runSpec.docker.docker_image", "names no image"),
        (
            make_item(additional_services=[{"config": {}}]),
            "runSpec.additional_services",
            "not supported",
        ),
    ],
)
def test_malformed_items_get_precise_errors(item: dict[str, Any], path: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        render(make_spec(), item, None, SETTINGS)
    assert any(p.path == path and reason in p.reason for p in exc.value.problems), (
        exc.value.problems
    )


def test_all_problems_are_reported_at_once() -> None:
    item = make_item(
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}},
        overrides={"args": ["a"], "entry_point": ["b"]},
        additional_services=[{}],
    )
    with pytest.raises(InvalidInput) as exc:
        render(make_spec(), item, None, SETTINGS)
    assert len(exc.value.problems) == 4


def test_oversized_run_config_is_refused() -> None:
    spec = make_spec(overridable=["overrides.run_config"])
    item = make_item(overrides={"run_config": {"x": "y" * 1_100_000}})
    with pytest.raises(InvalidInput) as exc:
        render(spec, item, None, SETTINGS)
    assert exc.value.problems[0].path == "runSpec.overrides"
    assert "the limit is 1,000,000" in exc.value.problems[0].reason


def test_queue_not_served_by_the_spec() -> None:
    with pytest.raises(InvalidInput, match="'other' is not served"):
        render(make_spec(), make_item(), None, SETTINGS, queue_name="other")


def test_render_does_not_modify_the_spec_or_the_item() -> None:
    spec = make_spec(overridable=["**"])
    before = json.dumps(spec.template, sort_keys=True)
    item = make_item(
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]}
                }
            }
        }
    )
    item_before = json.dumps(item, sort_keys=True)
    render(spec, item, None, SETTINGS)
    render(spec, item, None, SETTINGS)
    assert json.dumps(spec.template, sort_keys=True) == before
    assert json.dumps(item, sort_keys=True) == item_before
