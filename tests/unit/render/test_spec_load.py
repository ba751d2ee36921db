"""Bad queue specs of every kind get precise errors, all of them at once."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.spec_load import build_queue_spec, load_queue_spec, queue_spec_schema

from .helpers import job_template


def doc(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"queues": ["q"], "namespace": "ns", "template": job_template(image="i")}
    base.update(spec)
    return {
        "apiVersion": "launch-agent/v1",
        "kind": "QueueSpec",
        "metadata": {"name": "s"},
        "spec": base,
    }


def problems_of(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(InvalidInput) as exc:
        build_queue_spec(data)
    return [(p.path, p.reason) for p in exc.value.problems]


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        ("apiVersion: launch-agent/v1\nkind: [unclosed\n", "line 3, column 1", "invalid YAML"),
        ("a: b\n  c: d\n", "line 2, column 4", "invalid YAML"),
        ("a: 1\n---\nb: 2\n", "", "exactly one YAML document"),
        ("", "", "exactly one YAML document"),
        ("x" * 1_000_001, "", "the limit is 1,000,000"),
    ],
)
def test_malformed_yaml(text: str, path: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(text)
    (problem,) = exc.value.problems
    assert problem.path == path
    assert reason in problem.reason


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(kind="Spec"), [("kind", "'QueueSpec' was expected")]),
        (lambda d: d["metadata"].update(name="Bad_Name"), [("metadata.name", "does not match")]),
        (lambda d: d["spec"].pop("queues"), [("spec", "'queues' is a required property")]),
        (lambda d: d["spec"].update(queues=[]), [("spec.queues", "should be non-empty")]),
        (
            lambda d: d["spec"].update(namespce="x"),
            [("spec.namespce", "unknown key 'namespce'; did you mean 'namespace'?")],
        ),
        (
            lambda d: d["spec"].update(security={"privilegd": True}),
            [("spec.security.privilegd", "unknown key 'privilegd'; did you mean 'privileged'?")],
        ),
        (
            lambda d: d["spec"].update(security={"secrets": ["Team_A"]}),
            [("spec.security.secrets[0]", "does not match")],
        ),
        (
            lambda d: d["spec"].update(security={"serviceAccountTokenAudiences": "vault"}),
            [("spec.security.serviceAccountTokenAudiences", "is not of type 'array'")],
        ),
        (
            lambda d: d["spec"].update(kueue={"queueName": 3}),
            [("spec.kueue.queueName", "is not of type 'string'")],
        ),
        (
            lambda d: d["spec"].update(defaults={"backoffLimit": -1}),
            [("spec.defaults.backoffLimit", "less than the minimum")],
        ),
    ],
)
def test_schema_errors_have_paths(mutate: Any, expected: list[tuple[str, str]]) -> None:
    data = doc()
    mutate(data)
    found = problems_of(data)
    assert [p for p, _ in found] == [p for p, _ in expected]
    for (_, reason), (_, want) in zip(found, expected, strict=True):
        assert want in reason


def test_every_schema_problem_is_reported() -> None:
    data = doc(queues="q", namespace="Not A Namespace", overridable=[1])
    assert sorted(p for p, _ in problems_of(data)) == [
        "spec.namespace",
        "spec.overridable[0]",
        "spec.queues",
    ]


@pytest.mark.parametrize(
    ("spec", "path", "reason"),
    [
        (
            {"template": {"apiVersion": "example.com/v1", "kind": "Widget", "spec": {}}},
            "spec.template",
            "is not a known workload kind",
        ),
        (
            {
                "template": {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "spec": {"pods": {"template": {}}},
                },
                "podTemplatePaths": ["spec.pods.tmpl"],
            },
            "spec.podTemplatePaths[0]",
            "finds no pod template",
        ),
        (
            {
                "template": {"apiVersion": "example.com/v1", "kind": "Widget", "spec": {}},
                "podTemplatePaths": ["spec.**.template"],
            },
            "spec.podTemplatePaths[0]",
            "'**' is not allowed",
        ),
        ({"podTemplatePaths": ["spec.template"]}, "spec.podTemplatePaths", "is built in"),
        ({"overridable": ["spec..x"]}, "spec.overridable[0]", "invalid path"),
        (
            {"template": {"kubernetes": {"kind": "Widget", "spec": {}}}},
            "spec.template.kubernetes.apiVersion",
            "is required",
        ),
        (
            {"template": {**job_template(image="i"), "namespace": "elsewhere"}},
            "spec.template.namespace",
            "differs from spec.namespace",
        ),
        (
            {
                "kueue": {"queueName": "a"},
                "template": {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "spec": {"tasks": []},
                },
            },
            "spec.kueue",
            "Kueue cannot queue",
        ),
    ],
)
def test_semantic_errors(spec: dict[str, Any], path: str, reason: str) -> None:
    found = problems_of(doc(**spec))
    assert any(p == path and reason in r for p, r in found), found


def test_custom_kind_with_declared_paths() -> None:
    template = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "spec": {
            "replicaSpecs": {
                "a": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c"}]}}}
            }
        },
    }
    spec, _ = build_queue_spec(
        doc(
            template=template,
            podTemplatePaths=["spec.replicaSpecs.*.template"],
            suspendPath="spec.suspend",
        )
    )
    assert spec.custom_kind is not None
    from launch_agent.render.pipeline import pod_sets, render
    from launch_agent.render.settings import RenderSettings

    from .helpers import make_item

    out = render(spec, make_item(), None, RenderSettings()).workload
    assert [c for c, _ in pod_sets(out, spec.custom_kind)] == [3]
    assert (
        out["spec"]["replicaSpecs"]["a"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
        is True
    )


def test_template_name_is_ignored_with_a_warning() -> None:
    template = job_template(image="i")
    template["metadata"] = {"name": "fixed", "labels": {"a": "b"}}
    spec, warnings = build_queue_spec(doc(template=template))
    assert [w.path for w in warnings] == ["spec.template.metadata.name"]
    assert spec.template["metadata"] == {"labels": {"a": "b"}}


def test_every_example_matches_the_shipped_schema() -> None:
    from .helpers import EXAMPLES

    schema = queue_spec_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in sorted(EXAMPLES.glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    # Editors need it as plain JSON next to the code.
    assert json.loads(json.dumps(schema)) == schema


def test_security_lists_secrets_and_token_audiences() -> None:
    data = doc()
    data["spec"]["security"] = {
        "secrets": ["team-a-data"],
        "serviceAccountTokenAudiences": ["vault"],
    }
    spec, _ = build_queue_spec(data)
    assert spec.security.secrets == frozenset({"team-a-data"})
    assert spec.security.service_account_token_audiences == frozenset({"vault"})
