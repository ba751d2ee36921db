"""Fixtures for the sandbox Kubernetes API server tests: a server per test, real clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from launch_agent.sandbox.kube import KubeApiServer

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT.parent / "shared" / "crds"


def job_body(name: str | None = "job-a", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {}}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "launch-"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
            **spec,
        },
    }


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
async def api(kube: KubeApiServer) -> AsyncIterator[client.ApiClient]:
    config = client.Configuration(host=kube.url)
    async with client.ApiClient(config) as api_client:
        yield api_client


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
