"""`launch-agent diagnose NAMESPACE/NAME` against the sandbox's API server, over HTTP through
the agent's own Kubernetes client: the workload, the namespace's pods and Events, judged like
the `-f` replay of the same objects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from launch_agent.cli import main
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig

NS = "default"
UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[KubeApiServer, Path]]:
    async with KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as kube:
        path = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
        yield kube, path


def _fixture_items(case: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads((UPSTREAM / f"{case}.json").read_text())["items"]
    for item in items:
        item["metadata"]["namespace"] = NS
        for key in ("involvedObject", "regarding"):
            if key in item:
                item[key]["namespace"] = NS
    return items


async def _diagnose(
    capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, dict[str, Any] | None, str]:
    code = await asyncio.to_thread(main, ["diagnose", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


async def test_a_job_whose_pods_cannot_be_created(
    cluster: tuple[KubeApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    kube, kubeconfig = cluster
    job, *events = _fixture_items("job/failedcreate-quota-past-deadline")
    # Status is the controllers' (none runs here): the Job is created, its pods never are.
    job["spec"]["template"] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }
    created_job = kube.objects.create("jobs", job)
    for event in events:
        # The Job controller's Events name the Job's uid, which the API server assigned.
        event["involvedObject"]["uid"] = created_job["metadata"]["uid"]
        kube.objects.create("events", event)
    # A pod of another Job in the namespace must not be blamed.
    other = _fixture_items("job/oomkilled")[1]
    other["metadata"].update(name="other-x1", labels={"job-name": "other"})
    other["metadata"].pop("ownerReferences")
    kube.objects.create("pods", other)
    created = datetime.now(UTC)
    later = (created + timedelta(minutes=31)).strftime("%Y-%m-%dT%H:%M:%SZ")
    argv = ["--kubeconfig", str(kubeconfig), "-o", "json"]
    code, got, err = await _diagnose(capsys, f"{NS}/run-abc", *argv, "--now", later)
    assert code == 0, err
    assert got is not None
    assert (got["state"], got["reason"], got["pod"], got["container"]) == (
        "failed",
        "FailedCreate",
        None,
        None,
    )
    assert got["message"].startswith("Job run-abc did not start within 30m: 9 FailedCreate events:")
    assert "exceeded quota: gpu-quota" in got["message"]
    code, got, err = await _diagnose(capsys, f"{NS}/run-abc", *argv, "--kind", "job")
    assert code == 0, err
    assert got is not None and (got["state"], got["reason"]) == ("starting", "FailedCreate")


async def test_missing_workloads_and_kinds_are_clear_errors(
    cluster: tuple[KubeApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = cluster
    code, _, err = await _diagnose(capsys, f"{NS}/nope", "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert "Job default/nope not found" in err
    code, _, err = await _diagnose(
        capsys, f"{NS}/nope", "--kind", "rayjob", "--kubeconfig", str(kubeconfig)
    )
    assert code == 2
    assert "RayJob" in err and "Traceback" not in err
