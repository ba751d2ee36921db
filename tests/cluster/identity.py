"""Identities other than the admin on the real tier: a ServiceAccount's token from the
TokenRequest API (`POST .../serviceaccounts/NAME/token`, what a kubelet asks for a projected
token) in a kubeconfig, and cluster-scoped objects a test must remove itself (a namespace's
deletion does not take them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from launch_agent.realcluster import kubeconfig
from launch_agent.realcluster.kubehttp import ApiError, Credentials, KubeHTTP, path_of

Obj = dict[str, Any]
TOKEN_SECONDS = 3600


def user_of(namespace: str, service_account: str) -> str:
    """The user name the API server authenticates a ServiceAccount's token as."""
    return f"system:serviceaccount:{namespace}:{service_account}"


async def service_account(http: KubeHTTP, namespace: str, name: str) -> None:
    await http.ensure(
        path_of("v1", "serviceaccounts", namespace),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )


async def token_of(http: KubeHTTP, namespace: str, name: str) -> str:
    """A bound token of the ServiceAccount (TokenRequest API)."""
    answer = await http.create(
        path_of("v1", "serviceaccounts", namespace, f"{name}/token"),
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    return str(answer["status"]["token"])


async def token_kubeconfig(
    http: KubeHTTP, admin: Credentials, namespace: str, name: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount `namespace/name`."""
    assert admin.ca_file is not None
    token = await token_of(http, namespace, name)
    return await asyncio.to_thread(
        kubeconfig.write,
        path,
        server=admin.server,
        ca_file=admin.ca_file,
        token=token,
        namespace=namespace,
    )


def token_credentials(admin: Credentials, token: str) -> Credentials:
    return Credentials(admin.server, admin.ca_file, token=token)


@contextlib.asynccontextmanager
async def cluster_objects(http: KubeHTTP, *objects: tuple[str, Obj]) -> AsyncIterator[None]:
    """Create cluster-scoped objects (collection path, body) for the block; delete them after."""
    made: list[str] = []
    try:
        for collection, body in objects:
            await http.create(collection, body)
            made.append(f"{collection}/{body['metadata']['name']}")
        yield
    finally:
        for path in reversed(made):
            with contextlib.suppress(ApiError):
                await http.delete(path)
