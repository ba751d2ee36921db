"""The resource quota controller: each ResourceQuota's `status.hard` and `status.used`.

kube-controller-manager's `pkg/controller/resourcequota/resource_quota_controller.go`
(`syncResourceQuota`): `hard` is the spec's, `used` the namespace's usage of exactly those
resources (`quota.Mask`), measured by the pod evaluator the admission plugin also uses
(`sandbox/kube/admission.py`, `pod_usage`: terminal pods use nothing).

kube-apiserver's admission plugin enforces `status.hard` (`resourcequota/controller.go`,
CheckRequest), so on a real cluster a new quota limits nothing until this controller has
written it. The sandbox's plugin measures the live pods against `spec.hard` itself and
enforces a new quota at once (docs/sandbox.md lists the difference); this status is what a
client reads (`kubectl describe quota`), and what a test waits for on either tier.
"""

from __future__ import annotations

from decimal import Decimal

from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.kube.admission import counted, pod_usage, pretty
from launch_agent.sandbox.kube.store import Obj


def reconcile_quota(ctx: Ctx, quota: Obj) -> None:
    hard = dict(((quota.get("spec") or {}).get("hard")) or {})
    namespace = quota["metadata"]["namespace"]
    used = dict.fromkeys(hard, Decimal(0))
    for pod in ctx.store.list(ctx.store.rt("pods"), namespace):
        if counted(pod):
            for key, value in pod_usage(pod).items():
                if key in used:
                    used[key] += value
    status = {
        **(quota.get("status") or {}),
        "hard": hard,
        "used": {key: pretty(key, value) for key, value in used.items()},
    }
    ctx.set_status(quota, status)
