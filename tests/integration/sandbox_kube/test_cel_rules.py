"""The vendored CRDs' `x-kubernetes-validations`, as the sandbox API server applies them.

Messages are the CRDs' own (`message:` next to each rule in tests/fixtures/crds/); paths and
the error text follow kube-apiserver 1.35+ (`<path>: Invalid value: <message>` for an object
or array, `<path>: Invalid value: "<value>": <message>` for a string, `<nil>` for the root).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from launch_agent.sandbox.kube import KubeApiServer, cel
from launch_agent.sandbox.kube.apiserver import load_crd_documents
from launch_agent.sandbox.kube.errors import ApiError

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "tests" / "fixtures" / "crds"
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
C = {"name": "main", "image": "busybox:1.36"}
POD = {"spec": {"containers": [C]}}

# Rules the model cannot run (a function missing from cel-python and from cel.K8S_FUNCTIONS):
# (CRD file, version, schema path, rule). A new CRD whose rules are not all runnable fails
# test_skipped_rules_are_exactly_the_known_ones until it is implemented or listed here.
KNOWN_SKIPPED: set[tuple[str, str, str, str]] = set()

Obj = dict[str, Any]


def schemas() -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in load_crd_documents(path):
            kind = doc["spec"]["names"]["kind"]
            for version, schema in cel.crd_schemas(doc):
                yield path.name, kind, version, dict(schema)


def compiled(kind: str, version: str) -> cel.CompiledSchema:
    for _, k, v, schema in schemas():
        if (k, v) == (kind, version):
            return cel.compile_schema(schema)
    raise KeyError((kind, version))


def errors_of(kind: str, version: str, obj: Obj, old: Obj | None = None) -> list[str]:
    return [str(e) for e in cel.validate(compiled(kind, version), obj, old)]


def test_skipped_rules_are_exactly_the_known_ones() -> None:
    found = set()
    total = 0
    for name, _, version, schema in schemas():
        c = cel.compile_schema(schema)
        found |= {(name, version, s.path, s.rule) for s in c.skipped}
        total += len(json.dumps(schema).split('"x-kubernetes-validations"')) - 1
    assert found == KNOWN_SKIPPED
    assert total > 50  # the CRDs do carry rules: the walk found them


def test_a_rule_calling_a_function_the_model_lacks_is_skipped_and_reported() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.items.isSorted()", "message": "sorted"},
                    {"rule": "has(self.a)", "message": "a is required"},
                ],
            }
        },
    }
    c = cel.compile_schema(schema)
    assert [(s.path, s.rule) for s in c.skipped] == [("spec", "self.items.isSorted()")]
    assert "isSorted" in c.skipped[0].reason
    # The other rule of the node still runs.
    assert [str(e) for e in cel.validate(c, {"spec": {}}, None)] == [
        "spec: Invalid value: a is required"
    ]


# --------------------------------------------------------------------------- upstream objects


def upstream_objects() -> Iterator[tuple[str, Obj]]:
    kinds = {(k, v) for _, k, v, _ in schemas()}
    for path in sorted(UPSTREAM.glob("*/*.json")):
        if path.name.endswith(".expected.json"):
            continue
        for item in json.loads(path.read_text())["items"]:
            version = item["apiVersion"].rpartition("/")[2]
            if (item["kind"], version) in kinds and "." in item["apiVersion"]:
                yield f"{path.parent.name}/{path.stem}:{item['kind']}", item


UPSTREAM_OBJECTS = list(upstream_objects())


@pytest.mark.parametrize(("case", "obj"), UPSTREAM_OBJECTS, ids=[c for c, _ in UPSTREAM_OBJECTS])
def test_upstream_shaped_objects_pass_every_rule(case: str, obj: Obj) -> None:
    version = obj["apiVersion"].rpartition("/")[2]
    assert errors_of(obj["kind"], version, obj) == [], case
    # As an update to itself (status included): transition rules hold, nothing changed.
    assert errors_of(obj["kind"], version, obj, copy.deepcopy(obj)) == [], case


# --------------------------------------------------------------------------- rule families


def jobset(**spec: Any) -> Obj:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 1, "template": {"spec": {"template": POD}}}
            ],
            **spec,
        },
    }


def trainjob(name: str = "tj", **spec: Any) -> Obj:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def rayjob(**spec: Any) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj"},
        "spec": {"entrypoint": "python train.py", **spec},
    }


def clusterqueue(**spec: Any) -> Obj:
    resources = [{"name": "cpu", "nominalQuota": "8"}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": resources}]}
            ],
            **spec,
        },
    }


def workload(**spec: Any) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl"},
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": 2, "template": POD}],
            **spec,
        },
    }


def with_(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    out = copy.deepcopy(obj)
    change(out)
    return out


def _dep(o: Obj) -> None:
    o["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "init", "status": "Complete"}]


CREATE_CASES: list[tuple[str, str, Obj, list[str]]] = [
    (
        "jobset-startup-policy-and-depends-on",
        "v1alpha2",
        with_(jobset(startupPolicy={"startupPolicyOrder": "InOrder"}), _dep),
        ["spec: Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive"],
    ),
    (
        "jobset-claim-template-namespace",
        "v1alpha2",
        jobset(
            volumeClaimPolicies=[
                {"templates": [{"metadata": {"name": "cache", "namespace": "other"}}]}
            ]
        ),
        [
            "spec.volumeClaimPolicies[0]: Invalid value: namespace cannot be set for"
            " VolumeClaimPolicies templates"
        ],
    ),
    (
        "trainjob-name-not-rfc1035",
        "v1alpha1",
        trainjob(name="run.v2"),
        ["<nil>: Invalid value: metadata.name must match RFC 1035 DNS label format"],
    ),
    (
        "trainjob-name-too-long",
        "v1alpha1",
        trainjob(name="a" * 64),
        ["<nil>: Invalid value: metadata.name must be no more than 63 characters"],
    ),
    (
        "trainjob-storage-uri",
        "v1alpha1",
        trainjob(initializer={"model": {"storageUri": "bucket/llama"}}),
        [
            'spec.initializer.model.storageUri: Invalid value: "bucket/llama": storageUri may'
            " be empty, or it must be a valid URI (scheme://...)"
        ],
    ),
    (
        "trainjob-managed-by",
        "v1alpha1",
        trainjob(managedBy="acme.io/controller"),
        [
            'spec.managedBy: Invalid value: "acme.io/controller": ManagedBy must be'
            " trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
        ],
    ),
    (
        "rayjob-deletion-strategy-half",
        "v1",
        rayjob(deletionStrategy={"onSuccess": {"policy": "DeleteCluster"}}),
        [
            "spec.deletionStrategy: Invalid value: deletionStrategy requires either BOTH"
            " onSuccess and onFailure, OR the deletionRules field (cannot be empty)"
        ],
    ),
    (
        "rayjob-deletion-strategy-mixed",
        "v1",
        rayjob(
            deletionStrategy={
                "onSuccess": {"policy": "DeleteCluster"},
                "deletionRules": [
                    {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}
                ],
            }
        ),
        [
            "spec.deletionStrategy: Invalid value: legacy policies (onSuccess/onFailure) and"
            " deletionRules cannot be used together within the same deletionStrategy"
        ],
    ),
    (
        "rayjob-deletion-condition-both",
        "v1",
        rayjob(
            deletionStrategy={
                "deletionRules": [
                    {
                        "policy": "DeleteCluster",
                        "condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"},
                    }
                ]
            }
        ),
        [
            "spec.deletionStrategy.deletionRules[0].condition: Invalid value: JobStatus and"
            " JobDeploymentStatus cannot be used together within the same deletion condition."
        ],
    ),
    (
        "rayjob-managed-by",
        "v1",
        rayjob(managedBy="acme.io/ray"),
        [
            'spec.managedBy: Invalid value: "acme.io/ray": the managedBy field value must be'
            " either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"
        ],
    ),
    (
        "clusterqueue-borrowing-limit-without-cohort",
        "v1beta2",
        with_(
            clusterqueue(),
            lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                borrowingLimit="2"
            ),
        ),
        ["spec: Invalid value: borrowingLimit must be nil when cohort is empty"],
    ),
    (
        "clusterqueue-flavor-resources-count",
        "v1beta2",
        with_(
            clusterqueue(),
            lambda o: o["spec"]["resourceGroups"][0].update(coveredResources=["cpu", "memory"]),
        ),
        [
            "spec.resourceGroups[0]: Invalid value: flavors must have the same number of"
            " resources as the coveredResources"
        ],
    ),
    (
        "clusterqueue-preemption",
        "v1beta2",
        clusterqueue(
            preemption={
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            }
        ),
        [
            "spec.preemption: Invalid value: reclaimWithinCohort=Never and"
            " borrowWithinCohort.Policy!=Never"
        ],
    ),
    (
        "clusterqueue-flavor-fungibility",
        "v1beta2",
        clusterqueue(
            flavorFungibility={
                "whenCanBorrow": "MayStopSearch",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "BorrowingOverPreemption",
            }
        ),
        [
            "spec.flavorFungibility: Invalid value: preference can only be set when both"
            " whenCanBorrow and whenCanPreempt are TryNextFlavor"
        ],
    ),
    (
        "workload-min-count",
        "v1beta2",
        with_(workload(), lambda o: o["spec"]["podSets"][0].update(minCount=3)),
        ["spec.podSets[0]: Invalid value: minCount should be positive and less or equal to count"],
    ),
    (
        "workload-priority-class-ref",
        "v1beta2",
        workload(priorityClassRef={"group": "scheduling.k8s.io", "kind": "Other", "name": "p"}),
        [
            "spec: Invalid value: priority should not be nil when priorityClassRef is set",
            "spec.priorityClassRef: Invalid value: only the PriorityClass kind is allowed for"
            " the scheduling.k8s.io group",
        ],
    ),
]


@pytest.mark.parametrize(
    ("case", "version", "obj", "expected"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES]
)
def test_create_breaking_a_rule_is_refused_with_its_message(
    case: str, version: str, obj: Obj, expected: list[str]
) -> None:
    assert sorted(errors_of(obj["kind"], version, obj)) == sorted(expected), case


def test_each_create_case_passes_once_fixed() -> None:
    """The base objects of the table are valid: each failure above is the rule's alone."""
    for obj, version in (
        (jobset(), "v1alpha2"),
        (trainjob(), "v1alpha1"),
        (rayjob(), "v1"),
        (clusterqueue(), "v1beta2"),
        (workload(), "v1beta2"),
    ):
        assert errors_of(obj["kind"], version, obj) == []


