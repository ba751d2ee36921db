"""API priority and fairness throttling the agent, on the real tier only: a FlowSchema matching
the agent's ServiceAccount puts every request it makes into a PriorityLevelConfiguration with
the smallest share there is (one nominal share of the server's 600 seats, nothing lent or
borrowed, excess rejected), so kube-apiserver answers its bursts 429 with `Retry-After`
(`staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go`). A burst of runs is
dispatched meanwhile; every one is created once and reported once.

Real-tier only (`real_only`: deselected on the sandbox, which has no priority and fairness and
no authentication to tell the agent's requests apart; its 429s are fault rules,
`tests/e2e/test_resilience.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from launch_agent.adapters.retry import RetryPolicy
from launch_agent.realcluster.kubehttp import KubeHTTP, path_of
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.conftest import RealBackend
from tests.cluster.identity import (
    cluster_objects,
    service_account,
    token_credentials,
    token_kubeconfig,
    token_of,
    user_of,
)
from tests.cluster.test_jobs import JOB_SPEC
from tests.cluster.world import World, reported_once, run_spec, until

pytestmark = pytest.mark.real_only

RUNS = 30
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
SA = "throttled-agent"


def api_errors(registry: CollectorRegistry, api: str, status: str) -> dict[str, int]:
    """The agent's own count of answers with `status` per operation
    (launch_agent_api_errors_total)."""
    out: dict[str, int] = {}
    for metric in registry.collect():
        if metric.name != "launch_agent_api_errors":
            continue
        for sample in metric.samples:
            labels = sample.labels
            if sample.name.endswith("_total") and (labels["api"], labels["status"]) == (
                api,
                status,
            ):
                operation = labels["operation"]
                out[operation] = out.get(operation, 0) + int(sample.value)
    return out


async def rejected_by_server(http: KubeHTTP, level: str) -> int:
    """kube-apiserver's own count of requests APF rejected at `level`."""
    text = await http.request("GET", "/metrics", accept="text/plain")
    pattern = re.compile(
        r'^apiserver_flowcontrol_rejected_requests_total\{[^}]*priority_level="'
        + re.escape(level)
        + r'"[^}]*\} (\S+)$',
        re.M,
    )
    return int(sum(float(v) for v in pattern.findall(str(text))))


def throttle(namespace: str, level: str) -> list[tuple[str, dict[str, object]]]:
    priority: dict[str, object] = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": level},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema: dict[str, object] = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": level},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            # Before every suggested schema (service-accounts: 9000, workload-leader-election:
            # 200); after the mandatory exempt and probes (1, 2).
            "matchingPrecedence": 50,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": SA, "namespace": namespace},
                        }
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    return [
        (f"{FLOWCONTROL}/prioritylevelconfigurations", priority),
        (f"{FLOWCONTROL}/flowschemas", schema),
    ]


async def classified(probe: KubeHTTP, schema_uid: str) -> bool:
    """True once the API server puts the ServiceAccount's requests into our FlowSchema (it
    names the schema of every answer in `X-Kubernetes-PF-FlowSchema-UID`)."""
    async with probe.session.get("/api") as resp:
        return resp.headers.get("X-Kubernetes-PF-FlowSchema-UID") == schema_uid


async def test_runs_dispatched_while_the_api_server_throttles_the_agent_are_created_once(
    world: World, real_backend: RealBackend, tmp_path: Path
) -> None:
    ns = world.namespace
    level = f"{ns}-tiny"
    admin = real_backend.credentials()
    await service_account(world.http, ns, SA)
    await world.http.create(
        path_of("rbac.authorization.k8s.io/v1", "rolebindings", ns),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": SA},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}],
        },
    )
    kubeconfig = await token_kubeconfig(
        world.http, admin, ns, SA, tmp_path / "throttled.kubeconfig"
    )
    probe_token = await token_of(world.http, ns, SA)
    world.write_spec("basic.yaml", JOB_SPEC)
    async with (
        KubeHTTP(token_credentials(admin, probe_token)) as probe,
        cluster_objects(world.http, *throttle(ns, level)),
    ):
        schema = await world.http.get(f"{FLOWCONTROL}/flowschemas/{level}")
        uid = schema["metadata"]["uid"]
        await until(
            lambda: classified(probe, uid),
            within=60,
            message=f"{user_of(ns, SA)} classified into {level}",
        )
        before = await rejected_by_server(world.http, level)
        # The agent's Kubernetes retries as in production (6 attempts, 0.2 s doubling to 10 s,
        # at least Retry-After), within a deadline a throttled server can keep.
        agent = world.agent(
            kubeconfig=kubeconfig,
            kube_retry=RetryPolicy(),
        )
        items = [world.push(run_spec(f"apf-{n}")) for n in range(RUNS)]
        for n in range(RUNS):
            await world.script(f"launch-agent.io/run-id=apf-{n}", "succeed after=2s")
        async with world.running(agent):
            await until(
                lambda: all(i.state is ItemState.CLAIMED for i in items),
                within=300,
                message="every run claimed",
            )
            await until(lambda: not list(agent.runs), within=300, message="every run released")
            seen = api_errors(agent.metrics.registry, "kubernetes", "429")
            retries = agent.kube.retries if agent.kube is not None else 0
        rejected = await rejected_by_server(world.http, level) - before
    print(
        f"APF: the server rejected {rejected} requests at {level}; the agent saw {sum(seen.values())} 429s"
        f" ({seen}) and made {retries} retries; pops {sum(i.pops for i in items)} for {RUNS} items"
    )
    assert rejected > 0, "the API server never throttled the agent: the test proves nothing"
    assert sum(seen.values()) > 0
    for item in items:
        assert reported_once(item, ItemState.CLAIMED), item.history
        assert item.failure is None
    jobs = await world.objects("batch/v1", "jobs")
    names = sorted(j["metadata"]["labels"]["launch-agent.io/run-id"] for j in jobs)
    assert names == sorted(f"apf-{n}" for n in range(RUNS)), "a run lost or created twice"
