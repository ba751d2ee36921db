"""Issue 26: W&B's template variables in every shape W&B and its tools write, and a `{{name}}`
with no definition refused with its path."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.migrate import migrate, read_template_variables
from launch_agent.render.spec_load import load_queue_spec

CPUS = {"type": "integer", "minimum": 1, "maximum": 8, "default": 2}
WANT = {"cpus": CPUS, "image": {"type": "string", "enum": ["a", "b"]}}


@pytest.mark.parametrize(
    "data",
    [
        # name -> schema, as the W&B UI shows them
        WANT,
        # W&B's GraphQL `templateVariables` / wandb's public API: schema as JSON text
        [{"name": k, "schema": json.dumps(v)} for k, v in WANT.items()],
        # the same with schema objects
        [{"name": k, "schema": v} for k, v in WANT.items()],
        # the Terraform provider's map: name -> {name, schema}
        {k: {"name": k, "schema": json.dumps(v)} for k, v in WANT.items()},
        # ... with `name` left out
        {k: {"schema": v} for k, v in WANT.items()},
        # name -> schema as JSON text
        {k: json.dumps(v) for k, v in WANT.items()},
    ],
    ids=["map", "list-json", "list-object", "terraform", "terraform-no-name", "map-json"],
)
def test_every_shape_reads_as_name_to_schema(data: Any) -> None:
    assert read_template_variables(data) == WANT


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ([{"schema": CPUS}], "[0].name", "expected the variable's name"),
        ([{"name": "cpus"}], "[0].schema", "missing"),
        ([{"name": "cpus", "schema": "{type: integer"}], "[0].schema", "not JSON"),
        ([{"name": "cpus", "schema": "[1]"}], "[0].schema", "not a list"),
        ([{"name": "cpus", "schema": CPUS, "typo": 1}], "[0].typo", "unknown key 'typo'"),
        ([{"name": "a", "schema": {}}, {"name": "a", "schema": {}}], "[1]", "defined twice"),
        ({"cpus": {"name": "gpus", "schema": CPUS}}, "cpus.name", "differs from its key"),
        ({"cpus": 3}, "cpus", "not a number"),
        ("cpus", "", "expected template variables"),
    ],
)
def test_bad_variables_are_refused_with_their_path(data: Any, path: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        read_template_variables(data)
    found = {p.path: p.reason for p in exc.value.problems}
    assert path in found, found
    assert reason in found[path]


CONFIG: dict[str, Any] = {
    "metadata": {"name": "{{example_variable}}"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "${image_uri}",
                        "resources": {"limits": {"cpu": "{{cpus}}"}},
                    }
                ]
            }
        }
    },
}


def test_a_list_of_name_and_schema_fills_and_grants_the_variable() -> None:
    variables = read_template_variables([{"name": "cpus", "schema": json.dumps(CPUS)}])
    config = {"spec": CONFIG["spec"]}
    m = migrate("q", config, variables)
    assert not any("not used by the config" in d for d in m.decisions), m.decisions
    spec, _ = load_queue_spec(m.text("test"))
    container = spec.template["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == 2
    assert "spec.template.spec.containers[main].resources.limits.cpu" in spec.overridable


def test_an_undefined_placeholder_is_a_migrate_decision_and_a_validate_error() -> None:
    m = migrate("q", CONFIG, {"cpus": CPUS})
    (decision,) = [d for d in m.decisions if "example_variable" in d]
    assert "has no definition" in decision and "metadata.name" in decision
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(m.text("test"))
    (problem,) = [p for p in exc.value.problems if "example_variable" in p.reason]
    assert problem.path == "spec.template.metadata.name"
    assert "'{{example_variable}}' has no definition" in problem.reason
    assert problem.line is not None


SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: q
spec:
  queues: [q]
  namespace: ns
  template:
    kubernetes:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
              - name: main
                image: ${image_uri}
                args: ["--lr", "{{ lr }}"]
"""


def test_validate_names_the_placeholder_its_path_and_line() -> None:
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(SPEC)
    (problem,) = exc.value.problems
    assert problem.path == "spec.template.spec.template.spec.containers[main].args[1]"
    assert "'{{lr}}'" in problem.reason
    assert (problem.line, problem.column) == (18, 32)  # the item itself


def test_a_spec_without_placeholders_still_loads() -> None:
    load_queue_spec(SPEC.replace('"{{ lr }}"', '"0.1"'))
    assert yaml.safe_load(SPEC)["spec"]["queues"] == ["q"]