UPDATE_CASES: list[tuple[str, str, Obj, Callable[[Obj], None], list[str]]] = [
    (
        "jobset-success-policy",
        "v1alpha2",
        jobset(successPolicy={"operator": "All"}),
        lambda o: o["spec"]["successPolicy"].update(operator="Any"),
        ["spec.successPolicy: Invalid value: Value is immutable"],
    ),
    (
        # replicatedJobs is a map list (key: name): the item is correlated with its old self.
        "jobset-depends-on",
        "v1alpha2",
        with_(jobset(), _dep),
        lambda o: o["spec"]["replicatedJobs"][0]["dependsOn"][0].update(status="Ready"),
        ["spec.replicatedJobs[0].dependsOn: Invalid value: Value is immutable"],
    ),
    (
        "trainjob-runtime-ref",
        "v1alpha1",
        trainjob(),
        lambda o: o["spec"]["runtimeRef"].update(name="deepspeed"),
        ["spec.runtimeRef: Invalid value: field is immutable"],
    ),
    (
        "trainjob-managed-by",
        "v1alpha1",
        trainjob(managedBy="trainer.kubeflow.org/trainjob-controller"),
        lambda o: o["spec"].update(managedBy="kueue.x-k8s.io/multikueue"),
        ['spec.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable'],
    ),
    (
        "trainjob-trainer-status",
        "v1alpha1",
        trainjob(),
        lambda o: o.update(status={"trainerStatus": {"progressPercentage": 10}}),
        [
            "status.trainerStatus: Invalid value: lastUpdatedTime is required when"
            " trainerStatus is present"
        ],
    ),
    (
        "pytorchjob-queue",
        "v1",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "pt"},
            "spec": {
                "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": POD}},
                "runPolicy": {"schedulingPolicy": {"queue": "a"}},
            },
        },
        lambda o: o["spec"]["runPolicy"]["schedulingPolicy"].update(queue="b"),
        [
            'spec.runPolicy.schedulingPolicy.queue: Invalid value: "b":'
            " spec.runPolicy.schedulingPolicy.queue is immutable"
        ],
    ),
    (
        "localqueue-cluster-queue",
        "v1beta2",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": "a"},
        },
        lambda o: o["spec"].update(clusterQueue="b"),
        ['spec.clusterQueue: Invalid value: "b": field is immutable'],
    ),
    (
        "rayjob-managed-by",
        "v1",
        rayjob(managedBy="ray.io/kuberay-operator"),
        lambda o: o["spec"].update(managedBy="kueue.x-k8s.io/multikueue"),
        [
            'spec.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": the managedBy field is immutable'
        ],
    ),
    (
        "workload-status-tolerations",
        "v1beta2",
        workload(),
        lambda o: o.update(
            status={
                "admissionChecks": [
                    {
                        "name": "check",
                        "state": "Ready",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                        "podSetUpdates": [
                            {"name": "main", "tolerations": [{"operator": "Equal", "value": "x"}]}
                        ],
                    }
                ]
            }
        ),
        [
            "status.admissionChecks[0].podSetUpdates[0].tolerations: Invalid value: operator"
            " must be Exists when 'key' is empty, which means 'match all values and all keys'"
        ],
    ),
]


