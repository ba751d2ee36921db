"""`launch-agent validate` applies the workload CRDs' CEL rules to the sample render, so an admin
sees what the API server would refuse (422 Invalid) before any run is submitted."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from launch_agent.cli import main
from launch_agent.commands.validate_cmd import check_text
from launch_agent.render.cel_check import rule_problems
from launch_agent.render.kind_schema import crd_schema
from launch_agent.render.output_check import validate_object

from .helpers import EXAMPLES

TRAINJOB = (EXAMPLES / "trainjob.yaml").read_text()
JOBSET = (EXAMPLES / "jobset-gke.yaml").read_text()


def _trainjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def test_a_template_breaking_a_rule_is_reported_with_the_api_servers_words() -> None:
    text = TRAINJOB.replace(
        "      runtimeRef:\n",
        "      initializer:\n        model:\n          storageUri: meta-llama/Llama-3.1-8B\n"
        "      runtimeRef:\n",
    )
    assert text != TRAINJOB
    _, problems, _ = check_text(text, "1.33")
    assert [(p.path, p.reason) for p in problems] == [
        (
            "(rendered TrainJob) spec.initializer.model.storageUri",
            'Invalid value: "meta-llama/Llama-3.1-8B": storageUri may be empty, or it must be a'
            " valid URI (scheme://...)",
        )
    ]


def test_a_cross_field_rule_of_the_jobset_crd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "jobset.yaml"
    assert "      replicatedJobs:\n" in JOBSET
    spec.write_text(
        JOBSET.replace(
            "      replicatedJobs:\n",
            "      startupPolicy:\n        startupPolicyOrder: InOrder\n      replicatedJobs:\n",
            1,
        ).replace(
            "        - name: ",
            "        - dependsOn: [{name: init, status: Ready}]\n          name: ",
            1,
        )
    )
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{spec}: (rendered JobSet) spec: Invalid value: StartupPolicy and DependsOn APIs are"
        " mutually exclusive" in err
    ), err


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (_trainjob(), []),
        # The root's rules see metadata.name (RFC 1035: a dot is refused).
        (
            {**_trainjob(), "metadata": {"name": "run.v2"}},
            [("", "Invalid value: metadata.name must match RFC 1035 DNS label format")],
        ),
        (
            _trainjob(managedBy="acme.io/x"),
            [
                (
                    "spec.managedBy",
                    'Invalid value: "acme.io/x": ManagedBy must be'
                    " trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if"
                    " set",
                )
            ],
        ),
        # `self == oldSelf` is a transition rule: a create has no old object to compare with.
        (_trainjob(managedBy="kueue.x-k8s.io/multikueue"), []),
    ],
    ids=["valid", "root-rule", "scalar-rule", "transition-rule-skipped"],
)
def test_rule_problems_of_a_trainjob(obj: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    schema = crd_schema("trainjobs", "trainer.kubeflow.org", "v1alpha1")
    assert schema is not None
    assert [(p.path, p.reason) for p in rule_problems(schema, obj)] == expected


def test_rules_run_only_once_the_schema_passes() -> None:
    """customresource/strategy.go skips CEL when the schema already failed (hasBlockingErr)."""
    obj = _trainjob(managedBy="acme.io/x")
    assert [p.path for p in validate_object(obj)] == ["spec.managedBy"]
    broken = copy.deepcopy(obj)
    broken["spec"]["runtimeRef"] = "torch-distributed"  # not an object: a schema error
    assert [p.path for p in validate_object(broken)] == ["spec.runtimeRef"]


def test_message_expression_reason_and_field_path() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "my-field": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {
                        "rule": "self.a < self.my__dash__field",
                        "messageExpression": "'a is ' + string(self.a)",
                        "reason": "FieldValueForbidden",
                        "fieldPath": ".a",
                    },
                    {"rule": "self.a > 5"},
                ],
            }
        },
    }
    problems = rule_problems(schema, {"spec": {"a": 3, "my-field": 1}})
    assert [(p.path, p.reason) for p in problems] == [
        ("spec.a", "Forbidden: a is 3"),
        ("spec", "Invalid value: failed rule: self.a > 5"),
    ]
