"""The override policy: which submitter values are overrides, and which are allowed."""

from __future__ import annotations

import copy
import dataclasses
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


MAIN = "runSpec.resource_args.kubernetes.spec.template.spec.containers[main]"
POD = "runSpec.resource_args.kubernetes.spec.template.spec"
ARGS_TEMPLATE = job_template(image="${image_uri}", args=["--epochs", "1"])

STRUCTURE = [
    # (what, submitter layer, path refused, reason substring) with nothing overridable
    ("a mapping where the image is", containers(image={}), f"{MAIN}.image", "is a mapping"),
    ("a list where the image is", containers(image=[]), f"{MAIN}.image", "is a list"),
    ("an empty image", containers(image=""), f"{MAIN}.image", "is empty"),
    (
        "a mapping where the containers are",
        {"spec": {"template": {"spec": {"containers": {}}}}},
        f"{POD}.containers",
        "is a mapping where the template has a list",
    ),
    ("a mapping where env is", containers(env={}), f"{MAIN}.env", "is a mapping"),
    ("a scalar where env is", containers(env="x"), f"{MAIN}.env", "is a scalar"),
    ("a null env", containers(env=None), f"{MAIN}.env", "removes the template's value"),
    (
        "a new empty mapping",
        containers(securityContext={}),
        f"{MAIN}.securityContext",
        "adds an empty mapping",
    ),
    ("a new empty list", containers(command=[]), f"{MAIN}.command", "adds an empty list"),
    ("a new empty string", containers(workingDir=""), f"{MAIN}.workingDir", "adds an empty"),
    ("a null for a key the template lacks", containers(stdin=None), f"{MAIN}.stdin", "null"),
    (
        "a list replaced by a longer one",
        {"spec": {"template": {"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}}}},
        f"{POD}.tolerations",
        "",
    ),
    (
        "a renamed container is a new item",
        {"spec": {"template": {"spec": {"containers": [{"name": "other"}]}}}},
        f"{POD}.containers[other]",
        "adds a list item",
    ),
    (
        "a mapping where a pod template is",
        {"spec": {"template": []}},
        "runSpec.resource_args.kubernetes.spec.template",
        "is a list where the template has a mapping",
    ),
]


@pytest.mark.parametrize(
    ("what", "layer", "path", "reason"), STRUCTURE, ids=[c[0] for c in STRUCTURE]
)
def test_structural_changes_are_overrides(
    what: str, layer: dict[str, Any], path: str, reason: str
) -> None:
    template = {**TEMPLATE}
    template["spec"] = {
        "template": {
            "spec": {
                "containers": TEMPLATE["spec"]["template"]["spec"]["containers"],
                "tolerations": [{"key": "a"}],
            }
        }
    }
    spec = make_spec(template, overridable=[])
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    found = {p.path: p.reason for p in exc.value.problems}
    assert path in found, found
    assert reason in found[path]
    assert "may not be overridden" in found[path]


def test_an_echo_of_the_template_with_every_type_is_no_change() -> None:
    spec = make_spec(TEMPLATE, overridable=[])
    render(spec, make_item(copy.deepcopy(dict(spec.template))), None, SETTINGS)


def template_args(template: dict[str, Any]) -> list[str]:
    args: list[str] = template["spec"]["template"]["spec"]["containers"][0].get("args", [])
    return args


@pytest.mark.parametrize(
    ("template", "args", "refused"),
    [
        (ARGS_TEMPLATE, [], False),  # [] means "the job's own" in W&B: not applied
        (ARGS_TEMPLATE, ["--epochs", "1"], False),  # an echo
        (ARGS_TEMPLATE, ["--epochs", "2"], True),
        (TEMPLATE, [], False),  # [] where there are none changes nothing
    ],
)
def test_overrides_args_are_checked_when_they_change_what_runs(
    template: dict[str, Any], args: list[str], refused: bool
) -> None:
    spec = make_spec(template, overridable=[])
    item = make_item(None, overrides={"args": args})
    if not refused:
        out = render(spec, item, None, SETTINGS)
        container = out.workload["spec"]["template"]["spec"]["containers"][0]
        assert container.get("args", []) == (args or template_args(template))
        return
    with pytest.raises(InvalidInput) as exc:
        render(spec, item, None, SETTINGS)
    assert [p.path for p in exc.value.problems] == ["runSpec.overrides.args"]


SECRET_TEMPLATE = job_template(
    image="${image_uri}",
    env=[{"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
)


def env(*entries: dict[str, Any]) -> dict[str, Any]:
    return containers(env=list(entries))


def pod(**fields: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": fields}}}


GRANT_PROOF = [
    # (what, submitter layer, refused path, reason substring) under `**`
    (
        "env secretKeyRef to another Secret",
        env({"name": "X", "valueFrom": {"secretKeyRef": {"name": "prod-db", "key": "k"}}}),
        f"{MAIN}.env[X].valueFrom.secretKeyRef.name",
        "names Secret 'prod-db'",
    ),
    (
        "the template's Secret ref renamed",
        env({"name": "DB", "valueFrom": {"secretKeyRef": {"name": "prod-db"}}}),
        f"{MAIN}.env[DB].valueFrom.secretKeyRef.name",
        "security.secrets (listed: team-a)",
    ),
    (
        "envFrom secretRef",
        containers(envFrom=[{"secretRef": {"name": "prod-db"}}]),
        f"{MAIN}.envFrom[0].secretRef.name",
        "names Secret 'prod-db'",
    ),
    (
        "a secret volume",
        pod(volumes=[{"name": "s", "secret": {"secretName": "prod-db"}}]),
        f"{POD}.volumes[s].secret.secretName",
        "names Secret 'prod-db'",
    ),
    (
        "a projected secret",
        pod(volumes=[{"name": "p", "projected": {"sources": [{"secret": {"name": "prod-db"}}]}}]),
        f"{POD}.volumes[p].projected.sources[0].secret.name",
        "names Secret 'prod-db'",
    ),
    (
        "imagePullSecrets",
        pod(imagePullSecrets=[{"name": "prod-db"}]),
        f"{POD}.imagePullSecrets[prod-db]",
        "names Secret 'prod-db'",
    ),
    (
        "a CSI nodePublishSecretRef",
        pod(
            volumes=[
                {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "prod-db"}}}
            ]
        ),
        f"{POD}.volumes[c].csi.nodePublishSecretRef.name",
        "names Secret 'prod-db'",
    ),
    (
        "a projected service-account token",
        pod(
            volumes=[
                {
                    "name": "t",
                    "projected": {"sources": [{"serviceAccountToken": {"audience": "vault"}}]},
                }
            ]
        ),
        f"{POD}.volumes[t].projected.sources[0].serviceAccountToken",
        "audience 'vault'",
    ),
    (
        "a nested namespace",
        {"spec": {"template": {"metadata": {"namespace": "kube-system"}}}},
        "runSpec.resource_args.kubernetes.spec.template.metadata.namespace",
        "names a namespace",
    ),
    (
        "a namespaceSelector in affinity",
        pod(
            affinity={
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "k", "namespaceSelector": {}}
                    ]
                }
            }
        ),
        f"{POD}.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".namespaceSelector",
        "names a namespace",
    ),
    (
        "a Kueue queue label",
        {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other-team"}}},
        'runSpec.resource_args.kubernetes.metadata.labels["kueue.x-k8s.io/queue-name"]',
        "reserved",
    ),
    (
        "a Kueue priority label on the pod template",
        {"spec": {"template": {"metadata": {"labels": {"kueue.x-k8s.io/priority-class": "p"}}}}},
        'runSpec.resource_args.kubernetes.spec.template.metadata.labels["kueue.x-k8s.io/priority-class"]',
        "reserved",
    ),
    (
        "the agent's own annotation",
        {"metadata": {"annotations": {"launch-agent.io/queue-spec": "other"}}},
        'runSpec.resource_args.kubernetes.metadata.annotations["launch-agent.io/queue-spec"]',
        "reserved",
    ),
    (
        "a nested kind",
        pod(
            volumes=[
                {
                    "name": "e",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "spec": {"dataSource": {"kind": "VolumeSnapshot", "name": "x"}}
                        }
                    },
                }
            ]
        ),
        f"{POD}.volumes[e].ephemeral.volumeClaimTemplate.spec.dataSource.kind",
        "sets an object's kind",
    ),
]


