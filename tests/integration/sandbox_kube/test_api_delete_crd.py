"""DELETE with finalizers, propagation and garbage collection; deletecollection; CRDs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from launch_agent.sandbox.kube import CrdError, KubeApiServer
from launch_agent.sandbox.kube.apiserver import load_crd_documents

from .conftest import CRDS, job_body


def _pod(
    name: str, owner: dict[str, Any] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {"metadata": meta, "spec": {"containers": [{"name": "m", "image": "i"}]}}


async def test_finalizers_hold_deletion_until_removed(
    kube: KubeApiServer, core: client.CoreV1Api
) -> None:
    await core.create_namespaced_config_map(
        "default",
        {"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}},  # type: ignore[arg-type]
    )
    listed = await core.list_namespaced_config_map("default")
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    seen: list[str] = []

    async def collect() -> None:
        async for event in stream:
            seen.append(event["type"])
            if event["type"] == "DELETED":
                return

    async with asyncio.TaskGroup() as tg:
        tg.create_task(collect(), name="collect")
        await asyncio.sleep(0.05)
        async with (
            aiohttp.ClientSession() as http,
            http.delete(f"{kube.url}/api/v1/namespaces/default/configmaps/cm") as resp,
        ):
            assert resp.status == 202
            assert (await resp.json())["metadata"]["deletionTimestamp"]
        held = await core.read_namespaced_config_map("cm", "default")
        assert held.metadata.deletion_timestamp is not None
        await core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    assert seen == ["MODIFIED", "DELETED"]
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_config_map("cm", "default")
    assert err.value.status == 404
    await w.close()


@pytest.mark.parametrize(
    ("policy", "pods_left", "orphaned"),
    [("Background", 0, False), ("Foreground", 0, False), ("Orphan", 2, True), (None, 2, True)],
)
async def test_propagation_policies(
    kube: KubeApiServer,
    batch: client.BatchV1Api,
    policy: str | None,
    pods_left: int,
    orphaned: bool,
) -> None:
    job = kube.objects.create("jobs", job_body())
    kube.objects.create("pods", _pod("p1", job))
    kube.objects.create("pods", _pod("p2", job))
    body = client.V1DeleteOptions(propagation_policy=policy) if policy else None
    await batch.delete_namespaced_job("job-a", "default", body=body)  # type: ignore[arg-type]
    assert kube.objects.find("jobs", "job-a") is None
    pods = kube.objects.list("pods")
    assert len(pods) == pods_left
    if orphaned:  # batch/v1 Jobs orphan their pods by default, like kube-apiserver
        assert all("ownerReferences" not in p["metadata"] for p in pods)


async def test_foreground_waits_for_dependents_with_finalizers(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    job = kube.objects.create("jobs", job_body())
    pod = _pod("p1", job)
    pod["metadata"]["finalizers"] = ["example.com/hold"]
    kube.objects.create("pods", pod)
    await batch.delete_namespaced_job("job-a", "default", propagation_policy="Foreground")
    owner = kube.objects.get("jobs", "job-a")
    assert (
        "foregroundDeletion" in owner["metadata"]["finalizers"]
        and owner["metadata"]["deletionTimestamp"]
    )
    assert kube.objects.get("pods", "p1")["metadata"]["deletionTimestamp"]
    kube.objects.patch("pods", "p1", {"metadata": {"finalizers": None}})
    assert kube.objects.find("pods", "p1") is None
    assert kube.objects.find("jobs", "job-a") is None


async def test_gc_keeps_dependents_with_another_live_owner(
    kube: KubeApiServer, core: client.CoreV1Api
) -> None:
    a = kube.objects.create("configmaps", {"metadata": {"name": "a"}})
    b = kube.objects.create("configmaps", {"metadata": {"name": "b"}})
    pod = _pod("shared", a)
    pod["metadata"]["ownerReferences"].append(
        {
            **pod["metadata"]["ownerReferences"][0],
            "name": "b",
            "uid": b["metadata"]["uid"],
            "controller": False,
        }
    )
    kube.objects.create("pods", pod)
    await core.delete_namespaced_config_map("a", "default")
    left = kube.objects.get("pods", "shared")
    assert [r["name"] for r in left["metadata"]["ownerReferences"]] == ["b"]
    await core.delete_namespaced_config_map("b", "default")
    assert kube.objects.find("pods", "shared") is None


async def test_delete_preconditions_and_responses(
    kube: KubeApiServer, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    with pytest.raises(ApiException) as err:
        await batch.delete_namespaced_job(
            "job-a",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="wrong")),
        )
    assert err.value.status == 409
    status = await batch.delete_namespaced_job("job-a", "default")
    assert status.status == "Success" and status.details.name == "job-a"
    await core.create_namespaced_pod("default", _pod("p"))  # type: ignore[arg-type]
    deleted = await core.delete_namespaced_pod("p", "default")
    assert deleted.metadata.name == "p"  # pods answer with the deleted object


async def test_listed_built_in_items_carry_no_apiversion_or_kind(kube: KubeApiServer) -> None:
    # As kube-apiserver 1.37 serves a built-in type's list (checked against it: the items'
    # TypeMeta is empty and omitted), and as the deletecollection response lists what went.
    kube.objects.create("configmaps", {"metadata": {"name": "a"}})
    async with aiohttp.ClientSession() as http:
        path = f"{kube.url}/api/v1/namespaces/default/configmaps"
        async with http.get(path) as resp:
            listed = await resp.json()
        async with http.delete(path) as resp:
            deleted = await resp.json()
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "ConfigMapList")
    assert [sorted(i) for i in listed["items"]] == [["metadata"]]
    assert [sorted(i) for i in deleted["items"]] == [["metadata"]]


async def test_deletecollection_with_selector(kube: KubeApiServer, core: client.CoreV1Api) -> None:
    for i in range(4):
        await core.create_namespaced_pod(
            "default",
            _pod(f"p{i}", labels={"job-name": "x" if i < 3 else "y"}),  # type: ignore[arg-type]
        )
    await core.delete_collection_namespaced_pod("default", label_selector="job-name=x")
    assert [p["metadata"]["name"] for p in kube.objects.list("pods")] == ["p3"]


async def test_deleting_a_namespace_deletes_its_objects(
    kube: KubeApiServer, core: client.CoreV1Api
) -> None:
    await core.create_namespace({"metadata": {"name": "tmp"}})  # type: ignore[arg-type]
    await core.create_namespaced_secret(
        "tmp",
        {"metadata": {"name": "s"}, "stringData": {"k": "v"}},  # type: ignore[arg-type]
    )
    await core.delete_namespace("tmp")
    assert kube.objects.list("secrets", "tmp") == []
    assert kube.objects.find("namespaces", "tmp") is None


# --- custom resources -------------------------------------------------------------------------

PYTORCHJOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "pt", "labels": {"run": "1"}},
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
            }
        }
    },
}


async def test_missing_crd_is_404_until_posted(
    kube: KubeApiServer, custom: client.CustomObjectsApi, api: client.ApiClient, crds: Path
) -> None:
    with pytest.raises(ApiException) as err:
        await custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", PYTORCHJOB
        )
    assert err.value.status == 404
    loop = asyncio.get_running_loop()
    [crd] = await loop.run_in_executor(
        None, load_crd_documents, crds / "kubeflow.org_pytorchjobs.yaml"
    )
    ext = client.ApiextensionsV1Api(api)
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{kube.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            data=json.dumps(crd),
            headers={"Content-Type": "application/json"},
        ) as resp,
    ):
        assert resp.status == 201
    established = await ext.read_custom_resource_definition("pytorchjobs.kubeflow.org")
    assert {c.type for c in established.status.conditions} == {"NamesAccepted", "Established"}
    created = await custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", PYTORCHJOB
    )
    assert created["metadata"]["uid"] and created["status"] == {}
    status = {"status": {"startTime": "2026-01-01T00:00:00Z"}}
    # kubernetes_asyncio picks json-patch for custom objects unless told: a real server refuses
    # a dict as a JSON patch with 400, so does the sandbox.
    with pytest.raises(ApiException) as err:
        await custom.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", "default", "pytorchjobs", "pt", status
        )
    assert err.value.status == 400
    # `_content_type` is a keyword the generated signature does not declare (it takes **kwargs).
    patched = await custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        "pt",
        status,
        _content_type="application/merge-patch+json",
    )
    assert patched["status"]["startTime"] == "2026-01-01T00:00:00Z"
    listed = await custom.list_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", label_selector="run=1"
    )
    assert listed["kind"] == "PyTorchJobList" and len(listed["items"]) == 1
    # A custom resource's listed items are unstructured: they keep apiVersion and kind.
    assert (listed["items"][0]["apiVersion"], listed["items"][0]["kind"]) == (
        "kubeflow.org/v1",
        "PyTorchJob",
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{kube.url}/apis/kubeflow.org/v1") as resp:
            names = {r["name"] for r in (await resp.json())["resources"]}
        assert names == {"pytorchjobs", "pytorchjobs/status", "pytorchjobs/scale"}
        # Strategic merge is not defined for custom resources: 415, as on a real server.
        async with http.patch(
            f"{kube.url}/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/pt",
            data="{}",
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        ) as resp:
            assert resp.status == 415
    await ext.delete_custom_resource_definition("pytorchjobs.kubeflow.org")
    with pytest.raises(ApiException) as err:
        await custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "pt"
        )
    assert err.value.status == 404


async def test_strict_validation_of_custom_resources(kube: KubeApiServer, crds: Path) -> None:
    await kube.load_crd_file(crds / "kubeflow.org_pytorchjobs.yaml")
    url = f"{kube.url}/apis/kubeflow.org/v1/namespaces/default/pytorchjobs?fieldValidation=Strict"
    bad = json.loads(json.dumps(PYTORCHJOB))
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicaz"] = 1
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=bad) as resp:
            body = await resp.json()
        assert resp.status == 400
        assert 'unknown field "spec.pytorchReplicaSpecs.Master.replicaz"' in body["message"]
        async with http.post(url, json=PYTORCHJOB) as resp:
            assert resp.status == 201


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda c: c.update(kind="Thing"), "kind"),
        (lambda c: c["spec"].update(scope="Everywhere"), "spec.scope"),
        (lambda c: c["spec"]["names"].pop("plural"), "spec.names.plural"),
        (lambda c: c["metadata"].update(name="wrong"), "metadata.name"),
        (lambda c: c["spec"]["versions"][0].update(storage=False), "spec.versions"),
    ],
)
def test_invalid_crds_name_the_field(mutate: Any, path: str) -> None:
    from launch_agent.sandbox.kube.resources import crd_resource_types

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    mutate(crd)
    with pytest.raises(CrdError) as err:
        crd_resource_types(crd, "widgets.yaml")
    assert err.value.path == path and str(err.value).startswith("widgets.yaml: ")


async def test_crd_files_from_the_shared_folder_register(kube: KubeApiServer, crds: Path) -> None:
    types = await kube.load_crds_from(crds)
    served = {(rt.group, rt.version, rt.plural) for rt in types}
    assert ("jobset.x-k8s.io", "v1alpha2", "jobsets") in served
    assert ("ray.io", "v1", "rayjobs") in served
    assert ("batch.volcano.sh", "v1alpha1", "jobs") in served
    # (kube.objects.list would deep-copy 6.5 MB of schemas on the loop; count instead.)
    assert kube.store.count(kube.store.rt("customresourcedefinitions")) == len(
        list(CRDS.glob("*.yaml"))
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("kind: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "must be CustomResourceDefinition",
        ),
    ],
)
async def test_bad_crd_files_name_the_file_and_the_problem(
    kube: KubeApiServer, tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "broken.yaml"
    await asyncio.get_running_loop().run_in_executor(None, path.write_text, text)
    with pytest.raises(CrdError) as err:
        await kube.load_crd_file(path)
    assert str(err.value).startswith(f"{path}: ") and reason in str(err.value)
