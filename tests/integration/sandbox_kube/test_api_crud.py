"""Create, get, list, update, patch, status and dryRun through kubernetes_asyncio and raw HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from launch_agent.sandbox.kube import KubeApiServer

from .conftest import job_body


def _status(exc: ApiException) -> dict[str, Any]:
    assert exc.body is not None
    body: dict[str, Any] = json.loads(exc.body)
    return body


async def test_create_sets_server_fields(batch: client.BatchV1Api) -> None:
    job = await batch.create_namespaced_job("default", job_body(name=None))  # type: ignore[arg-type]
    meta = job.metadata
    assert meta.name.startswith("launch-") and len(meta.name) == len("launch-") + 5
    assert meta.namespace == "default"
    assert meta.uid and meta.resource_version and meta.generation == 1
    assert meta.creation_timestamp is not None
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": meta.uid}
    labels = job.spec.template.metadata.labels
    assert labels["job-name"] == meta.name and labels["controller-uid"] == meta.uid
    assert job.spec.backoff_limit == 0 and job.spec.parallelism == 1 and job.spec.completions == 1


async def test_create_answers_201_and_errors_are_status_objects(kube: KubeApiServer) -> None:
    async with aiohttp.ClientSession() as http:
        url = f"{kube.url}/apis/batch/v1/namespaces/default/jobs"
        async with http.post(url, json=job_body("dup")) as first:
            assert first.status == 201
        async with http.post(url, json=job_body("dup")) as second:
            body = await second.json()
        assert second.status == 409
        assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"
        assert body["details"] == {"name": "dup", "group": "batch", "kind": "jobs"}
        no_name = job_body("x")
        del no_name["metadata"]["name"]
        async with http.post(url, json=no_name) as third:
            body = await third.json()
        assert third.status == 422 and body["reason"] == "Invalid"
        assert "metadata.name" in body["message"]
        async with http.get(f"{url}/nope") as missing:
            body = await missing.json()
        assert missing.status == 404 and body["reason"] == "NotFound"
        assert body["message"] == 'jobs.batch "nope" not found'


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (
            lambda b: b["spec"]["template"]["spec"].update(containers=[]),
            "spec.template.spec.containers",
        ),
        (
            lambda b: b["spec"]["template"]["spec"].update(restartPolicy="Always"),
            "spec.template.spec.restartPolicy",
        ),
        (
            lambda b: b["spec"]["template"]["spec"]["containers"][0].pop("image"),
            "containers[0].image",
        ),
        (lambda b: b["spec"].update(backoffLimit=-1), "spec.backoffLimit"),
    ],
)
async def test_invalid_jobs_are_refused_with_the_field(
    batch: client.BatchV1Api, mutate: Any, field: str
) -> None:
    body = job_body()
    mutate(body)
    with pytest.raises(ApiException) as err:
        await batch.create_namespaced_job("default", body)  # type: ignore[arg-type]
    assert err.value.status == 422
    assert field in _status(err.value)["message"]


async def test_unknown_namespace_is_404(batch: client.BatchV1Api, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        await batch.create_namespaced_job("team-a", job_body())  # type: ignore[arg-type]
    assert err.value.status == 404
    assert _status(err.value)["message"] == 'namespaces "team-a" not found'
    await core.create_namespace({"metadata": {"name": "team-a"}})  # type: ignore[arg-type]
    await batch.create_namespaced_job("team-a", job_body())  # type: ignore[arg-type]


async def test_list_with_selectors_limit_and_continue(
    batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    for i in range(7):
        await batch.create_namespaced_job(
            "default",
            job_body(f"job-{i}", labels={"team": "a" if i % 2 else "b", "i": str(i)}),  # type: ignore[arg-type]
        )
    listed = await batch.list_namespaced_job("default", label_selector="team=a")
    assert [j.metadata.name for j in listed.items] == ["job-1", "job-3", "job-5"]
    listed = await batch.list_namespaced_job("default", label_selector="i in (1,2),team!=a")
    assert [j.metadata.name for j in listed.items] == ["job-2"]
    listed = await batch.list_namespaced_job("default", field_selector="metadata.name=job-4")
    assert [j.metadata.name for j in listed.items] == ["job-4"]
    page = await batch.list_namespaced_job("default", limit=3)
    names = [j.metadata.name for j in page.items]
    assert page.metadata.remaining_item_count == 4
    while page.metadata._continue:
        page = await batch.list_namespaced_job(
            "default", limit=3, _continue=page.metadata._continue
        )
        names += [j.metadata.name for j in page.items]
    assert names == [f"job-{i}" for i in range(7)]
    everywhere = await batch.list_job_for_all_namespaces()
    assert len(everywhere.items) == 7
    assert everywhere.metadata.resource_version
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod("default", label_selector="a in (")
    assert err.value.status == 400


async def test_list_continue_after_compaction_is_410(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    for i in range(3):
        await batch.create_namespaced_job("default", job_body(f"job-{i}"))  # type: ignore[arg-type]
    page = await batch.list_namespaced_job("default", limit=1)
    await batch.create_namespaced_job("default", job_body("later"))  # type: ignore[arg-type]
    kube.compact("jobs")
    with pytest.raises(ApiException) as err:
        await batch.list_namespaced_job("default", limit=1, _continue=page.metadata._continue)
    assert err.value.status == 410


async def test_status_subresource_split_and_generation(batch: client.BatchV1Api) -> None:
    job = await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    rv0 = job.metadata.resource_version
    # The main resource ignores .status.
    patched = await batch.patch_namespaced_job("job-a", "default", {"status": {"active": 5}})
    assert patched.status.active is None
    # The generated model types `active` as int (never None): mypy calls the rest unreachable.
    assert patched.metadata.resource_version == rv0  # type: ignore[unreachable]  # a no-op
    # /status changes only .status, and does not bump generation.
    patched = await batch.patch_namespaced_job_status(
        "job-a", "default", {"status": {"active": 1}, "spec": {"parallelism": 9}}
    )
    assert patched.status.active == 1 and patched.spec.parallelism == 1
    assert patched.metadata.generation == 1
    # A spec change bumps generation; a label change does not.
    patched = await batch.patch_namespaced_job(
        "job-a", "default", {"metadata": {"labels": {"x": "y"}}}
    )
    assert patched.metadata.generation == 1
    patched = await batch.patch_namespaced_job("job-a", "default", {"spec": {"suspend": True}})
    assert patched.metadata.generation == 2
    fetched = await batch.read_namespaced_job_status("job-a", "default")
    assert fetched.status.active == 1


async def test_strategic_merge_of_containers_through_the_client(core: client.CoreV1Api) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "a"}]}}
    await core.create_namespaced_pod("default", pod)  # type: ignore[arg-type]
    patched = await core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "side", "image": "b"}]}}
    )
    assert [c.name for c in patched.spec.containers] == ["main", "side"]
    assert patched.metadata.generation == 2


async def test_json_and_merge_patch_over_http(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_body(labels={"a": "1"}))  # type: ignore[arg-type]
    url = f"{kube.url}/apis/batch/v1/namespaces/default/jobs/job-a"
    async with aiohttp.ClientSession() as http:
        ops = [
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        ]
        headers = {"Content-Type": "application/json-patch+json"}
        async with http.patch(url, data=json.dumps(ops), headers=headers) as resp:
            assert resp.status == 200
            assert (await resp.json())["metadata"]["labels"] == {"a": "1", "b": "2"}
        bad = [{"op": "test", "path": "/metadata/labels/a", "value": "nope"}]
        async with http.patch(url, data=json.dumps(bad), headers=headers) as resp:
            assert resp.status == 422
        merge = {"metadata": {"labels": {"a": None}}}
        headers = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(url, data=json.dumps(merge), headers=headers) as resp:
            assert (await resp.json())["metadata"]["labels"] == {"b": "2"}
        headers = {"Content-Type": "application/apply-patch+yaml"}
        async with http.patch(url, data="{}", headers=headers) as resp:
            assert resp.status == 415


async def test_optimistic_concurrency(batch: client.BatchV1Api) -> None:
    job = await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    stale = job.metadata.resource_version
    job.metadata.labels = {"first": "write"}
    updated = await batch.replace_namespaced_job("job-a", "default", job)
    assert updated.metadata.resource_version != stale
    job.metadata.labels = {"second": "write"}
    with pytest.raises(ApiException) as err:
        await batch.replace_namespaced_job("job-a", "default", job)  # still carries the stale RV
    assert err.value.status == 409 and _status(err.value)["reason"] == "Conflict"
    with pytest.raises(ApiException) as err:
        await batch.patch_namespaced_job(
            "job-a", "default", {"metadata": {"resourceVersion": stale, "labels": {"x": "1"}}}
        )
    assert err.value.status == 409
    # PUT of /status with the current RV works and changes only status.
    current = await batch.read_namespaced_job("job-a", "default")
    current.status = client.V1JobStatus(succeeded=1)
    current.spec.parallelism = 4
    replaced = await batch.replace_namespaced_job_status("job-a", "default", current)
    assert replaced.status.succeeded == 1 and replaced.spec.parallelism == 1


async def test_put_without_resource_version_is_refused_for_builtin_kinds(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    body = job_body()
    async with (
        aiohttp.ClientSession() as http,
        http.put(f"{kube.url}/apis/batch/v1/namespaces/default/jobs/job-a", json=body) as resp,
    ):
        assert resp.status == 422
        assert "resourceVersion" in (await resp.json())["message"]


async def test_dry_run_stores_nothing(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    created = await batch.create_namespaced_job("default", job_body(), dry_run="All")  # type: ignore[arg-type]
    assert created.metadata.uid
    assert kube.objects.find("jobs", "job-a") is None
    await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    rv = kube.objects.get("jobs", "job-a")["metadata"]["resourceVersion"]
    await batch.patch_namespaced_job(
        "job-a", "default", {"metadata": {"labels": {"x": "y"}}}, dry_run="All"
    )
    await batch.delete_namespaced_job("job-a", "default", dry_run="All")
    assert kube.objects.get("jobs", "job-a")["metadata"]["resourceVersion"] == rv
    with pytest.raises(ApiException) as err:
        await batch.delete_namespaced_job("job-a", "default", dry_run="Some")
    assert err.value.status == 400


async def test_strict_field_validation_for_core_kinds(kube: KubeApiServer) -> None:
    url = f"{kube.url}/apis/batch/v1/namespaces/default/jobs?fieldValidation=Strict"
    body = job_body()
    body["spec"]["template"]["spec"]["containers"][0]["imagee"] = "typo"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body) as resp:
            status = await resp.json()
        assert resp.status == 400
        assert 'unknown field "spec.template.spec.containers[0].imagee"' in status["message"]
        wrong_type = job_body()
        wrong_type["spec"]["backoffLimit"] = "zero"
        async with http.post(url, json=wrong_type) as resp:
            status = await resp.json()
        assert resp.status == 422 and "spec.backoffLimit" in status["message"]
        # Without Strict the typo is accepted, like a real server's default (Warn).
        async with http.post(url.partition("?")[0], json=body) as resp:
            assert resp.status == 201


async def test_api_resources_and_discovery(kube: KubeApiServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{kube.url}/api/v1") as resp:
            core = await resp.json()
        names = {r["name"]: r for r in core["resources"]}
        assert names["pods"]["kind"] == "Pod" and names["pods"]["namespaced"]
        assert "pods/status" in names and "pods/log" in names
        assert names["namespaces"]["namespaced"] is False
        async with http.get(f"{kube.url}/apis/batch/v1") as resp:
            batch_v1 = await resp.json()
        assert batch_v1["groupVersion"] == "batch/v1"
        assert {r["name"] for r in batch_v1["resources"]} == {"jobs", "jobs/status"}
        async with http.get(f"{kube.url}/version") as resp:
            assert (await resp.json())["major"] == "1"


async def test_status_writes_leave_the_previous_version_intact(kube: KubeApiServer) -> None:
    """Events already logged keep the resourceVersion they were sent with."""
    kube.objects.create("jobs", job_body())
    before = kube.store.get(kube.store.rt("jobs"), "default", "job-a")
    rv = before["metadata"]["resourceVersion"]
    kube.objects.patch_status("jobs", "job-a", {"active": 1})
    assert before["metadata"]["resourceVersion"] == rv
    events = kube.store.log("batch/jobs").after(0)
    assert [e.obj["metadata"]["resourceVersion"] for e in events] == [str(e.rv) for e in events]


async def test_malformed_query_numbers_are_400(kube: KubeApiServer) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{kube.url}/api/v1/namespaces/default/pods", params={"limit": "many"}) as resp,
    ):
        assert resp.status == 400
        assert "invalid query parameter" in (await resp.json())["message"]