@pytest.mark.parametrize(
    ("what", "layer", "path", "reason"), GRANT_PROOF, ids=[c[0] for c in GRANT_PROOF]
)
def test_refused_even_under_a_full_grant(
    what: str, layer: dict[str, Any], path: str, reason: str
) -> None:
    spec = make_spec(SECRET_TEMPLATE, overridable=["**"], security={"secrets": ["team-a"]})
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    found = {p.path: p.reason for p in exc.value.problems}
    assert path in found, found
    assert reason in found[path]
    assert "refused even where the queue spec grants overrides" in found[path]


GRANT_PROOF_OK = [
    (
        "a listed Secret",
        env({"name": "X", "valueFrom": {"secretKeyRef": {"name": "team-a", "key": "k"}}}),
    ),
    (
        "the template's Secret with another key",
        env({"name": "DB", "valueFrom": {"secretKeyRef": {"key": "user"}}}),
    ),
    (
        "a downward-API fieldRef with its apiVersion",
        env(
            {
                "name": "N",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            }
        ),
    ),
    ("ordinary labels", {"metadata": {"labels": {"team": "a", "namespace": "x"}}}),
    (
        "a granted token audience",
        pod(
            volumes=[
                {
                    "name": "t",
                    "projected": {"sources": [{"serviceAccountToken": {"audience": "sts"}}]},
                }
            ]
        ),
    ),
    ("shareProcessNamespace is not a namespace", pod(shareProcessNamespace=True)),
]


