"""The Kubernetes adapter against the sandbox API server, through kubernetes_asyncio over HTTP.

The sandbox plays the cluster: tests write to it through `kube.objects` only where a controller
or an admin would (status updates, pods owned by a Job, deletions behind the agent's back), and
script failures through `kube.faults`. Nothing in `launch_agent` is patched.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from launch_agent.adapters.kube import (
    InformerEvent,
    InformerSet,
    InformerSettings,
    KindNotInstalled,
    KubeBadRequest,
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeInvalid,
    KubeUnavailable,
    Resource,
)
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.run_state import RunState
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.tracking import assess, assess_deleted

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "fixtures" / "crds"
NS = "default"
JOBS = Resource("batch", "v1", "Job", "jobs")
PODS = Resource("", "v1", "Pod", "pods")
SELECTOR = "launch-agent.io/agent=test-agent"
# Small delays so retry and reconnect paths run in milliseconds.
WAIT = 10.0  # seconds any single expectation may take
FAST = RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.05, timeout=10.0)


def job_manifest(name: str, **extra_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"launch-agent.io/agent": "test-agent", "launch-agent.io/run": name},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"launch-agent.io/agent": "test-agent"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "ghcr.io/acme/train:1.2"}],
                },
            },
            **extra_spec,
        },
    }


def pytorchjob_manifest(name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/acme/train:1.2"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {"launch-agent.io/agent": "test-agent"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template}
            }
        },
    }


def owned_pod(job: dict[str, Any], suffix: str) -> dict[str, Any]:
    """A pod as the Job controller makes it: owned by the Job, labelled with its name."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{suffix}",
            "labels": {"job-name": meta["name"], "launch-agent.io/agent": "test-agent"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "ghcr.io/acme/train:1.2"}],
        },
    }


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as server:
        yield server