@pytest.mark.parametrize(
    ("case", "version", "old", "change", "expected"),
    UPDATE_CASES,
    ids=[c[0] for c in UPDATE_CASES],
)
def test_update_breaking_a_rule_is_refused_with_its_message(
    case: str, version: str, old: Obj, change: Callable[[Obj], None], expected: list[str]
) -> None:
    assert errors_of(old["kind"], version, old) == [], "the old object must be valid"
    new = with_(old, change)
    assert errors_of(old["kind"], version, new, old) == expected, case


def test_transition_rules_do_not_run_on_create() -> None:
    # `self == oldSelf` everywhere in TrainJob: on create there is no oldSelf to compare.
    assert errors_of("TrainJob", "v1alpha1", trainjob(managedBy="kueue.x-k8s.io/multikueue")) == []


# --------------------------------------------------------------------------- mechanics


def _schema(rules: list[dict[str, Any]], **props: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer"},
                    "b": {"type": "integer"},
                    "x-y": {"type": "string"},
                    "namespace": {"type": "string"},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string"},
                        "x-kubernetes-list-type": "set",
                    },
                    **props,
                },
                "x-kubernetes-validations": rules,
            }
        },
    }


def _check(rules: list[dict[str, Any]], spec: Obj, old: Obj | None = None) -> list[cel.FieldError]:
    c = cel.compile_schema(_schema(rules))
    assert c.skipped == []
    return cel.validate(c, {"spec": spec}, None if old is None else {"spec": old})


