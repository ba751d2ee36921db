"""A small client for a real kube-apiserver, for the tier's own parts (node simulator, add-on
installer, test helpers).

It is not the agent's client (`adapters/kube/`) and imports nothing of it: the cluster tier
stands for the outside world, and a test in which the world shares code with the agent would
prove less. Plain REST: paths built from (apiVersion, plural), JSON bodies, one aiohttp session
with the admin's client certificate, and `ApiError` carrying the server's Status.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

Obj = dict[str, Any]
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status, self.reason, self.message, self.body = status, reason, message, body or {}


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None

    def ssl_context(self) -> ssl.SSLContext | bool:
        if self.server.startswith("http://"):
            return False  # the sandbox's API server
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.cert_file is not None and self.key_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def path_of(api_version: str, plural: str, namespace: str | None = None, name: str = "") -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{plural}" + (f"/{name}" if name else "")


class KubeHTTP:
    def __init__(self, credentials: Credentials, *, timeout: float = 30.0) -> None:
        self.credentials = credentials
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=5)
        self._session: aiohttp.ClientSession | None = None
        self._plurals: dict[tuple[str, str], str] = {}

    async def __aenter__(self) -> KubeHTTP:
        context = await asyncio.to_thread(self.credentials.ssl_context)
        headers = {"User-Agent": "launch-agent-cluster-tier"}
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        self._session = aiohttp.ClientSession(
            base_url=self.credentials.server,
            connector=aiohttp.TCPConnector(ssl=context, limit=32),
            headers=headers,
            timeout=self._timeout,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeHTTP is used outside `async with`")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, path, data=data, params=params, headers=headers
        ) as resp:
            raw = await resp.read()
            if resp.status >= 400:
                raise _error(resp.status, raw)
            if not raw:
                return None
            if resp.content_type == "application/json":
                return json.loads(raw)
            return raw.decode("utf-8", "replace")

    async def get(self, path: str, **params: str) -> Any:
        return await self.request("GET", path, params=params or None)

    async def find(self, path: str) -> Obj | None:
        try:
            found: Obj = await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def create(self, path: str, body: Obj, **params: str) -> Obj:
        created: Obj = await self.request("POST", path, body=body, params=params or None)
        return created

    async def ensure(self, path: str, body: Obj) -> Obj:
        """Create, or replace what is there (an add-on's manifest applied again)."""
        name = body["metadata"]["name"]
        try:
            return await self.create(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        current = await self.get(f"{path}/{name}")
        replaced = {
            **body,
            "metadata": {
                **body["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        updated: Obj = await self.request("PUT", f"{path}/{name}", body=replaced)
        return updated

    async def patch(self, path: str, body: Any, kind: str = "merge") -> Obj:
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        patched: Obj = await self.request("PATCH", path, body=body, content_type=content_type)
        return patched

    async def delete(self, path: str, body: Obj | None = None) -> bool:
        try:
            await self.request("DELETE", path, body=body)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def metadata(self, path: str) -> Obj | None:
        """An object's metadata only (`PartialObjectMetadata`), or None when it is gone."""
        try:
            found: Obj = await self.request("GET", path, accept=PARTIAL_METADATA)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def plural(self, api_version: str, kind: str) -> str | None:
        """The resource name of a kind, from the group-version's discovery document."""
        key = (api_version, kind)
        if key not in self._plurals:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                doc = await self.get(base)
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            for resource in doc.get("resources") or []:
                if "/" not in resource.get("name", "") and resource.get("kind"):
                    self._plurals[(api_version, resource["kind"])] = resource["name"]
        return self._plurals.get(key)

    async def watch(
        self, path: str, resource_version: str, **params: str
    ) -> AsyncIterator[tuple[str, Obj]]:
        """The events of one watch request from `resource_version`, until the server ends it."""
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
            **params,
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=330)
        async with self.session.get(path, params=query, timeout=timeout) as resp:
            if resp.status >= 400:
                raise _error(resp.status, await resp.read())
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiError(
                        int(status.get("code") or 500),
                        str(status.get("reason") or ""),
                        str(status.get("message") or ""),
                        status,
                    )
                yield event["type"], event["object"]


def _error(status: int, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw)
    except ValueError:
        return ApiError(status, "", raw[:500].decode("utf-8", "replace"))
    if not isinstance(body, dict):
        return ApiError(status, "", str(body)[:500])
    return ApiError(status, str(body.get("reason") or ""), str(body.get("message") or ""), body)
