"""Pod admission refusals from real-looking sources, and the Job controller's FailedCreate.

The messages are kube-apiserver's own wording (see `launch_agent/sandbox/kube/admission.py` for
the upstream files): a client creating a pod gets a 403 `Forbidden`, a Job whose pods are
refused keeps one `FailedCreate` Warning Event whose `count` rises with every retry.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from launch_agent.sandbox.kube.errors import ApiError

from .conftest import job_body


@pytest.fixture
async def cluster(kube: KubeApiServer) -> AsyncIterator[SimulatedCluster]:
    async with SimulatedCluster(kube) as sim:
        yield sim


def pod_body(name: str = "p", **spec: Any) -> dict[str, Any]:
    containers = [
        {
            "name": "main",
            "image": "busybox:1.36",
            "resources": {"requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}},
        }
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": containers, **spec},
    }


def quota(name: str, **hard: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"hard": hard}}


def failed_creates(kube: KubeApiServer, job: str = "job-a") -> list[dict[str, Any]]:
    return [
        e
        for e in kube.objects.list("events", "default")
        if e["reason"] == "FailedCreate" and e["involvedObject"]["name"] == job
    ]


async def test_quota_exceeded_is_forbidden_with_kube_apiservers_words(
    kube: KubeApiServer, core: client.CoreV1Api
) -> None:
    kube.objects.create("resourcequotas", quota("gpu-quota", **{"requests.nvidia.com/gpu": "1"}))
    await core.create_namespaced_pod("default", pod_body("first"))  # type: ignore[arg-type]
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod("default", pod_body("second"))  # type: ignore[arg-type]
    assert refused.value.status == 403
    assert json.loads(refused.value.body or b"{}")["message"] == (
        'pods "second" is forbidden: exceeded quota: gpu-quota, requested:'
        " requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited:"
        " requests.nvidia.com/gpu=1"
    )


async def test_the_quota_controller_writes_hard_and_used(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    """kube-controller-manager's resource quota controller (`pkg/controller/resourcequota/
    resource_quota_controller.go`, syncResourceQuota): `status.hard` is the spec's, `status.used`
    the namespace's usage of those resources only; `kubectl describe quota` reads both, and on
    a real cluster the admission plugin enforces nothing until they are written."""
    kube.objects.create("resourcequotas", quota("team", **{"requests.cpu": "4", "pods": "10"}))
    cluster.step()
    [got] = kube.objects.list("resourcequotas", "default")
    assert got["status"] == {
        "hard": {"requests.cpu": "4", "pods": "10"},
        "used": {"requests.cpu": "0", "pods": "0"},
    }
    kube.objects.create("pods", pod_body("a"))
    body = pod_body("b")
    body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    kube.objects.create("pods", body)
    cluster.step()
    [got] = kube.objects.list("resourcequotas", "default")
    assert got["status"]["used"] == {"requests.cpu": "2500m", "pods": "2"}


async def test_terminal_pods_use_no_quota(kube: KubeApiServer) -> None:
    kube.objects.create("resourcequotas", quota("pods", pods="1", memory="1Gi"))
    kube.objects.create("pods", pod_body("done"))
    kube.store.update(
        kube.store.rt("pods"),
        "default",
        "done",
        {**kube.objects.get("pods", "done"), "status": {"phase": "Succeeded"}},
        subresource="status",
    )
    kube.objects.create("pods", pod_body("next"))


async def test_missing_service_account_is_forbidden(kube: KubeApiServer) -> None:
    with pytest.raises(ApiError) as refused:
        kube.objects.create("pods", pod_body("p", serviceAccountName="trainer"))
    assert refused.value.code == 403
    assert refused.value.message == (
        'pods "p" is forbidden: error looking up service account default/trainer:'
        ' serviceaccount "trainer" not found'
    )
    kube.objects.create("serviceaccounts", {"metadata": {"name": "trainer"}})
    kube.objects.create("pods", pod_body("p", serviceAccountName="trainer"))
    # The service account controller's `default` exists in every namespace.
    kube.objects.create("pods", pod_body("q", serviceAccountName="default"))


async def test_pod_security_restricted_namespace_refuses_with_each_check(
    kube: KubeApiServer,
) -> None:
    kube.objects.create(
        "namespaces",
        {
            "metadata": {
                "name": "secure",
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            }
        },
    )
    with pytest.raises(ApiError) as refused:
        kube.objects.create("pods", pod_body("p"), namespace="secure")
    message = refused.value.message
    assert message.startswith('pods "p" is forbidden: violates PodSecurity "restricted:latest": ')
    for words in (
        'allowPrivilegeEscalation != false (container "main" must set'
        " securityContext.allowPrivilegeEscalation=false)",
        'unrestricted capabilities (container "main" must set'
        ' securityContext.capabilities.drop=["ALL"])',
        'runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true)',
        'seccompProfile (pod or container "main" must set securityContext.seccompProfile.type'
        ' to "RuntimeDefault" or "Localhost")',
    ):
        assert words in message
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    body = pod_body("ok")
    body["spec"]["containers"][0]["securityContext"] = restricted
    kube.objects.create("pods", body, namespace="secure")


RESTRICTED_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        # Restricted: its capabilities and volume checks replace baseline's
        # (`OverrideCheckIDs` in check_capabilities_restricted.go, check_restrictedVolumes.go);
        # kube-apiserver v1.37.2 answers exactly this on the real tier.
        (
            "restricted",
            'violates PodSecurity "restricted:latest": unrestricted capabilities (container'
            ' "main" must not include "SYS_PTRACE" in securityContext.capabilities.add),'
            ' restricted volume types (volumes "data", "nfs" use restricted volume types'
            ' "hostPath", "nfs")',
        ),
        (
            "baseline",
            'violates PodSecurity "baseline:latest": non-default capabilities (container "main"'
            ' must not include "SYS_PTRACE" in securityContext.capabilities.add), hostPath'
            ' volumes (volume "data")',
        ),
    ],
)
async def test_pod_security_levels_report_each_check_once(
    kube: KubeApiServer, level: str, expected: str
) -> None:
    kube.objects.create(
        "namespaces",
        {"metadata": {"name": "secure", "labels": {"pod-security.kubernetes.io/enforce": level}}},
    )
    body = pod_body(
        "p",
        volumes=[
            {"name": "data", "hostPath": {"path": "/data"}},
            {"name": "nfs", "nfs": {"server": "nfs.example", "path": "/x"}},
            {"name": "img", "image": {"reference": "registry.example/weights:1"}},
            {"name": "cache", "emptyDir": {}},
        ],
    )
    add = {**RESTRICTED_SC, "capabilities": {"drop": ["ALL"], "add": ["SYS_PTRACE"]}}
    body["spec"]["containers"][0]["securityContext"] = add
    with pytest.raises(ApiError) as refused:
        kube.objects.create("pods", body, namespace="secure")
    assert refused.value.message == f'pods "p" is forbidden: {expected}'


async def test_job_whose_pods_are_refused_leaves_one_failed_create_event(
    kube: KubeApiServer, cluster: SimulatedCluster, batch: client.BatchV1Api
) -> None:
    kube.objects.create("resourcequotas", quota("two-pods", pods="0"))
    await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    cluster.step()
    [event] = failed_creates(kube)
    assert event["type"] == "Warning"
    assert event["source"] == {"component": "job-controller"}
    assert event["involvedObject"]["kind"] == "Job"
    assert event["message"].startswith('Error creating: pods "job-a-')
    assert (
        "is forbidden: exceeded quota: two-pods, requested: pods=1, used: pods=0"
        in (event["message"])
    )
    assert event["count"] == 1
    # The controller retries after its API back-off (1 s, doubling, at most 60 s); each pod
    # name makes a new message, until the recorder combines similar Events into one.
    cluster.advance(1)
    cluster.advance(2)
    assert len(failed_creates(kube)) == 3
    for _ in range(12):
        cluster.advance(60)
    events = failed_creates(kube)
    assert len(events) == 10
    [combined] = [e for e in events if e["count"] > 1]
    assert combined["message"].startswith(
        '(combined from similar events): Error creating: pods "job-a-'
    )
    assert combined["lastTimestamp"] > combined["firstTimestamp"]
    assert kube.objects.list("pods", "default") == []
    # The cause goes away: the next retry creates the pod.
    kube.objects.delete("resourcequotas", "two-pods")
    cluster.advance(60)
    assert len(kube.objects.list("pods", "default")) == 1


async def test_missing_secret_volume_keeps_the_pod_creating_with_failed_mount_events(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    body = pod_body("p", volumes=[{"name": "creds", "secret": {"secretName": "wandb-creds"}}])
    kube.objects.create("pods", body)
    cluster.step()
    cluster.advance(30)
    pod = kube.objects.get("pods", "p")
    assert pod["status"]["phase"] == "Pending"
    [status] = pod["status"]["containerStatuses"]
    assert status["state"] == {"waiting": {"reason": "ContainerCreating"}}
    [event] = [e for e in kube.objects.list("events", "default") if e["reason"] == "FailedMount"]
    assert event["type"] == "Warning" and event["source"] == {"component": "kubelet"}
    assert event["message"] == (
        'MountVolume.SetUp failed for volume "creds" : secret "wandb-creds" not found'
    )
    assert event["count"] > 3, "the volume manager retries on its back-off"
    kube.objects.create("secrets", {"metadata": {"name": "wandb-creds"}, "data": {}})
    cluster.advance(130)
    pod = kube.objects.get("pods", "p")
    assert pod["status"]["phase"] in ("Running", "Succeeded")


async def test_optional_secret_volume_does_not_block(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    volume = {"name": "creds", "secret": {"secretName": "absent", "optional": True}}
    kube.objects.create("pods", pod_body("p", volumes=[volume]))
    cluster.step()
    cluster.advance(2)
    assert kube.objects.get("pods", "p")["status"]["phase"] == "Running"


async def test_events_are_served_at_events_k8s_io_v1_too(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    """The events.k8s.io/v1 view of core Events, as `pkg/apis/events/v1/conversion.go` maps
    it. (Legacy Events have no `eventTime`: kubernetes_asyncio's EventsV1Event refuses them,
    as it does on a real cluster.)"""
    kube.objects.create("resourcequotas", quota("none", pods="0"))
    kube.objects.create("jobs", job_body())
    cluster.step()
    listed = kube.objects.list("events.events.k8s.io", "default")
    [event] = [e for e in listed if e["reason"] == "FailedCreate"]
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["type"] == "Warning"
    assert (event["regarding"]["kind"], event["regarding"]["name"]) == ("Job", "job-a")
    assert event["note"].startswith('Error creating: pods "job-a-')
    assert event["reportingController"] == "job-controller"
    assert event["deprecatedCount"] == 1
    assert event["deprecatedSource"] == {"component": "job-controller"}


@pytest.mark.parametrize(
    ("metadata", "field", "words"),
    [
        ({"name": "Bad_Name"}, "metadata.name", "a lowercase RFC 1123 subdomain must consist of"),
        ({"name": "x" * 254}, "metadata.name", "must be no more than 253 characters"),
        (
            {"name": "p", "labels": {"team": "has space"}},
            "metadata.labels",
            "a valid label must be an empty string or consist of alphanumeric characters",
        ),
        (
            {"name": "p", "labels": {"team": "v" * 64}},
            "metadata.labels",
            "must be no more than 63 characters",
        ),
        (
            {"name": "p", "labels": {"Bad Prefix/key": "v"}},
            "metadata.labels",
            "prefix part a lowercase RFC 1123 subdomain",
        ),
        (
            {"name": "p", "annotations": {"big": "x" * (256 * 1024)}},
            "metadata.annotations",
            "Too long: must have at most 262144 bytes",
        ),
    ],
)
async def test_metadata_is_validated_like_kube_apiserver(
    kube: KubeApiServer, metadata: dict[str, Any], field: str, words: str
) -> None:
    body = {**pod_body(), "metadata": metadata}
    with pytest.raises(ApiError) as refused:
        kube.objects.create("pods", body)
    assert refused.value.code == 422
    assert f"{field}: Invalid value" in refused.value.message or "Too long" in (
        refused.value.message
    )
    assert words in refused.value.message


async def test_label_updates_are_validated_too(kube: KubeApiServer) -> None:
    kube.objects.create("pods", pod_body("p"))
    with pytest.raises(ApiError) as refused:
        kube.objects.patch("pods", "p", {"metadata": {"labels": {"k": "bad value"}}})
    assert refused.value.code == 422
    assert "metadata.labels" in refused.value.message


async def test_limit_range_defaults_and_refuses_outside_min_and_max(kube: KubeApiServer) -> None:
    kube.objects.create(
        "limitranges",
        {
            "metadata": {"name": "per-container"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"memory": "512Mi"},
                        "defaultRequest": {"memory": "256Mi"},
                        "max": {"cpu": "1"},
                    }
                ]
            },
        },
    )
    body = pod_body("ok")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m"}}
    created = kube.objects.create("pods", body)
    resources = created["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "500m", "memory": "512Mi"}
    assert resources["requests"]["memory"] == "512Mi"  # the default limit is the request
    big = pod_body("big")
    big["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "4"}}
    with pytest.raises(ApiError) as refused:
        kube.objects.create("pods", big)
    assert refused.value.code == 403
    assert refused.value.message == (
        'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 4'
    )
