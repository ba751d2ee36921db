"""Kinds -> REST resources, resolved by discovery and cached; never a guessed plural.

The reference agent builds a custom resource's path as `kind.lower() + "s"`, wrong for every
irregular plural, and learns that a CRD is missing from an opaque 404 on create. Here a kind is
looked up in its group-version's `APIResourceList` (`/apis/{group}/{version}`, `/api/v1`), like
kr8s' `async_lookup_kind`: the answer is cached, a miss refreshes the cache once (a CRD installed
while the agent runs is found on the next use), and a kind the cluster does not serve becomes
`KindNotInstalled` naming the kind and its group/version.

The handful of built-in kinds the agent itself uses are known constants of the Kubernetes API
(not guesses) and are seeded, so that watching pods and creating Jobs costs no discovery request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from launch_agent.adapters.kube.errors import KindNotInstalled


@dataclass(frozen=True, slots=True)
class Resource:
    """One served REST resource."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, sub: str | None = None
    ) -> str:
        """The REST path; `namespace=None` for a cluster-wide list or watch."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if sub is not None:
                base += f"/{sub}"
        return base

    def __str__(self) -> str:
        return f"{self.kind} ({self.api_version})"


BUILTIN = (
    Resource("", "v1", "Pod", "pods"),
    Resource("", "v1", "Secret", "secrets"),
    Resource("", "v1", "ConfigMap", "configmaps"),
    Resource("", "v1", "Event", "events"),
    Resource("", "v1", "Service", "services"),
    Resource("", "v1", "Namespace", "namespaces", namespaced=False),
    Resource("batch", "v1", "Job", "jobs"),
)

# Fetches a discovery document by path; None when the server answers 404 (group not served).
Fetch = Callable[[str], Awaitable[Mapping[str, Any] | None]]


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def parse_resource_list(document: Mapping[str, Any]) -> dict[str, Resource]:
    """kind -> Resource from an `APIResourceList`, skipping subresources like `jobs/status`."""
    group, version = split_api_version(str(document.get("groupVersion", "")))
    out: dict[str, Resource] = {}
    resources = document.get("resources")
    if not isinstance(resources, list):
        return out
    for entry in resources:
        if not isinstance(entry, Mapping):
            continue
        name, kind = entry.get("name"), entry.get("kind")
        if not isinstance(name, str) or not isinstance(kind, str) or "/" in name:
            continue
        out.setdefault(kind, Resource(group, version, kind, name, entry.get("namespaced") is True))
    return out


class KindRegistry:
    """The cache of resolved kinds, per group-version; concurrent misses share one request."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._known: dict[str, dict[str, Resource]] = {}
        self._inflight: dict[str, asyncio.Future[dict[str, Resource]]] = {}
        self.discovery_requests = 0
        for res in BUILTIN:
            self._known.setdefault(res.api_version, {})[res.kind] = res

    async def resolve(self, api_version: str, kind: str) -> Resource:
        cached = self._known.get(api_version, {}).get(kind)
        if cached is not None:
            return cached
        served = await self._refresh(api_version)
        found = served.get(kind)
        if found is None:
            raise KindNotInstalled(api_version, kind)
        return found

    def cached(self, api_version: str, kind: str) -> Resource | None:
        return self._known.get(api_version, {}).get(kind)

    async def _refresh(self, api_version: str) -> dict[str, Resource]:
        pending = self._inflight.get(api_version)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[dict[str, Resource]] = asyncio.get_running_loop().create_future()
        self._inflight[api_version] = future
        try:
            group, version = split_api_version(api_version)
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            self.discovery_requests += 1
            document = await self._fetch(path)
            served = dict(self._known.get(api_version, {}))
            if document is not None:
                served.update(parse_resource_list(document))
            self._known[api_version] = served
            future.set_result(served)
            return served
        except BaseException as exc:
            future.set_exception(exc)
            # Retrieve it so a failed refresh nobody else waited on is not logged as unretrieved.
            future.exception()
            raise
        finally:
            del self._inflight[api_version]
