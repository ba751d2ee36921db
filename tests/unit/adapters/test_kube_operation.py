"""The `operation` label of Kubernetes call metrics: bounded (no names, no namespaces)."""

from __future__ import annotations

import pytest

from launch_agent.adapters.kube.client import operation_of

CASES = [
    ("GET", "/api/v1/namespaces/team-a/pods", "list pods"),
    ("GET", "/api/v1/namespaces/team-a/pods/run-1-abcde/log", "get pods/log"),
    ("POST", "/apis/batch/v1/namespaces/team-a/jobs", "create jobs"),
    ("DELETE", "/apis/batch/v1/namespaces/team-a/jobs/run-1", "delete jobs"),
    ("PATCH", "/apis/batch/v1/namespaces/team-a/jobs/run-1", "patch jobs"),
    ("GET", "/apis/jobset.x-k8s.io/v1alpha2", "discovery"),
    ("GET", "/api/v1/namespaces/team-a", "get namespaces"),
    ("GET", "/api/v1/namespaces/x/services/http:a:b/proxy/api/status", "get services/proxy"),
    ("GET", "/version", "other"),
]


@pytest.mark.parametrize(("method", "path", "expected"), CASES)
def test_operation_names_the_verb_and_resource_only(method: str, path: str, expected: str) -> None:
    assert operation_of(method, path) == expected


def test_names_and_namespaces_never_reach_the_label() -> None:
    names = {
        operation_of("GET", f"/apis/batch/v1/namespaces/ns-{i}/jobs/run-{i}?watch=1")
        for i in range(100)
    }
    assert names == {"get jobs"}