@pytest.mark.parametrize(
    ("rule", "spec", "expected"),
    [
        (
            {"rule": "self.a < self.b"},
            {"a": 2, "b": 1},
            "spec: Invalid value: failed rule: self.a < self.b",
        ),
        (
            {"rule": "self.a < self.b", "messageExpression": "'a is ' + string(self.a)"},
            {"a": 2, "b": 1},
            "spec: Invalid value: a is 2",
        ),
        (
            # A messageExpression that fails falls back to the message.
            {"rule": "self.a < self.b", "message": "a < b", "messageExpression": "self.nope"},
            {"a": 2, "b": 1},
            "spec: Invalid value: a < b",
        ),
        (
            {
                "rule": "self.a < self.b",
                "message": "a < b",
                "reason": "FieldValueForbidden",
                "fieldPath": ".a",
            },
            {"a": 2, "b": 1},
            "spec.a: Forbidden: a < b",
        ),
        (
            {"rule": "has(self.a)", "message": "a is needed", "reason": "FieldValueRequired"},
            {},
            "spec: Required value: a is needed",
        ),
        (
            {"rule": "self.a > 0", "message": "m"},
            {},
            'spec: Invalid value: "object": no such key: a evaluating rule: m',
        ),
        (
            {"rule": "self.x__dash__y == 'ok'", "message": "dash"},
            {"x-y": "no"},
            "spec: Invalid value: dash",
        ),
        (
            {
                "rule": "self.namespace == self.__namespace__ && self.namespace == 'ok'",
                "message": "ns",
            },
            {"namespace": "no"},
            "spec: Invalid value: ns",
        ),
    ],
    ids=[
        "default-message",
        "message-expression",
        "message-expression-fails",
        "reason-forbidden-field-path",
        "reason-required",
        "evaluation-error",
        "escaped-name",
        "reserved-word",
    ],
)
def test_rule_mechanics(rule: dict[str, Any], spec: Obj, expected: str) -> None:
    assert [str(e) for e in _check([rule], spec)] == [expected]