@pytest.fixture
async def client(kube: KubeApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    kube_client = await KubeClient.from_kubeconfig(str(kubeconfig), policy=FAST)
    async with kube_client:
        yield kube_client


class Recorder:
    """An informer handler that keeps every event and wakes waiters."""

    def __init__(self) -> None:
        self.events: list[InformerEvent] = []
        self._changed = asyncio.Condition()

    async def __call__(self, event: InformerEvent) -> None:
        async with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def seen(self, etype: str, name: str) -> list[InformerEvent]:
        return [e for e in self.events if e.type == etype and e.obj["metadata"]["name"] == name]

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_for(self, etype: str, name: str) -> InformerEvent:
        await self.wait_until(lambda: bool(self.seen(etype, name)))
        return self.seen(etype, name)[-1]


# --- requests ----------------------------------------------------------------------------------


async def test_kubeconfig_is_loaded_and_requests_reach_the_server(
    client: KubeClient, kube: KubeApiServer
) -> None:
    assert client.host == kube.url
    listed = await client.list(JOBS, NS)
    assert listed.items == []
    assert int(listed.resource_version) > 0
    assert kube.log.count("LIST jobs") == 1


async def test_create_then_create_again_adopts_the_existing_object(
    client: KubeClient, kube: KubeApiServer
) -> None:
    first = await client.create(job_manifest("run-1"), NS)
    second = await client.create(job_manifest("run-1"), NS)
    assert (first.adopted, second.adopted) == (False, True)
    assert second.obj["metadata"]["uid"] == first.obj["metadata"]["uid"]
    assert len(kube.objects.list("jobs", NS)) == 1
    assert kube.log.count("POST jobs") == 2
    # Creates are strict and carry the agent's field manager.
    posts = [r.path for r in kube.log if r.key == "POST jobs"]
    assert all("fieldValidation=Strict" in p and "fieldManager=launch-agent" in p for p in posts)


async def test_unknown_field_is_refused_with_the_field_named(client: KubeClient) -> None:
    manifest = job_manifest("run-typo")
    manifest["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(KubeBadRequest) as caught:
        await client.create(manifest, NS)
    assert caught.value.status == 400
    assert "imagePullPolicyy" in caught.value.message
    assert "unknown field" in caught.value.message
    assert "POST /apis/batch/v1/namespaces/default/jobs" in str(caught.value)


async def test_invalid_value_is_a_422_with_causes(client: KubeClient) -> None:
    manifest = job_manifest("run-bad")
    manifest["spec"]["backoffLimit"] = "zero"
    with pytest.raises(KubeInvalid) as caught:
        await client.create(manifest, NS)
    assert caught.value.causes
    assert any("backoffLimit" in field for field, _ in caught.value.causes)


async def test_missing_crd_is_kind_not_installed_until_installed(
    client: KubeClient, kube: KubeApiServer
) -> None:
    with pytest.raises(KindNotInstalled) as caught:
        await client.create(pytorchjob_manifest("run-pt"), NS)
    assert (caught.value.kind, caught.value.api_version) == ("PyTorchJob", "kubeflow.org/v1")
    assert str(caught.value) == "PyTorchJob (kubeflow.org/v1) is not installed in this cluster"
    assert kube.log.count("POST pytorchjobs") == 0  # never guessed a path

    await kube.load_crd_file(CRDS / "kubeflow.org_pytorchjobs.yaml")
    created = await client.create(pytorchjob_manifest("run-pt"), NS)  # a miss refreshes
    assert created.obj["kind"] == "PyTorchJob"
    before = client.kinds.discovery_requests
    resource = await client.resolve("kubeflow.org/v1", "PyTorchJob")
    assert (resource.plural, resource.namespaced) == ("pytorchjobs", True)
    assert client.kinds.discovery_requests == before  # cached
    # The plural comes from discovery, not from the kind: "leaderworkersets" is regular, but
    # Volcano's kind "Job" in batch.volcano.sh must not be confused with batch/v1 Job.
    await kube.load_crd_file(CRDS / "batch.volcano.sh_jobs.yaml")
    volcano = await client.resolve("batch.volcano.sh/v1alpha1", "Job")
    assert volcano.path(NS) == "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"


async def test_delete_with_background_propagation_removes_the_pods(
    client: KubeClient, kube: KubeApiServer
) -> None:
    created = await client.create(job_manifest("run-del"), NS)
    for suffix in ("a", "b"):
        kube.objects.create("pods", owned_pod(created.obj, suffix), NS)
    # The control: the API's default for a Job deleted without a policy orphans its pods.
    orphan = await client.create(job_manifest("run-orphan"), NS)
    kube.objects.create("pods", owned_pod(orphan.obj, "a"), NS)
    kube.objects.delete("jobs", "run-orphan", NS)
    assert kube.objects.find("pods", "run-orphan-a", NS) is not None

    assert await client.delete(JOBS, NS, "run-del") is True
    assert kube.objects.find("jobs", "run-del", NS) is None
    assert kube.objects.list("pods", NS, label_selector="job-name=run-del") == []
    assert await client.delete(JOBS, NS, "run-del") is False  # already gone is not an error


async def test_list_by_selector_pages_and_keeps_kind(
    client: KubeClient, kube: KubeApiServer
) -> None:
    for i in range(7):
        await client.create(job_manifest(f"run-{i}"), NS)
    other = job_manifest("someone-else")
    other["metadata"]["labels"] = {"team": "other"}
    await client.create(other, NS)
    listed = await client.list(JOBS, NS, label_selector=SELECTOR, page_size=3)
    assert sorted(o["metadata"]["name"] for o in listed.items) == [f"run-{i}" for i in range(7)]
    assert all(o["kind"] == "Job" and o["apiVersion"] == "batch/v1" for o in listed.items)
    assert kube.log.count("LIST jobs") == 3  # 3 + 3 + 1


async def test_patch_suspends_and_resumes(client: KubeClient, kube: KubeApiServer) -> None:
    await client.create(job_manifest("run-s", suspend=True), NS)
    patched = await client.patch(JOBS, NS, "run-s", {"spec": {"suspend": False}})
    assert patched["spec"]["suspend"] is False
    assert kube.objects.get("jobs", "run-s", NS)["spec"]["suspend"] is False


async def test_pod_log_tail(client: KubeClient, kube: KubeApiServer) -> None:
    created = await client.create(job_manifest("run-log"), NS)
    pod = kube.objects.create("pods", owned_pod(created.obj, "a"), NS)
    name = pod["metadata"]["name"]
    kube.store.pod_logs[(NS, name, "main")] = [
        (f"2026-11-30T00:00:{i:02d}Z", f'{{"step": {i}}}') for i in range(100)
    ]
    tail = await client.pod_log_tail(NS, name, "main", lines=3)
    assert tail == '{"step": 97}\n{"step": 98}\n{"step": 99}\n'


async def test_service_account_token_is_reread_off_the_loop(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    # In a pod the token file rotates; the client re-reads it (here at every request).
    token = tmp_path / "token"
    await asyncio.to_thread(token.write_text, "first\n")
    configuration = Configuration(host=kube.url)
    async with KubeClient(configuration, policy=FAST, token_file=str(token), token_refresh=0) as c:
        await c.list(JOBS, NS)
        assert configuration.api_key["BearerToken"] == "Bearer first"
        await asyncio.to_thread(token.write_text, "second")
        await c.list(JOBS, NS)
        assert configuration.api_key["BearerToken"] == "Bearer second"
        await asyncio.to_thread(token.write_text, "")
        with pytest.raises(KubeError, match="is empty"):
            await c.list(JOBS, NS)


# --- retries and errors -----------------------------------------------------------------------


async def test_5xx_and_429_storm_is_retried_with_backoff(
    client: KubeClient, kube: KubeApiServer
) -> None:
    kube.faults.add(FaultRule("POST jobs", status=503, times=3))
    kube.faults.add(FaultRule("LIST jobs", status=429, times=1))
    kube.faults.add(FaultRule("GET jobs", status=500, times=2))
    created = await client.create(job_manifest("run-storm"), NS)
    assert not created.adopted
    assert await client.list(JOBS, NS) is not None
    assert (await client.get(JOBS, NS, "run-storm"))["metadata"]["name"] == "run-storm"
    assert kube.log.count("POST jobs") == 4
    assert client.retries == 6
    assert len(kube.objects.list("jobs", NS)) == 1


async def test_retry_after_is_honoured(client: KubeClient, kube: KubeApiServer) -> None:
    # The sandbox answers 429 with Retry-After: 1; the policy's own backoff is 10-50 ms.
    kube.faults.add(FaultRule("LIST jobs", status=429, times=1))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await client.list(JOBS, NS)
    assert loop.time() - start >= 1.0


async def test_dropped_connection_then_success(client: KubeClient, kube: KubeApiServer) -> None:
    kube.faults.add(FaultRule("GET jobs", drop=True, times=2))
    await client.create(job_manifest("run-drop"), NS)
    assert (await client.get(JOBS, NS, "run-drop"))["metadata"]["name"] == "run-drop"


async def test_exhausted_retries_raise_unavailable(client: KubeClient, kube: KubeApiServer) -> None:
    kube.faults.add(FaultRule("LIST jobs", status=503))
    with pytest.raises(KubeUnavailable) as caught:
        await client.list(JOBS, NS)
    assert caught.value.attempts == FAST.attempts
    assert "503" in str(caught.value)
    assert kube.log.count("LIST jobs") == FAST.attempts


async def test_client_errors_are_not_retried(client: KubeClient, kube: KubeApiServer) -> None:
    kube.faults.add(FaultRule("LIST jobs", status=403, message="jobs is forbidden: no RBAC"))
    with pytest.raises(KubeForbidden, match="no RBAC"):
        await client.list(JOBS, NS)
    assert kube.log.count("LIST jobs") == 1


async def test_refused_connections_raise_unavailable(
    client: KubeClient, kube: KubeApiServer
) -> None:
    await kube.refuse_connections()
    try:
        with pytest.raises(KubeUnavailable):
            await client.list(JOBS, NS)
    finally:
        await kube.accept_connections()
    await client.list(JOBS, NS)


# --- informers ----------------------------------------------------------------------------------


def informers(client: KubeClient, recorder: Recorder) -> InformerSet:
    settings = InformerSettings(
        label_selector=SELECTOR, watch_timeout=30, backoff_base=0.02, backoff_cap=0.2
    )
    return InformerSet(client, recorder, settings)


async def test_informer_delivers_add_modify_delete(client: KubeClient, kube: KubeApiServer) -> None:
    kube.objects.create("jobs", job_manifest("before"), NS)  # exists before the informer starts
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        informer = infs.add(JOBS, NS)
        assert infs.add(JOBS, NS) is informer  # one watch per (kind, namespace)
        async with asyncio.timeout(WAIT):
            await infs.wait_synced()
        assert [e.type for e in recorder.events] == ["ADDED"]
        assert recorder.events[0].from_list

        await client.create(job_manifest("run-w"), NS)
        await recorder.wait_for("ADDED", "run-w")
        kube.objects.patch_status("jobs", "run-w", {"active": 1, "ready": 1}, NS)
        modified = await recorder.wait_for("MODIFIED", "run-w")
        assert assess(modified.obj, [], datetime.now(UTC)).state is RunState.RUNNING
        await client.delete(JOBS, NS, "run-w")
        await recorder.wait_for("DELETED", "run-w")

        assert informer.get(NS, "run-w") is None
        assert informer.get(NS, "before") is not None
        assert informer.stats.lists == 1
        assert informer.healthy
        await _open_watch(kube, "batch/jobs")
        assert len(kube.store.watchers("batch/jobs")) == 1  # one open watch, no polling
        assert kube.log.count("GET jobs") == 0
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("informer ")]


async def test_informer_ignores_objects_outside_its_selector(
    client: KubeClient, kube: KubeApiServer
) -> None:
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        informer = infs.add(JOBS, NS)
        async with asyncio.timeout(WAIT):
            await infs.wait_synced()
        other = job_manifest("not-ours")
        other["metadata"]["labels"] = {"team": "other"}
        kube.objects.create("jobs", other, NS)
        kube.objects.create("jobs", job_manifest("ours"), NS)
        event = await recorder.wait_for("ADDED", "ours")
        assert not event.from_list  # a live watch event: no relist on an empty start
        assert informer.stats.relists_after_gone == 0
    assert not recorder.seen("ADDED", "not-ours")


async def test_informer_resumes_after_dropped_watch_without_relisting(
    client: KubeClient, kube: KubeApiServer
) -> None:
    kube.objects.create("jobs", job_manifest("a"), NS)
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        informer = infs.add(JOBS, NS)
        await recorder.wait_for("ADDED", "a")
        for i in range(3):
            await _open_watch(kube, "batch/jobs")
            assert kube.drop_watches("jobs") == 1
            # Changes made while the watch is down arrive after the reconnect, each one.
            kube.objects.patch_status("jobs", "a", {"active": 1, "ready": i}, NS)
            kube.objects.patch("jobs", "a", {"metadata": {"annotations": {"step": str(i)}}}, NS)
            await _wait_annotation(recorder, "a", str(i))
            ready = [e.obj["status"].get("ready") for e in recorder.seen("MODIFIED", "a")]
            assert ready[-2:] == [i, i]  # the status change, then the annotation change
        await _open_watch(kube, "batch/jobs")
        kube.drop_watches("jobs")
        # The terminal state lands while disconnected: it is replayed from the resourceVersion.
        kube.objects.patch_status("jobs", "a", {"conditions": [_complete()]}, NS)
        done = await _wait_state(recorder, "a", RunState.SUCCEEDED)
        assert done.type == "MODIFIED"
        assert not done.from_list
        assert informer.stats.lists == 1  # resumed from the resourceVersion, never relisted
        assert informer.stats.watches >= 5
    # No event delivered twice: every MODIFIED carries a new resourceVersion.
    versions = [e.obj["metadata"]["resourceVersion"] for e in recorder.events]
    assert len(versions) == len(set(versions))


async def test_informer_relists_after_410_and_misses_no_terminal_state(
    client: KubeClient, kube: KubeApiServer
) -> None:
    for name in ("finishes", "vanishes", "fails"):
        kube.objects.create("jobs", job_manifest(name), NS)
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        informer = infs.add(JOBS, NS)
        async with asyncio.timeout(WAIT):
            await infs.wait_synced()
        # Disconnect, change everything, compact the history the watch would resume from.
        await kube.refuse_connections()
        kube.drop_watches("jobs")
        kube.objects.patch_status("jobs", "finishes", {"conditions": [_complete()]}, NS)
        kube.objects.patch_status("jobs", "fails", {"conditions": [_failed()]}, NS)
        kube.objects.delete("jobs", "vanishes", NS, propagation="Background")
        kube.objects.create("jobs", job_manifest("appears"), NS)
        kube.compact()
        await asyncio.sleep(0.1)  # the informer hits refused connections meanwhile
        await kube.accept_connections()

        finished = await _wait_state(recorder, "finishes", RunState.SUCCEEDED)
        failed = await _wait_state(recorder, "fails", RunState.FAILED)
        gone = await recorder.wait_for("DELETED", "vanishes")
        await recorder.wait_for("ADDED", "appears")
        assert finished.from_list and failed.from_list and gone.from_list
        # The DELETED event carries the last state known, so the run is judged correctly.
        assert assess_deleted(gone.obj, [], datetime.now(UTC)).state is RunState.STOPPED
        assert informer.stats.relists_after_gone >= 1
        assert informer.stats.lists >= 2
        assert sorted(k[1] for k in informer.cache) == ["appears", "fails", "finishes"]


async def test_informer_relists_on_injected_410_event(
    client: KubeClient, kube: KubeApiServer
) -> None:
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        informer = infs.add(JOBS, NS)
        async with asyncio.timeout(WAIT):
            await infs.wait_synced()
        kube.faults.add(FaultRule("WATCH jobs", status=410, times=2))
        kube.drop_watches("jobs")
        kube.objects.create("jobs", job_manifest("after-410"), NS)
        await recorder.wait_for("ADDED", "after-410")
        await _poll(lambda: informer.stats.relists_after_gone >= 2)
        await _open_watch(kube, "batch/jobs")
        kube.objects.create("jobs", job_manifest("watched-again"), NS)
        event = await recorder.wait_for("ADDED", "watched-again")
        assert not event.from_list  # back on a live watch after two relists
        assert informer.stats.relists_after_gone == 2
        assert len(recorder.seen("ADDED", "after-410")) == 1  # relisting twice: delivered once


async def test_informer_reopens_a_stalled_watch(client: KubeClient, kube: KubeApiServer) -> None:
    # The stream stays open but says nothing (a half-open connection): reopen it.
    kube.faults.add(FaultRule("WATCH jobs", stall=True, times=1))
    recorder = Recorder()
    settings = InformerSettings(label_selector=SELECTOR, silence_timeout=0.5, backoff_base=0.02)
    async with InformerSet(client, recorder, settings) as infs:
        informer = infs.add(JOBS, NS)
        async with asyncio.timeout(WAIT):
            await infs.wait_synced()
        kube.objects.create("jobs", job_manifest("after-stall"), NS)
        await recorder.wait_for("ADDED", "after-stall")
        assert informer.stats.errors == 1
        assert informer.stats.last_error == "Timeout on reading data from socket"
        assert informer.stats.watches == 2


async def test_informer_honours_retry_after_on_a_throttled_watch(
    client: KubeClient, kube: KubeApiServer
) -> None:
    recorder = Recorder()
    settings = InformerSettings(label_selector=SELECTOR, backoff_base=0.02, backoff_cap=5.0)
    async with InformerSet(client, recorder, settings) as infs:
        informer = infs.add(JOBS, NS)
        await _open_watch(kube, "batch/jobs")
        kube.faults.add(FaultRule("WATCH jobs", status=429, times=1))  # answers Retry-After: 1
        loop = asyncio.get_running_loop()
        start = loop.time()
        kube.drop_watches("jobs")
        kube.objects.create("jobs", job_manifest("after-429"), NS)
        await recorder.wait_for("ADDED", "after-429")
        assert loop.time() - start >= 1.0  # the server's wait, not the 10-20 ms backoff
        assert informer.stats.errors == 1


async def test_informer_backs_off_on_error_storm_and_recovers(
    client: KubeClient, kube: KubeApiServer
) -> None:
    kube.faults.add(FaultRule("WATCH jobs", status=500, times=4))
    kube.faults.add(FaultRule("LIST jobs", status=503, times=8))
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        informer = infs.add(JOBS, NS)
        kube.objects.create("jobs", job_manifest("survivor"), NS)
        await recorder.wait_for("ADDED", "survivor")
        kube.objects.patch_status("jobs", "survivor", {"conditions": [_complete()]}, NS)
        await _wait_state(recorder, "survivor", RunState.SUCCEEDED)
        assert informer.healthy
    # 8 LIST failures are absorbed by the client's retries (6 per call) plus the informer's
    # backoff; what matters is that the number of requests stays small, not a hot loop.
    assert kube.log.count("LIST jobs") <= 12
    assert kube.log.count("WATCH jobs") <= 8
    assert informer.stats.errors >= 1


async def test_informer_handler_failure_does_not_stop_the_watch(
    client: KubeClient, kube: KubeApiServer
) -> None:
    recorder = Recorder()

    async def flaky(event: InformerEvent) -> None:
        await recorder(event)
        if event.obj["metadata"]["name"] == "poison":
            raise RuntimeError("handler bug")

    settings = InformerSettings(label_selector=SELECTOR, backoff_base=0.02, backoff_cap=0.2)
    async with InformerSet(client, flaky, settings) as infs:
        infs.add(JOBS, NS)
        kube.objects.create("jobs", job_manifest("poison"), NS)
        await recorder.wait_for("ADDED", "poison")
        kube.objects.create("jobs", job_manifest("next"), NS)
        await recorder.wait_for("ADDED", "next")


async def test_informers_for_pods_and_custom_resources_share_one_handler(
    client: KubeClient, kube: KubeApiServer
) -> None:
    await kube.load_crd_file(CRDS / "kubeflow.org_pytorchjobs.yaml")
    recorder = Recorder()
    async with informers(client, recorder) as infs:
        pytorch = await client.resolve("kubeflow.org/v1", "PyTorchJob")
        infs.add(pytorch, NS)
        infs.add(PODS, NS)
        async with asyncio.timeout(WAIT):
            await infs.wait_synced()
        created = await client.create(pytorchjob_manifest("run-pt"), NS)
        pod = owned_pod({**created.obj, "metadata": {**created.obj["metadata"]}}, "master-0")
        pod["metadata"]["ownerReferences"][0].update(
            apiVersion="kubeflow.org/v1", kind="PyTorchJob"
        )
        kube.objects.create("pods", pod, NS)
        pt = await recorder.wait_for("ADDED", "run-pt")
        added_pod = await recorder.wait_for("ADDED", "run-pt-master-0")
        assert pt.resource.kind == "PyTorchJob"
        assert added_pod.resource is PODS or added_pod.resource == PODS
        assert len(infs.informers) == 2
        await _open_watch(kube, "kubeflow.org/pytorchjobs")
        await _open_watch(kube, "pods")
        assert len(kube.store.watchers("kubeflow.org/pytorchjobs")) == 1
        assert len(kube.store.watchers("pods")) == 1


async def _poll(predicate: Callable[[], bool]) -> None:
    """For state that announces no event (the server's open watches, counters)."""
    for _ in range(int(WAIT / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("condition not reached")


async def _open_watch(kube: KubeApiServer, storage: str) -> None:
    await _poll(lambda: any(not w.closed for w in kube.store.watchers(storage)))


async def _wait_annotation(recorder: Recorder, name: str, value: str) -> None:
    await recorder.wait_until(
        lambda: any(
            (e.obj["metadata"].get("annotations") or {}).get("step") == value
            for e in recorder.seen("MODIFIED", name)
        )
    )


async def _wait_state(recorder: Recorder, name: str, state: RunState) -> InformerEvent:
    """Until the latest event of `name` assesses as `state`; that event."""

    def latest() -> InformerEvent | None:
        for event in reversed(recorder.events):
            if event.obj["metadata"]["name"] == name and event.type != "DELETED":
                return event
        return None

    def reached() -> bool:
        event = latest()
        return event is not None and assess(event.obj, [], datetime.now(UTC)).state is state

    await recorder.wait_until(reached)
    event = latest()
    assert event is not None
    return event


def _complete() -> dict[str, str]:
    return {"type": "Complete", "status": "True", "reason": "", "message": ""}


def _failed() -> dict[str, str]:
    return {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }


# --- rate limits ------------------------------------------------------------------------------


async def test_the_client_side_bucket_paces_every_request(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    limited = await KubeClient.from_kubeconfig(str(kubeconfig), policy=FAST, qps=20.0, burst=2)
    loop = asyncio.get_running_loop()
    async with limited:
        start = loop.time()
        for _ in range(7):
            await limited.list(JOBS, NS)
        took = loop.time() - start
    assert kube.log.count("LIST jobs") == 7
    # Two at once (the burst), then five at 20/s: at least 0.25 s however fast the server is.
    assert took >= 0.24
    assert limited.limiter is not None and limited.limiter.delayed >= 5


async def test_retries_take_tokens_too(kube: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    limited = await KubeClient.from_kubeconfig(str(kubeconfig), policy=FAST, qps=10.0, burst=1)
    kube.faults.add(FaultRule("LIST jobs", status=503, times=3))
    loop = asyncio.get_running_loop()
    async with limited:
        start = loop.time()
        await limited.list(JOBS, NS)
        took = loop.time() - start
    # FAST's backoff is at most 50 ms a retry; the bucket spaces the four attempts by 100 ms.
    assert kube.log.count("LIST jobs") == 4
    assert took >= 0.29


async def test_a_stopping_client_is_not_held_by_its_bucket(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    stop = asyncio.Event()
    limited = await KubeClient.from_kubeconfig(
        str(kubeconfig), policy=FAST, qps=0.01, burst=1, stop=stop
    )
    async with limited:
        await limited.list(JOBS, NS)
        second = asyncio.create_task(limited.list(JOBS, NS))
        await asyncio.sleep(0.05)
        assert not second.done()  # 100 s until the next token
        stop.set()
        async with asyncio.timeout(5):
            await second
    assert kube.log.count("LIST jobs") == 2


async def test_a_429_without_apf_headers_is_counted_as_none(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    heard: list[tuple[str, str]] = []
    throttled = await KubeClient.from_kubeconfig(
        str(kubeconfig), policy=FAST, throttled=lambda pl, fs: heard.append((pl, fs))
    )
    kube.faults.add(FaultRule("LIST jobs", status=429, times=1))
    async with throttled:
        await throttled.list(JOBS, NS)
    assert heard == [("", "")]
    assert throttled.throttles == 1


async def test_apfs_429_is_retried_after_retry_after_and_names_its_priority_level(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    heard: list[tuple[str, str]] = []
    flow = kube.throttle(qps=1.0, burst=1)
    throttled = await KubeClient.from_kubeconfig(
        str(kubeconfig), policy=FAST, throttled=lambda pl, fs: heard.append((pl, fs))
    )
    loop = asyncio.get_running_loop()
    async with throttled:
        await throttled.list(JOBS, NS)
        start = loop.time()
        await throttled.list(JOBS, NS)  # 429 (a plain-text body), then served after 1 s
        took = loop.time() - start
    assert took >= 1.0  # Retry-After: 1, though FAST's own backoff is at most 50 ms
    assert heard == [(flow.priority_level_uid, flow.flow_schema_uid)]
    assert [e.status for e in kube.log] == [200, 429, 200]


async def test_a_body_is_sent_as_json_with_dates_as_the_library_writes_them(
    client: KubeClient,
) -> None:
    """Bodies go out as JSON without the library's sanitizer walking them first; a date in one
    is still written as ISO 8601 (what `sanitize_for_serialization` made of it)."""
    configmaps = Resource("", "v1", "ConfigMap", "configmaps")
    when = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dated", "labels": {"launch-agent.io/agent": "test-agent"}},
        "data": {"when": when, "day": when.date(), "plain": "x"},
    }
    created = await client.request("POST", configmaps.path(NS), body=body)
    assert created["data"] == {
        "when": "2026-11-30T12:00:05+00:00",
        "day": "2026-11-30",
        "plain": "x",
    }
    got = await client.get(configmaps, NS, "dated")
    assert got["data"]["when"] == "2026-11-30T12:00:05+00:00"
