"""The chart on the real API server (real tier only: the sandbox has no RBAC): `helm install`
of charts/launch-agent with RBAC authorization on, every object accepted; then the agent,
authenticated as the chart's own ServiceAccount (a TokenRequest token, what its pod would
mount), dispatches a batch Job and a JobSet to success, so the chart's Role is enough for
what the agent does; and the same identity is refused what the chart does not grant.

No agent pod runs: the tier has no Deployment controller and no container runtime. The agent
runs in the test's process with the credentials the pod would have.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from launch_agent.sandbox.wandb import ItemState
from tests.chart.helm import CHART, install_helm
from tests.cluster import identity
from tests.cluster.world import World, run_spec, until

pytestmark = pytest.mark.real_only

RELEASE = "rel"

SPECS = {
    "job.yaml": """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: job
spec:
  queues: [q1]
  namespace: NAMESPACE
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      backoffLimit: 0
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              resources:
                requests: {cpu: 100m, memory: 64Mi}
""",
    "jobset.yaml": """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: jobset
spec:
  queues: [q2]
  namespace: NAMESPACE
  template:
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    spec:
      replicatedJobs:
        - name: workers
          replicas: 1
          template:
            spec:
              backoffLimit: 0
              template:
                spec:
                  containers:
                    - name: main
                      image: ${image_uri}
                      resources:
                        requests: {cpu: 100m, memory: 64Mi}
""",
}


def helm_install(kubeconfig: Path, namespace: str, api_key: str, home: Path) -> str:
    """`helm install`, with the kinds this test dispatches enabled; helm's output."""
    values = {
        "agent": {"apiKey": api_key},
        "workloads": {"job": True, "jobset": True},
        "launchConfig": {"queues": ["q1", "q2"]},
    }
    values_file = home / "values.json"
    values_file.write_text(json.dumps(values))
    done = subprocess.run(
        [
            str(install_helm()),
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            namespace,
            "--kubeconfig",
            str(kubeconfig),
            "--values",
            str(values_file),
        ],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "HELM_NO_PLUGINS": "1"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"helm install refused:\n{done.stderr}"
    return done.stdout


async def refused(http: KubeHTTP, method: str, path: str, body: object = None) -> int:
    try:
        await http.request(method, path, body=body)
    except ApiError as exc:
        return exc.status
    return 200


async def test_the_chart_installs_and_its_service_account_is_enough_and_no_more(
    world: World, tmp_path: Path
) -> None:
    home = tmp_path / "helm-home"
    home.mkdir()
    said = await asyncio.to_thread(
        helm_install, world.kubeconfig, world.namespace, world.wandb.api_key, home
    )
    assert "STATUS: deployed" in said, said
    accounts = await world.objects("v1", "serviceaccounts")
    [account] = [a["metadata"]["name"] for a in accounts if RELEASE in a["metadata"]["name"]]
    secrets = await world.objects("v1", "secrets")
    [key_secret] = [
        s["metadata"]["name"] for s in secrets if s["metadata"]["name"].startswith("wandb-api-key")
    ]

    kubeconfig = await identity.token_kubeconfig(
        world.http, world.http.credentials, world.namespace, account, tmp_path / "sa.kubeconfig"
    )
    for name, text in SPECS.items():
        world.write_spec(name, text)
    world.state.add_queue("q2")
    items = [world.push(run_spec("chart-job")), world.push(run_spec("chart-js"), queue="q2")]
    config = world.config(queues=["q1", "q2"], api_key_secret=key_secret)
    async with world.running(world.agent(config, kubeconfig=kubeconfig)) as agent:
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), within=90, message="claimed"
        )
        await until(
            lambda: all(agent.runs.get(i.id) is None for i in items),
            within=120,
            message="both runs ended",
        )
    assert [i.failure for i in items] == [None, None]

    # What the chart does not grant, asked as its ServiceAccount.
    other = f"{world.namespace}-other"[:63]
    await world.http.ensure(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    await world.create(
        "v1",
        "secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "not-the-agents"}},
    )
    token = await identity.token_of(world.http, world.namespace, account)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "outside"},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "direct"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    try:
        async with KubeHTTP(identity.token_credentials(world.http.credentials, token)) as sa:
            ns = world.namespace
            assert await refused(sa, "GET", path_of("v1", "secrets", ns, key_secret)) == 200
            assert await refused(sa, "GET", path_of("v1", "secrets", ns, "not-the-agents")) == 403
            assert await refused(sa, "GET", path_of("v1", "secrets", ns)) == 403
            assert await refused(sa, "POST", path_of("batch/v1", "jobs", other), job) == 403
            assert await refused(sa, "GET", path_of("batch/v1", "jobs", other)) == 403
            assert await refused(sa, "POST", path_of("v1", "pods", ns), pod) == 403
            assert await refused(sa, "PATCH", path_of("batch/v1", "jobs", ns, "x"), {}) == 403
            assert await refused(sa, "GET", "/api/v1/nodes") == 403
    finally:
        await world.http.delete(f"/api/v1/namespaces/{other}")