def test_set_lists_compare_equal_in_any_order() -> None:
    rule = {"rule": "self.tags == oldSelf.tags", "message": "tags are immutable"}
    assert _check([rule], {"tags": ["b", "a"]}, {"tags": ["a", "b"]}) == []
    assert [str(e) for e in _check([rule], {"tags": ["a", "c"]}, {"tags": ["a", "b"]})] == [
        "spec: Invalid value: tags are immutable"
    ]


def test_optional_old_self_rules_also_run_on_create() -> None:
    rule = {"rule": "self.a > 0", "message": "positive", "optionalOldSelf": True}
    plain = {"rule": "oldSelf.a > 0", "message": "never on create"}
    assert [str(e) for e in _check([rule, plain], {"a": 0})] == ["spec: Invalid value: positive"]


def test_unchanged_invalid_values_ratchet_on_update() -> None:
    rule = {"rule": "self.a < self.b", "message": "a < b"}
    # The value was already invalid and did not change: a warning upstream, not an error.
    assert _check([rule], {"a": 2, "b": 1}, {"a": 2, "b": 1}) == []
    assert [str(e) for e in _check([rule], {"a": 3, "b": 1}, {"a": 2, "b": 1})] == [
        "spec: Invalid value: a < b"
    ]


def test_the_root_sees_only_name_and_generate_name_of_the_metadata() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('ok')", "message": "name"},
            {"rule": "has(self.metadata.labels)", "message": "labels are not visible"},
        ],
    }
    obj = {"metadata": {"name": "okay", "labels": {"a": "b"}}}
    assert [str(e) for e in cel.validate(cel.compile_schema(schema), obj, None)] == [
        "<nil>: Invalid value: labels are not visible"
    ]


# --------------------------------------------------------------------------- the API server


def _text(body: bytes | str | None) -> str:
    return body.decode() if isinstance(body, bytes) else str(body)


async def test_the_api_server_answers_422_with_the_rule_message_and_path(
    kube: KubeApiServer, api: client.ApiClient
) -> None:
    await kube.load_crd_file(CRDS / "jobset.x-k8s.io_jobsets.yaml")
    objects = client.CustomObjectsApi(api)
    body = with_(jobset(startupPolicy={"startupPolicyOrder": "InOrder"}), _dep)
    with pytest.raises(ApiException) as caught:
        await objects.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", body
        )
    assert caught.value.status == 422
    status = json.loads(_text(caught.value.body))
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        'JobSet.jobset.x-k8s.io "js" is invalid: spec: Invalid value: StartupPolicy and'
        " DependsOn APIs are mutually exclusive"
    )
    assert status["details"] == {
        "name": "js",
        "group": "jobset.x-k8s.io",
        "kind": "JobSet",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive",
                "field": "spec",
            }
        ],
    }
    assert kube.objects.find("jobsets", "js", namespace="default") is None

    # An update that breaks a transition rule: 422, the stored object unchanged.
    created = await objects.create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        "default",
        "jobsets",
        jobset(successPolicy={"operator": "All"}),
    )
    created["spec"]["successPolicy"]["operator"] = "Any"
    with pytest.raises(ApiException) as caught:
        await objects.replace_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "js", created
        )
    assert caught.value.status == 422
    assert "spec.successPolicy: Invalid value: Value is immutable" in _text(caught.value.body)
    stored = kube.objects.get("jobsets", "js", namespace="default")
    assert stored["spec"]["successPolicy"]["operator"] == "All"


async def test_the_simulated_controllers_are_held_to_the_rules_too(kube: KubeApiServer) -> None:
    """Writes that do not come over HTTP (operators, tests) go through the same check."""
    await kube.load_crd_file(CRDS / "trainer.kubeflow.org_trainjobs.yaml")
    with pytest.raises(ApiError) as caught:
        kube.objects.create("trainjobs", trainjob(name="run.v2"), namespace="default")
    assert caught.value.code == 422
    assert "metadata.name must match RFC 1035 DNS label format" in caught.value.message
