"""Typed Kubernetes API errors, one class per status code the agent branches on.

Like kopf's `errors.py`: callers catch `KubeNotFound` or `KubeConflict` instead of comparing
integers, and every error carries what a person needs to act on it: the verb and path, the API
server's `reason` and `message` verbatim (for a strict-validation failure that message names the
unknown field), and for 422 the list of (field, message) causes.

Two errors are not HTTP statuses: `KubeUnavailable` (the API server could not be reached, or kept
failing, after every retry) and `KindNotInstalled` (the cluster has no such kind: the CRD is not
installed), which the dispatcher turns into "PyTorchJob (kubeflow.org/v1) is not installed in
this cluster: install the Kubeflow training operator".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """Anything that went wrong talking to the Kubernetes API."""


class KubeApiError(KubeError):
    """The API server answered with an error `Status`."""

    status: int = 0

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        method: str = "",
        path: str = "",
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        return f"{where}{self.status} {self.reason}: {self.message}"

    @property
    def causes(self) -> list[tuple[str, str]]:
        """(field, message) pairs of a 422 Invalid, in the server's order."""
        out: list[tuple[str, str]] = []
        causes = self.details.get("causes")
        if isinstance(causes, list):
            for cause in causes:
                if isinstance(cause, Mapping):
                    out.append((str(cause.get("field", "")), str(cause.get("message", ""))))
        return out


class KubeBadRequest(KubeApiError):
    """400: among others, `fieldValidation=Strict` rejecting an unknown field."""

    status = 400


class KubeUnauthorized(KubeApiError):
    status = 401


class KubeForbidden(KubeApiError):
    status = 403


class KubeNotFound(KubeApiError):
    status = 404


class KubeConflict(KubeApiError):
    """409: `AlreadyExists` on create, `Conflict` on a stale resourceVersion."""

    status = 409

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class KubeGone(KubeApiError):
    """410: a watch or list resumed from a resourceVersion the server has compacted."""

    status = 410


class KubeInvalid(KubeApiError):
    status = 422


class KubeTooManyRequests(KubeApiError):
    status = 429


class KubeServerError(KubeApiError):
    """5xx."""


_BY_STATUS: dict[int, type[KubeApiError]] = {
    400: KubeBadRequest,
    401: KubeUnauthorized,
    403: KubeForbidden,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
    429: KubeTooManyRequests,
}


def error_from_response(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    *,
    method: str = "",
    path: str = "",
    retry_after: float | None = None,
) -> KubeApiError:
    """The typed error for an HTTP error answer; the body is a `Status` when the server is
    kube-apiserver, anything else (an HTML page from a proxy) when it is not."""
    parsed: object = body
    if isinstance(body, bytes | str):
        try:
            parsed = json.loads(body)
        except ValueError:
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
            parsed = {"message": " ".join(text.split())[:500]}
    reason = message = ""
    details: Mapping[str, Any] | None = None
    if isinstance(parsed, Mapping):
        reason = str(parsed.get("reason") or "")
        message = str(parsed.get("message") or "")
        raw = parsed.get("details")
        details = raw if isinstance(raw, Mapping) else None
    cls = _BY_STATUS.get(status) or (KubeServerError if status >= 500 else KubeApiError)
    return cls(
        status,
        reason or f"HTTP{status}",
        message or "no message",
        method=method,
        path=path,
        details=details,
        retry_after=retry_after,
    )


class KubeUnavailable(KubeError):
    """The API server could not be reached or kept failing; the last cause is chained."""

    def __init__(self, method: str, path: str, attempts: int, last: BaseException) -> None:
        self.method, self.path, self.attempts, self.last = method, path, attempts, last
        super().__init__(
            f"{method} {path}: Kubernetes API unavailable after {attempts} attempt(s): {last}"
        )


class KindNotInstalled(KubeError):
    """The cluster serves no such kind: its CustomResourceDefinition is not installed."""

    def __init__(self, api_version: str, kind: str) -> None:
        self.api_version, self.kind = api_version, kind
        super().__init__(f"{kind} ({api_version}) is not installed in this cluster")
