"""Watch semantics through kubernetes_asyncio: resourceVersion, bookmarks, timeouts, 410,
selectors on events, no gap between replay and live events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from launch_agent.sandbox.kube import KubeApiServer

from .conftest import client_config, job_body


async def _collect(stream: Any, until: int | None = None) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    async for event in stream:
        obj = event["object"]
        name = obj["metadata"].get("name", "") if isinstance(obj, dict) else obj.metadata.name
        seen.append((event["type"], name))
        if until is not None and len(seen) >= until:
            break
    return seen


async def test_watch_from_list_rv_sees_only_later_events(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_body("old"))  # type: ignore[arg-type]
    listed = await batch.list_namespaced_job("default")
    w = watch.Watch()
    stream = w.stream(
        batch.list_namespaced_job,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    async with asyncio.TaskGroup() as tg:
        collector = tg.create_task(_collect(stream, until=3), name="collect-watch")
        await asyncio.sleep(0.05)
        await batch.create_namespaced_job("default", job_body("new"))  # type: ignore[arg-type]
        await batch.patch_namespaced_job_status("new", "default", {"status": {"active": 1}})
        await batch.delete_namespaced_job("new", "default")
    assert collector.result() == [("ADDED", "new"), ("MODIFIED", "new"), ("DELETED", "new")]
    await w.close()


async def test_watch_without_rv_replays_current_state_then_live(batch: client.BatchV1Api) -> None:
    for name in ("a", "b"):
        await batch.create_namespaced_job("default", job_body(name))  # type: ignore[arg-type]
    w = watch.Watch()
    stream = w.stream(batch.list_namespaced_job, "default", timeout_seconds=2)
    async with asyncio.TaskGroup() as tg:
        collector = tg.create_task(_collect(stream, until=3), name="collect-watch")
        await asyncio.sleep(0.05)
        await batch.create_namespaced_job("default", job_body("c"))  # type: ignore[arg-type]
    assert collector.result() == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    await w.close()


async def test_bookmarks_and_timeout(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    listed = await batch.list_namespaced_job("default")
    loop = asyncio.get_running_loop()
    start = loop.time()
    w = watch.Watch()
    stream = w.stream(
        batch.list_namespaced_job,
        "default",
        resource_version=listed.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    )
    seen = await _collect(stream)
    elapsed = loop.time() - start
    assert seen and {kind for kind, _ in seen} == {"BOOKMARK"}
    assert (
        0.9 <= elapsed < 3
    )  # closed by the server at timeoutSeconds (not a timing assertion on speed)
    await w.close()


async def test_an_events_watch_gets_no_bookmark(core: client.CoreV1Api) -> None:
    """kube-apiserver keeps no watch cache for Events: their watch is etcd's, which sends no
    BOOKMARK, so the client's resourceVersion stays where its last event left it (a Jobs watch
    of the same length gets one: `test_bookmarks_and_timeout`)."""
    listed = await core.list_namespaced_event("default")
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_event,
        "default",
        resource_version=listed.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    )
    assert await _collect(stream) == []
    await w.close()


async def test_compacted_rv_answers_410(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    listed = await batch.list_namespaced_job("default")
    await batch.create_namespaced_job("default", job_body("x"))  # type: ignore[arg-type]
    kube.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        await _collect(
            w.stream(
                batch.list_namespaced_job,
                "default",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=1,
            )
        )
    assert err.value.status == 410
    await w.close()


async def test_event_log_is_bounded_and_old_rvs_expire(test_ca: str) -> None:
    async with (
        KubeApiServer(event_log_size=5) as kube,
        client.ApiClient(client_config(kube.url, test_ca)) as api,
    ):
        batch = client.BatchV1Api(api)
        first = await batch.create_namespaced_job("default", job_body("j0"))  # type: ignore[arg-type]
        for i in range(1, 10):
            await batch.create_namespaced_job("default", job_body(f"j{i}"))  # type: ignore[arg-type]
        w = watch.Watch()
        with pytest.raises(ApiException) as err:
            await _collect(
                w.stream(
                    batch.list_namespaced_job,
                    "default",
                    resource_version=first.metadata.resource_version,
                    timeout_seconds=1,
                )
            )
        assert err.value.status == 410
        recent = kube.objects.get("jobs", "j6")["metadata"]["resourceVersion"]
        seen = await _collect(
            w.stream(
                batch.list_namespaced_job, "default", resource_version=recent, timeout_seconds=1
            )
        )
        assert seen == [("ADDED", "j7"), ("ADDED", "j8"), ("ADDED", "j9")]
        await w.close()


async def test_selectors_apply_to_events(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    listed = await batch.list_namespaced_job("default")
    w = watch.Watch()
    stream = w.stream(
        batch.list_namespaced_job,
        "default",
        label_selector="wandb.ai/monitor=true",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    async with asyncio.TaskGroup() as tg:
        collector = tg.create_task(_collect(stream, until=3), name="collect-watch")
        await asyncio.sleep(0.05)
        await batch.create_namespaced_job(
            "default",
            job_body("other", labels={"wandb.ai/monitor": "false"}),  # type: ignore[arg-type]
        )
        await batch.create_namespaced_job(
            "default",
            job_body("mine", labels={"wandb.ai/monitor": "true"}),  # type: ignore[arg-type]
        )
        # Relabelling in and out of the selector shows up as ADDED and DELETED.
        await batch.patch_namespaced_job(
            "other", "default", {"metadata": {"labels": {"wandb.ai/monitor": "true"}}}
        )
        await batch.patch_namespaced_job(
            "mine", "default", {"metadata": {"labels": {"wandb.ai/monitor": "no"}}}
        )
    assert collector.result() == [("ADDED", "mine"), ("ADDED", "other"), ("DELETED", "mine")]
    await w.close()


async def test_field_selector_on_pod_phase_events(
    kube: KubeApiServer, core: client.CoreV1Api
) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "m", "image": "i"}]}}
    await core.create_namespaced_pod("default", pod)  # type: ignore[arg-type]
    listed = await core.list_namespaced_pod("default")
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_pod,
        "default",
        field_selector="status.phase=Running",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    async with asyncio.TaskGroup() as tg:
        collector = tg.create_task(_collect(stream, until=1), name="collect-watch")
        await asyncio.sleep(0.05)
        kube.objects.patch_status("pods", "p", {"phase": "Running"})
    assert collector.result() == [("ADDED", "p")]
    await w.close()


async def test_no_gap_between_replay_and_live_events(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    """Objects written while many watches start are each seen exactly once by every watch."""

    async def watch_all() -> list[tuple[str, str]]:
        w = watch.Watch()  # one stream per Watch
        try:
            return await _collect(
                w.stream(batch.list_namespaced_job, "default", timeout_seconds=2), until=40
            )
        finally:
            await w.close()

    async def writer() -> None:
        for i in range(40):
            kube.objects.create("jobs", job_body(f"j{i}"))
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as tg:
        watchers = [tg.create_task(watch_all(), name=f"watch-{i}") for i in range(4)]
        tg.create_task(writer(), name="writer")
    for task in watchers:
        names = [name for kind, name in task.result() if kind == "ADDED"]
        assert sorted(names) == sorted(f"j{i}" for i in range(40))


async def test_cluster_wide_watch_and_namespaced_isolation(
    kube: KubeApiServer, core: client.CoreV1Api
) -> None:
    await core.create_namespace({"metadata": {"name": "other"}})  # type: ignore[arg-type]
    listed = await core.list_config_map_for_all_namespaces()
    w = watch.Watch()
    stream = w.stream(
        core.list_config_map_for_all_namespaces,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    w2 = watch.Watch()
    ns_stream = w2.stream(
        core.list_namespaced_config_map,
        "other",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    async with asyncio.TaskGroup() as tg:
        everything = tg.create_task(_collect(stream, until=2), name="all")
        only_other = tg.create_task(_collect(ns_stream, until=1), name="other")
        await asyncio.sleep(0.05)
        await core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})  # type: ignore[arg-type]
        await core.create_namespaced_config_map("other", {"metadata": {"name": "b"}})  # type: ignore[arg-type]
    assert everything.result() == [("ADDED", "a"), ("ADDED", "b")]
    assert only_other.result() == [("ADDED", "b")]
    await w.close()
    await w2.close()
