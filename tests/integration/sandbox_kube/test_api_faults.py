"""Fault injection on the Kubernetes API server, observed through real clients."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import KubeApiServer

from .conftest import job_body


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (500, "InternalError"),
        (429, "TooManyRequests"),
        (503, "ServiceUnavailable"),
        (403, "Forbidden"),
    ],
)
async def test_status_rule_answers_a_status_object(
    kube: KubeApiServer, batch: client.BatchV1Api, code: int, reason: str
) -> None:
    kube.faults.add(FaultRule("POST jobs", status=code, times=1, message="boom"))
    with pytest.raises(ApiException) as err:
        await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    assert err.value.status == code
    assert f'"reason":"{reason}"' in err.value.body  # type: ignore[operator]  # a str, really
    await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]  # times=1: the next one passes
    assert kube.log.count("POST jobs") == 2


async def test_route_keys_and_counters(
    kube: KubeApiServer, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
    await batch.read_namespaced_job("job-a", "default")
    await batch.list_namespaced_job("default")
    await batch.patch_namespaced_job_status("job-a", "default", {"status": {"active": 1}})
    await batch.delete_namespaced_job("job-a", "default")
    await core.delete_collection_namespaced_pod("default")
    assert dict(kube.log.counts) == {
        "POST jobs": 1,
        "GET jobs": 1,
        "LIST jobs": 1,
        "PATCH jobs/status": 1,
        "DELETE jobs": 1,
        "DELETECOLLECTION pods": 1,
    }
    assert [e.status for e in kube.log] == [201, 200, 200, 200, 200, 200]


async def test_rate_and_delay(kube: KubeApiServer, core: client.CoreV1Api) -> None:
    kube.faults.add(FaultRule("LIST pods", status=500, rate=0.5))
    failures = 0
    for _ in range(40):
        try:
            await core.list_namespaced_pod("default")
        except ApiException:
            failures += 1
    assert 5 < failures < 35
    kube.faults.clear()
    kube.faults.add(FaultRule("GET pods", delay=0.3))
    with pytest.raises(asyncio.TimeoutError):
        await core.read_namespaced_pod("p", "default", _request_timeout=0.1)


async def test_dropped_request_and_outage(kube: KubeApiServer, core: client.CoreV1Api) -> None:
    # aiohttp retries an idempotent request once on a dropped keep-alive connection, so the
    # rule drops every attempt until it is removed.
    rule = kube.faults.add(FaultRule("LIST configmaps", drop=True))
    with pytest.raises(aiohttp.ClientError):
        await core.list_namespaced_config_map("default")
    assert rule.fired >= 1
    kube.faults.remove(rule)
    await core.list_namespaced_config_map("default")
    kube.faults.outage(30, status=503)
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_config_map("default")
    assert err.value.status == 503
    kube.faults.end_outage()
    await core.list_namespaced_config_map("default")


async def test_refused_connections(kube: KubeApiServer, core: client.CoreV1Api) -> None:
    await kube.refuse_connections()
    with pytest.raises(aiohttp.ClientConnectorError):
        async with aiohttp.ClientSession() as http, http.get(f"{kube.url}/version"):
            pass
    await kube.accept_connections()
    async with aiohttp.ClientSession() as http, http.get(f"{kube.url}/version") as resp:
        assert resp.status == 200


async def test_forced_410_on_a_watch(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    kube.faults.add(
        FaultRule("WATCH jobs", status=410, times=1, message="too old resource version: 1 (99)")
    )
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        async for _ in w.stream(
            batch.list_namespaced_job, "default", resource_version="5", timeout_seconds=1
        ):
            pass
    assert err.value.status == 410
    await w.close()


async def test_dropped_watch_stream_after_some_events(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    for i in range(3):
        kube.objects.create("jobs", job_body(f"j{i}"))
    kube.faults.add(FaultRule("WATCH jobs", drop=True, after_events=2, times=1))
    w = watch.Watch()
    seen: list[str] = []

    async def consume() -> None:
        async for event in w.stream(batch.list_namespaced_job, "default", timeout_seconds=2):
            seen.append(event["object"].metadata.name)

    with pytest.raises(aiohttp.ClientError):
        await consume()
    assert seen == ["j0", "j1"]
    await w.close()


async def test_stalled_watch_says_nothing(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    kube.faults.add(FaultRule("WATCH jobs", stall=True, times=1))
    w = watch.Watch()
    seen = []

    async def consume() -> None:
        async for event in w.stream(
            batch.list_namespaced_job, "default", allow_watch_bookmarks=True, timeout_seconds=30
        ):
            seen.append(event["type"])

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.6):
            await consume()
    assert seen == []  # not even bookmarks: the client must notice by its own timeout
    assert kube.faults.rules[0].fired == 1
    await w.close()


async def test_drop_watches_ends_open_streams(
    kube: KubeApiServer, batch: client.BatchV1Api
) -> None:
    w = watch.Watch()

    async def consume() -> int:
        count = 0
        async for _ in w.stream(batch.list_namespaced_job, "default", timeout_seconds=30):
            count += 1
        return count

    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(consume(), name="consume")
        await asyncio.sleep(0.1)
        assert kube.drop_watches("jobs") == 1
    assert task.result() == 0
    await w.close()


async def test_closing_ends_handlers_whose_client_went_away() -> None:
    """A request held by a fault delay outlives its client; closing the server ends it (the
    guardrail fails this test if a handler task is left running)."""
    async with KubeApiServer() as kube:
        kube.faults.add(FaultRule("LIST pods", delay=30.0))

        async def call() -> None:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{kube.url}/api/v1/namespaces/default/pods") as resp,
            ):
                await resp.read()

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await call()
        assert kube.faults.rules[0].fired == 1


# --- priority and fairness ---------------------------------------------------------------------


async def test_a_client_over_its_rate_gets_apfs_429(kube: KubeApiServer) -> None:
    flow = kube.throttle(qps=1.0, burst=2)
    url = f"{kube.url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as session:
        answers = []
        for _ in range(3):
            async with session.get(url) as resp:
                answers.append((resp.status, dict(resp.headers), await resp.text()))
        # Another flow (another user) has its own share.
        other = {"Authorization": "Bearer someone-else"}
        async with session.get(url, headers=other) as resp:
            assert resp.status == 200
    (s1, h1, _), (s2, _, _), (s3, h3, body) = answers
    assert (s1, s2, s3) == (200, 200, 429)
    # filters/maxinflight.go's tooManyRequests: plain text from http.Error, Retry-After 1.
    assert body == "Too many requests, please try again later.\n"
    assert h3["Content-Type"] == "text/plain; charset=utf-8"
    assert h3["Retry-After"] == "1"
    for headers in (h1, h3):  # served or refused, the classification is named by UID
        assert headers["X-Kubernetes-PF-PriorityLevel-UID"] == flow.priority_level_uid
        assert headers["X-Kubernetes-PF-FlowSchema-UID"] == flow.flow_schema_uid
    assert flow.rejected[""] == 1
    assert [e.status for e in kube.log] == [200, 200, 429, 200]
    kube.unthrottle()
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        assert "X-Kubernetes-PF-PriorityLevel-UID" not in resp.headers


async def test_the_flow_refills_at_its_rate(kube: KubeApiServer) -> None:
    flow = kube.throttle(qps=1.0, burst=1)
    assert flow.admit("u", now=0.0)
    assert not flow.admit("u", now=0.5)
    assert flow.admit("u", now=1.5)
    assert flow.rejected == {"u": 1}