@pytest.mark.parametrize(("what", "layer"), GRANT_PROOF_OK, ids=[c[0] for c in GRANT_PROOF_OK])
def test_granted_values_that_are_safe(what: str, layer: dict[str, Any]) -> None:
    spec = make_spec(
        SECRET_TEMPLATE,
        overridable=["**"],
        security={"secrets": ["team-a"], "serviceAccountTokenAudiences": ["sts"]},
    )
    render(spec, make_item(layer), None, SETTINGS)


class CountingDict(dict[str, Any]):
    """An env entry that counts how often the render reads from it."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingDict.reads += 1
        return super().get(key, default)


def _render_reads(n: int) -> int:
    loaded = make_spec(
        job_template(image="${image_uri}", env=[{"name": "V0", "value": "a"}]),
        overridable=["**.containers[*].env"],
    )
    # The template's entries count too: the old walks scanned the template's list.
    template = job_template(
        image="${image_uri}", env=[CountingDict(name=f"V{i}", value="a") for i in range(n)]
    )
    spec = dataclasses.replace(loaded, template=template, cache={})
    entries = [CountingDict(name=f"V{i}", value="b") for i in reversed(range(n))]
    item = make_item(containers(env=entries))
    CountingDict.reads = 0
    out = render(spec, item, None, SETTINGS)
    assert out.workload["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "b"
    return CountingDict.reads


def test_checking_and_merging_a_long_env_is_linear() -> None:
    # Reads, not seconds: 8x the entries must cost about 8x the reads (the old policy walk and
    # merge scanned the template's list for each entry: 64x).
    small, large = _render_reads(500), _render_reads(4000)
    assert large <= 8 * small * 1.2, (small, large)


def test_removing_the_admins_reserved_labels_is_refused_under_a_full_grant() -> None:
    # Dropping the admin's Kueue label takes the run out of its quota, as setting another would.
    template = {**TEMPLATE, "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}}
    spec = make_spec(template, overridable=["**"])
    layers: tuple[dict[str, Any], ...] = (
        {"metadata": {"labels": None}},
        {"metadata": {"labels": []}},
    )
    for layer in layers:
        with pytest.raises(InvalidInput) as exc:
            render(spec, make_item(layer), None, SETTINGS)
        assert [p.path for p in exc.value.problems] == [
            'runSpec.resource_args.kubernetes.metadata.labels["kueue.x-k8s.io/queue-name"]'
        ]
        assert "reserved for the agent and Kueue" in exc.value.problems[0].reason
    # Other labels stay the submitter's to change under the grant.
    render(spec, make_item({"metadata": {"labels": {"team": "b"}}}), None, SETTINGS)
