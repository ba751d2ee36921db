"""`DigestRecord`: the agent's record of the digests it built, in a ConfigMap (I/O).

The record (`model/digest_record.py`) lives in one ConfigMap in the agent's own namespace,
which builds cannot write: the Kaniko Job runs in the Kaniko namespace under its own service
account with no API token mounted, and the chart grants that account nothing; the agent's
Role there allows `get` and `update` on this one name (`create` cannot be limited by name).

- `load()`: read it (absent: empty); the builder calls it at start-up, so missing RBAC is a
  start-up error naming what to grant.
- `trusts(tag, digest)`: from memory; a digest not there is read again before the answer is
  no (another replica, or this agent before a restart, may have added it).
- `add(tag, digest)`: read-modify-write with the object's resourceVersion; a 409 (another
  writer came first) reads it again and retries, so no concurrent build's entry is lost.

A record that cannot be read raises `RecordUnavailable`; the builder then builds (it cannot
tell a poisoned tag from an unrecorded one) and reports nothing as poisoned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from launch_agent.adapters.kube import (
    KubeClient,
    KubeConflict,
    KubeError,
    KubeNotFound,
    Resource,
)
from launch_agent.model import labels
from launch_agent.model.digest_record import (
    Entry,
    encode_record,
    parse_record,
    trusted,
    with_build,
)

log = logging.getLogger(__name__)
CONFIGMAPS = Resource("", "v1", "ConfigMap", "configmaps")
WRITE_ATTEMPTS = 5


class RecordUnavailable(Exception):
    """The record could not be read or written; the message says why."""


class DigestRecord:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        name: str,
        *,
        agent: str = "launch-agent",
        max_entries: int = 2000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.agent = agent
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, Entry] = {}
        self._version: str | None = None  # resourceVersion; None: no ConfigMap yet
        self._lock = asyncio.Lock()

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def __len__(self) -> int:
        return len(self._entries)

    async def load(self) -> None:
        try:
            obj = await self.kube.get(CONFIGMAPS, self.namespace, self.name)
        except KubeNotFound:
            self._entries, self._version = {}, None
            return
        except KubeError as exc:
            raise RecordUnavailable(f"the build record {self.where} cannot be read: {exc}") from exc
        self._entries = parse_record(obj.get("data"))
        self._version = str((obj.get("metadata") or {}).get("resourceVersion") or "") or None

    async def trusts(self, tag: str, digest: str) -> bool:
        if trusted(self._entries, tag, digest):
            return True
        async with self._lock:
            await self.load()
        return trusted(self._entries, tag, digest)

    async def add(self, tag: str, digest: str) -> None:
        async with self._lock:
            for _ in range(WRITE_ATTEMPTS):
                entries = with_build(
                    self._entries, tag, digest, int(self.clock()), self.max_entries
                )
                try:
                    await self._write(entries)
                except KubeConflict:
                    await self.load()  # another writer came first: merge into theirs
                    continue
                except KubeError as exc:
                    raise RecordUnavailable(
                        f"the build record {self.where} cannot be written: {exc}"
                    ) from exc
                return
        raise RecordUnavailable(f"the build record {self.where} kept changing while written")

    async def _write(self, entries: dict[str, Entry]) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {labels.AGENT: self.agent, "app.kubernetes.io/component": "build-record"},
                "annotations": {
                    labels.PREFIX + "about": "image digests this agent built, per context hash;"
                    " a registry tag is reused only if its digest is here (docs/builds.md)"
                },
            },
            "data": encode_record(entries),
        }
        path = CONFIGMAPS.path(self.namespace)
        if self._version is None:
            written = await self.kube.request("POST", path, body=body)
        else:
            body["metadata"]["resourceVersion"] = self._version
            written = await self.kube.request(
                "PUT", CONFIGMAPS.path(self.namespace, self.name), body=body
            )
        self._entries = entries
        self._version = str(written["metadata"]["resourceVersion"])
