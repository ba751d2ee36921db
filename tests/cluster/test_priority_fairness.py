"""API priority and fairness throttling the agent, on the real kube-apiserver: 429s with
`Retry-After` slow dispatch, and every run is still created once and claimed once.

The agent runs as a ServiceAccount (a TokenRequest token, bound to cluster-admin: RBAC is not
what is tested here), because the admin's certificate is in `system:masters`, which the
`exempt` FlowSchema serves without limit. A FlowSchema of higher precedence sends the
ServiceAccount's every request to a PriorityLevelConfiguration of the smallest share with
`limitResponse: Reject`: past its few seats, kube-apiserver answers 429 at once, with the PF
headers naming the level (`staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go`).
The sandbox has no priority and fairness of its own beyond a rate (`kube.throttle`), so this
runs only on the real tier.
"""

from __future__ import annotations

import pytest

from launch_agent.sandbox.wandb import ItemState
from tests.cluster import identity
from tests.cluster.world import World, run_spec, until

pytestmark = pytest.mark.real_only

RUNS = 24
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: basic
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
"""


def throttling(name: str, namespace: str, account: str) -> list[tuple[str, dict[str, object]]]:
    """The RBAC and flow-control objects that throttle `namespace/account` (cluster-scoped)."""
    everything = {
        "subjects": [
            {"kind": "ServiceAccount", "serviceAccount": {"name": account, "namespace": namespace}}
        ],
        "resourceRules": [
            {
                "verbs": ["*"],
                "apiGroups": ["*"],
                "resources": ["*"],
                "namespaces": ["*"],
                "clusterScope": True,
            }
        ],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    }
    return [
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            },
        ),
        (
            f"{FLOWCONTROL}/prioritylevelconfigurations",
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "PriorityLevelConfiguration",
                "metadata": {"name": name},
                "spec": {
                    "type": "Limited",
                    "limited": {
                        "nominalConcurrencyShares": 1,
                        "lendablePercent": 0,
                        "limitResponse": {"type": "Reject"},
                    },
                },
            },
        ),
        (
            f"{FLOWCONTROL}/flowschemas",
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "FlowSchema",
                "metadata": {"name": name},
                "spec": {
                    "priorityLevelConfiguration": {"name": name},
                    "matchingPrecedence": 100,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [everything],
                },
            },
        ),
    ]


async def test_priority_and_fairness_429s_slow_the_agent_and_lose_nothing(world: World) -> None:
    account = "throttled-agent"
    name = f"la-throttle-{world.namespace}"[:63]
    await identity.service_account(world.http, world.namespace, account)
    world.write_spec("basic.yaml", SPEC)
    items = [world.push(run_spec(f"apf-{i}")) for i in range(RUNS)]
    async with identity.cluster_objects(world.http, *throttling(name, world.namespace, account)):
        kubeconfig = await identity.token_kubeconfig(
            world.http,
            world.http.credentials,
            world.namespace,
            account,
            world.specs_dir.parent / "throttled.kubeconfig",
        )
        # Dispatch as wide as it goes, so that the level's few seats overflow.
        agent = world.agent(world.config(max_jobs=-1), kubeconfig=kubeconfig)
        async with world.running(agent):
            await until(
                lambda: all(i.state is ItemState.CLAIMED for i in items),
                within=200,
                message=f"all {RUNS} runs claimed",
            )
            assert agent.kube is not None
            throttles = agent.kube.throttles
    assert throttles > 0, "priority and fairness never answered 429: the test proves nothing"
    jobs = await world.objects("batch/v1", "jobs")
    run_ids = sorted(j["metadata"]["labels"]["launch-agent.io/run-id"] for j in jobs)
    assert run_ids == sorted(f"apf-{i}" for i in range(RUNS)), "a run lost or created twice"
    assert all(i.failure is None for i in items), [i.failure for i in items if i.failure]
