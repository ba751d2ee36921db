"""API Priority and Fairness, as far as a client sees it: 429s once it sends too fast.

Upstream: kubernetes/kubernetes
staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go
(`WithPriorityAndFairness`, `setResponseHeaders`) and `filters/maxinflight.go`
(`tooManyRequests`), with the classification from `pkg/util/flowcontrol`. What a client gets:

- every request APF classified, served or refused, carries the UIDs (never the names) of the
  priority level and flow schema that matched it, in `X-Kubernetes-PF-PriorityLevel-UID` and
  `X-Kubernetes-PF-FlowSchema-UID`;
- a request APF rejects (its queues full, or its wait timed out) is answered 429 with
  `Retry-After: 1` and the body `http.Error` writes: `Too many requests, please try again
  later.` as text/plain, not a `Status` (the filter runs before the API's serializers).

Upstream limits concurrency (seats per priority level, fair queues per flow); the sandbox
models the outcome a test can configure and predict: each flow (a client: its bearer token)
gets a token bucket of `qps` and `burst`, and a request that finds it empty is rejected as
APF rejects. Long-running non-watch requests (`pods/log`) are not tracked, as upstream skips
them. The sandbox imports nothing of the agent's, so this bucket is its own.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
# `filters/maxinflight.go`: `retryAfter = "1"` and the text `http.Error` sends.
RETRY_AFTER = "1"
TOO_MANY = "Too many requests, please try again later.\n"


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class FlowControl:
    """A per-flow rate; `rejected` counts the 429s by flow, for tests."""

    qps: float
    burst: int
    # The UIDs of the built-in `workload-low` priority level and `service-accounts` flow
    # schema in a test cluster; any stable UIDs do.
    priority_level_uid: str = "6c1ac4a8-6b8f-4d3c-9a39-0c7f2f4a1e01"
    flow_schema_uid: str = "0b1dbd5c-7f2a-4b0e-8a4e-6f3c9e7d2b02"
    rejected: Counter[str] = field(default_factory=Counter)
    _flows: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, flow: str, now: float | None = None) -> bool:
        """Whether a request of `flow` is served now (and takes its token)."""
        now = time.monotonic() if now is None else now
        bucket = self._flows.get(flow)
        if bucket is None:
            bucket = self._flows[flow] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.qps)
        bucket.updated = now
        if bucket.tokens < 1.0:
            self.rejected[flow] += 1
            return False
        bucket.tokens -= 1.0
        return True

    def classify(self, response: web.StreamResponse) -> None:
        response.headers[PRIORITY_LEVEL_HEADER] = self.priority_level_uid
        response.headers[FLOW_SCHEMA_HEADER] = self.flow_schema_uid

    def too_many_requests(self) -> web.Response:
        response = web.Response(
            status=429, text=TOO_MANY, content_type="text/plain", charset="utf-8"
        )
        response.headers["Retry-After"] = RETRY_AFTER
        response.headers["X-Content-Type-Options"] = "nosniff"
        self.classify(response)
        return response


def flow_of(request: web.Request) -> str:
    """The flow distinguisher of the default flow schemas: the user (here, its token)."""
    return request.headers.get("Authorization", "")


def long_running(key: str) -> bool:
    """Requests APF does not track: long-running ones that are not watches."""
    return key == "GET pods/log"
