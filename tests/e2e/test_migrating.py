"""docs/migrating.md, walked: a team on W&B's chart with a W&B queue moves to launch-agent.

In: W&B's own values file (the one W&B's Kubernetes tutorial gives, unchanged but for its
placeholders) and a W&B run queue whose config lives in W&B, with a template variable. Then the
documented steps: `launch-agent migrate` against W&B, `helm template` with the W&B values and
the written spec, the chart's Deployment run as a kubelet would run it
(`tests/e2e/test_chart_install.py`), and a run pushed to that queue, with a template variable
value, runs to completion.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.sandbox.wandb import ItemState
from tests.chart.helm import CHART, RELEASE, Helm, HelmError, find, install_helm
from tests.e2e.conftest import Env, run_spec, until
from tests.e2e.test_chart_install import (
    START_TIMEOUT,
    container_of,
    deployment_environment,
    free_port,
    running_container,
)

ROOT = Path(__file__).resolve().parents[2]
WANDB_VALUES = ROOT / "tests" / "fixtures" / "wandb-docs" / "setup-launch-kubernetes-values.yaml"
QUEUE = "cpu-queue"

# The queue's config as W&B keeps it (the W&B UI's Job-spec form, a template variable for the
# CPU limit, as in W&B's "queue config templates" docs).
QUEUE_CONFIG: dict[str, Any] = {
    "resource": "kubernetes",
    "resource_args": {
        "kubernetes": {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "${image_uri}",
                                "resources": {"limits": {"cpu": "{{cpu}}", "memory": "1Gi"}},
                            }
                        ]
                    }
                },
                "backoffLimit": 0,
            }
        }
    },
}
TEMPLATE_VARIABLES = {"cpu": {"type": "string", "enum": ["1", "2", "4"], "default": "1"}}


def wandb_values(env: Env, port: int) -> dict[str, Any]:
    """W&B's tutorial values with its placeholders filled, nothing else changed."""
    values: dict[str, Any] = yaml.safe_load(WANDB_VALUES.read_text())
    values["agent"]["apiKey"] = env.wandb.api_key
    values["baseUrl"] = env.wandb.url
    values["namespace"] = "default"
    values["launchConfig"] = yaml.safe_dump(
        {
            "queues": [QUEUE],
            "entity": "ent",
            "max_jobs": 4,
            "builder": {"type": "noop"},
            "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
        }
    )
    values["healthPort"] = port
    return values


async def launch_agent_cli(env: Env, *argv: str) -> tuple[int, str]:
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "WANDB_BASE_URL": env.wandb.url,
        "WANDB_API_KEY": env.wandb.api_key,
        "WANDB_ENTITY": "ent",
        "NETRC": os.devnull,
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "launch_agent",
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=environ,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode()


async def test_a_wandb_chart_user_migrates_a_queue_and_a_run_succeeds(
    env: Env, tmp_path: Path
) -> None:
    env.state.add_queue(QUEUE, config=QUEUE_CONFIG, template_variables=TEMPLATE_VARIABLES)
    helm = Helm(binary=await asyncio.to_thread(install_helm), home=tmp_path / "helm-home")
    port = free_port()
    values = tmp_path / "wandb-values.yaml"
    values.write_text(yaml.safe_dump(wandb_values(env, port)))

    def template(*extra: str) -> list[dict[str, Any]]:
        args = ["template", RELEASE, str(CHART), "--namespace", "default", "-f", str(values)]
        result = helm.run(*args, *extra)
        if result.returncode != 0:
            raise HelmError(result.stderr.strip())
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    # Before migrating: inline specs that do not serve the W&B queue are refused by the chart.
    # (Without any spec the chart renders and the agent refuses to start; see test_spec_reload.)
    other = ROOT / "queue-specs" / "job.yaml"
    with pytest.raises(HelmError, match=re.escape(f'serves queue(s) "{QUEUE}"')):
        await asyncio.to_thread(template, "--set-file", f"queueSpecs.job\\.yaml={other}")

    # Step 2: migrate, against W&B, into queue-specs/.
    specs = tmp_path / "queue-specs"
    code, out = await launch_agent_cli(
        env, "migrate", "--queue", QUEUE, "--namespace", "default", "--out", str(specs)
    )
    assert code == 0, out
    spec_file = specs / f"{QUEUE}.yaml"
    assert spec_file.is_file(), out
    assert "spec.template.spec.containers[main].resources.limits.cpu" in spec_file.read_text()
    code, out = await launch_agent_cli(env, "validate", str(specs))
    assert code == 0, out

    # Step 3: helm template with W&B's values and the spec.
    manifests = await asyncio.to_thread(
        template, "--set-file", f"queueSpecs.{QUEUE}\\.yaml={spec_file}"
    )
    _pod, container = container_of(manifests)
    assert not container["image"].startswith("wandb/launch-agent"), "W&B's image is replaced"

    # Step 4: the Deployment, run as the kubelet would. W&B's values target `wandb` too.
    for namespace in yaml.safe_load(WANDB_VALUES.read_text())["additionalTargetNamespaces"]:
        if env.kube.objects.find("namespaces", namespace) is None:
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            env.kube.objects.create("namespaces", ns, "")
    for secret in find(manifests, "Secret"):
        env.kube.objects.create("secrets", secret, namespace=secret["metadata"]["namespace"])
    environ = deployment_environment(env, manifests, tmp_path / "container")

    # Step 5: a run of the queue, with a template variable value as W&B's UI sends it.
    env.cluster.script("launch-agent.io/run-id=mig1", "succeed after=5s")
    queue = env.state.queue("ent", "model-registry", QUEUE)
    item = env.state.push(queue, run_spec("mig1"), template_values={"cpu": "2"})
    async with running_container(container, environ, "migrated-agent") as (_process, lines):
        await until(
            lambda: item.state in (ItemState.CLAIMED, ItemState.FAILED),
            within=START_TIMEOUT,
            message="item taken",
        )
        assert item.state is ItemState.CLAIMED, (item.failure, lines[-5:])
        (job,) = env.jobs()
        limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["cpu"] == "2", "the template variable's value reached the workload"
        env.advance(10)

        def complete() -> bool:
            (current,) = env.jobs()
            conditions = (current.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

        await until(complete, within=START_TIMEOUT, advance=lambda: env.advance(1), message="done")
        assert item.failure is None
