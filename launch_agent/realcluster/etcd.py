"""etcd's own HTTP gateway (`/v3/...`, JSON over the client URL): the revision, and compaction.

kube-apiserver compacts etcd itself every 5 minutes (`--etcd-compaction-interval`); a test that
needs a resourceVersion to expire now compacts through the gateway, as `etcdctl compact` would:
the revision from a one-key range, then `POST /v3/kv/compaction` at it. A watch that resumes
from a resourceVersion below it, straight from etcd (Events: kube-apiserver keeps no watch
cache for them, `pkg/kubeapiserver/default_storage_factory_builder.go`), answers 410 Gone.
"""

from __future__ import annotations

from typing import Any

import aiohttp

_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=5)


class EtcdError(RuntimeError):
    """The gateway refused a call; the message has its answer."""


async def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession(timeout=_TIMEOUT) as session,
        session.post(f"{url.rstrip('/')}{path}", json=body) as resp,
    ):
        text = await resp.text()
        if resp.status >= 400:
            raise EtcdError(f"etcd {path}: HTTP {resp.status}: {text[:500]}")
        answer: dict[str, Any] = await resp.json(content_type=None)
        return answer


async def revision(url: str) -> int:
    """etcd's current revision (the header of any read)."""
    # The key "\0" (base64 "AA=="): the read only carries the header back.
    answer = await _post(url, "/v3/kv/range", {"key": "AA==", "limit": 1, "keys_only": True})
    return int(answer["header"]["revision"])


async def compact(url: str) -> int:
    """Compact etcd's history up to its current revision (physically: the call returns once
    the old revisions are gone); returns that revision."""
    current = await revision(url)
    await _post(url, "/v3/kv/compaction", {"revision": str(current), "physical": True})
    return current
