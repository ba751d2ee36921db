"""The Kubernetes side of the agent, over kubernetes_asyncio.

- `KubeClient` (`client.py`): the one client per process; create-or-adopt with strict field
  validation, delete with background propagation, list, patch, pod log tail, retries (the
  engine and its `RetryPolicy` are `adapters/retry.py`).
- `load_configuration` (`connect.py`): kubeconfig or in-cluster configuration, off the loop.
- `KindRegistry` / `Resource` (`kinds.py`): kinds resolved by discovery, cached.
- `Informer` / `InformerSet` (`informer.py`): list-then-watch per (kind, namespace) with a local
  cache (`cache.py`), bookmarks, 410 relist and backoff.
- `errors.py`: typed errors per HTTP status, `KubeUnavailable`, `KindNotInstalled`.
"""

from __future__ import annotations

from launch_agent.adapters.kube.client import Created, KubeClient, Listed
from launch_agent.adapters.kube.connect import load_configuration
from launch_agent.adapters.kube.errors import (
    KindNotInstalled,
    KubeApiError,
    KubeBadRequest,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    KubeUnauthorized,
    KubeUnavailable,
)
from launch_agent.adapters.kube.informer import (
    Handler,
    Informer,
    InformerEvent,
    InformerSet,
    InformerSettings,
)
from launch_agent.adapters.kube.kinds import KindRegistry, Resource

__all__ = [
    "Created",
    "Handler",
    "Informer",
    "InformerEvent",
    "InformerSet",
    "InformerSettings",
    "KindNotInstalled",
    "KindRegistry",
    "KubeApiError",
    "KubeBadRequest",
    "KubeClient",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeGone",
    "KubeInvalid",
    "KubeNotFound",
    "KubeServerError",
    "KubeTooManyRequests",
    "KubeUnauthorized",
    "KubeUnavailable",
    "Listed",
    "Resource",
    "load_configuration",
]
