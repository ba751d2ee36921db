"""Discovery parsing, REST paths, typed errors and backoff timing (pure)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.adapters.kube.errors import (
    KindNotInstalled,
    KubeApiError,
    KubeBadRequest,
    KubeConflict,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    error_from_response,
)
from launch_agent.adapters.kube.kinds import Resource, parse_resource_list
from launch_agent.adapters.retry import Backoff, RetryPolicy, parse_retry_after

VOLCANO = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "batch.volcano.sh/v1alpha1",
    "resources": [
        {
            "name": "jobs",
            "singularName": "job",
            "namespaced": True,
            "kind": "Job",
            "verbs": ["get"],
        },
        {
            "name": "jobs/status",
            "singularName": "",
            "namespaced": True,
            "kind": "Job",
            "verbs": ["get"],
        },
    ],
}
CORE = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "pods", "namespaced": True, "kind": "Pod"},
        {"name": "pods/log", "namespaced": True, "kind": "Pod"},
        {"name": "nodes", "namespaced": False, "kind": "Node"},
        "junk",
        {"name": 3, "kind": "Broken"},
    ],
}


def test_parse_resource_list_skips_subresources_and_junk() -> None:
    assert parse_resource_list(VOLCANO) == {
        "Job": Resource("batch.volcano.sh", "v1alpha1", "Job", "jobs", True)
    }
    core = parse_resource_list(CORE)
    assert core == {
        "Pod": Resource("", "v1", "Pod", "pods", True),
        "Node": Resource("", "v1", "Node", "nodes", False),
    }
    assert parse_resource_list({"groupVersion": "x/v1", "resources": None}) == {}


@pytest.mark.parametrize(
    ("resource", "args", "path"),
    [
        (
            Resource("batch", "v1", "Job", "jobs"),
            ("ml", "run-1"),
            "/apis/batch/v1/namespaces/ml/jobs/run-1",
        ),
        (Resource("batch", "v1", "Job", "jobs"), ("ml", None), "/apis/batch/v1/namespaces/ml/jobs"),
        (Resource("batch", "v1", "Job", "jobs"), (None, None), "/apis/batch/v1/jobs"),
        (Resource("", "v1", "Pod", "pods"), ("ml", "p", "log"), "/api/v1/namespaces/ml/pods/p/log"),
        (Resource("", "v1", "Node", "nodes", namespaced=False), ("ml", "n1"), "/api/v1/nodes/n1"),
        (
            Resource("ray.io", "v1", "RayJob", "rayjobs"),
            ("a b", "x/y"),
            "/apis/ray.io/v1/namespaces/a%20b/rayjobs/x%2Fy",
        ),
    ],
)
def test_resource_paths(resource: Resource, args: tuple[str | None, ...], path: str) -> None:
    assert resource.path(*args) == path


@pytest.mark.parametrize(
    ("status", "body", "cls", "reason", "message"),
    [
        (
            404,
            b'{"kind":"Status","reason":"NotFound","message":"jobs.batch \\"x\\" not found","code":404}',
            KubeNotFound,
            "NotFound",
            'jobs.batch "x" not found',
        ),
        (
            409,
            b'{"reason":"AlreadyExists","message":"exists"}',
            KubeConflict,
            "AlreadyExists",
            "exists",
        ),
        (
            400,
            b'{"reason":"BadRequest","message":"strict decoding error: unknown field \\"spec.foo\\""}',
            KubeBadRequest,
            "BadRequest",
            'strict decoding error: unknown field "spec.foo"',
        ),
        (
            410,
            {"reason": "Expired", "message": "too old resource version: 1 (5)"},
            KubeGone,
            "Expired",
            "too old resource version: 1 (5)",
        ),
        (
            422,
            b'{"reason":"Invalid","message":"bad","details":{"causes":[{"field":"spec.x","message":"must be > 0"}]}}',
            KubeInvalid,
            "Invalid",
            "bad",
        ),
        (
            429,
            b'{"reason":"TooManyRequests","message":"slow down"}',
            KubeTooManyRequests,
            "TooManyRequests",
            "slow down",
        ),
        (
            502,
            b"<html><body>Bad   Gateway</body></html>",
            KubeServerError,
            "HTTP502",
            "<html><body>Bad Gateway</body></html>",
        ),
        (418, b"", KubeApiError, "HTTP418", "no message"),
    ],
)
def test_error_from_response(
    status: int, body: bytes | dict[str, str], cls: type[KubeApiError], reason: str, message: str
) -> None:
    error = error_from_response(
        status, body, method="POST", path="/apis/batch/v1/namespaces/ml/jobs"
    )
    assert type(error) is cls
    assert (error.status, error.reason, error.message) == (status, reason, message)
    assert str(error).startswith(f"POST /apis/batch/v1/namespaces/ml/jobs: {status} {reason}")


def test_invalid_causes_and_conflict_kinds() -> None:
    error = error_from_response(
        422,
        b'{"reason":"Invalid","details":{"causes":[{"field":"spec.x","message":"must be > 0"},"junk"]}}',
    )
    assert error.causes == [("spec.x", "must be > 0")]
    conflict = error_from_response(409, b'{"reason":"Conflict"}')
    assert isinstance(conflict, KubeConflict)
    assert not conflict.already_exists


def test_kind_not_installed_names_kind_and_group_version() -> None:
    error = KindNotInstalled("kubeflow.org/v1", "PyTorchJob")
    assert str(error) == "PyTorchJob (kubeflow.org/v1) is not installed in this cluster"


@pytest.mark.parametrize(
    ("header", "seconds"), [(None, None), ("1", 1.0), (" 2.5 ", 2.5), ("-1", None), ("soon", None)]
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


@given(
    retry=st.integers(0, 100),
    rand=st.floats(0, 1, exclude_max=True),
    after=st.none() | st.floats(0, 120),
)
def test_retry_delay_is_bounded_and_honours_retry_after(
    retry: int, rand: float, after: float | None
) -> None:
    policy = RetryPolicy(base_delay=0.2, max_delay=10.0, max_retry_after=60.0)
    delay = policy.delay(retry, rand, after)
    if after is not None and after > 60.0:
        assert delay is None
        return
    assert delay is not None
    assert 0.1 <= delay <= max(10.0, after or 0.0)
    if after is not None:
        assert delay >= after


def test_backoff_grows_jittered_and_resets() -> None:
    backoff = Backoff(base=0.2, cap=5.0, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(10)]
    assert all(0.1 <= d <= 5.0 for d in delays)
    assert delays[0] <= 0.2 and delays[-1] >= 2.5  # doubles up to the cap, never less than half
    backoff.reset()
    assert backoff.next_delay() <= 0.2


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"base_delay": -1}, {"base_delay": 5, "max_delay": 1}, {"timeout": 0}],
)
def test_retry_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must|need"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
