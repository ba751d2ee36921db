"""`metav1.Status` errors, the only error shape kube-apiserver answers with.

Clients branch on `code` and `reason` (kubernetes_asyncio raises `ApiException(status=code)`,
kubectl prints `message`), so each constructor here copies the exact reason and message
wording of kube-apiserver.
"""

from __future__ import annotations

from typing import Any

from launch_agent.sandbox.kube.resources import ResourceType


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def _details(rt: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural, **extra}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(rt)} "{name}" not found', _details(rt, name))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'namespaces "{namespace}" not found',
        {"name": namespace, "kind": "namespaces"},
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{qualified(rt)} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(rt)} "{name}": the object has been'
        " modified; please apply your changes to the latest version and try again",
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid; `causes` are (field path, message) pairs."""
    summary = ", ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(
        422,
        "Invalid",
        f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {summary}',
        _details(
            rt,
            name,
            causes=[{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        ),
    )


def invalid_fields(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid as `k8s.io/apimachinery/pkg/api/errors.NewInvalid` builds it; `causes` are
    (field path, cause type such as FieldValueInvalid, `ErrorBody()`) triples. The message
    joins `<path>: <body>` like `utilerrors.Aggregate` (in brackets when there are several,
    duplicates once) and the details name the kind, not the resource."""
    texts = list(dict.fromkeys(f"{f}: {body}" for f, _, body in causes))
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": rt.kind,
        "causes": [{"reason": t, "message": body, "field": f} for f, t, body in causes],
    }
    if rt.group:
        details["group"] = rt.group
    return ApiError(
        422, "Invalid", f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {summary}', details
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
