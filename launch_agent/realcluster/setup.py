"""What `launch-agent cluster up` starts, for every command that starts a real cluster (`cluster
up`, `demo --cluster real`): which workload controllers, and one `RealCluster` or a
`MultiCluster` of a manager and N workers.

```python
world = build(directory, bins=bins, addons=built_addons(bins), workers=2)
async with world:
    main_cluster(world).kubeconfig   # where an agent runs: the cluster, or the manager
```
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from launch_agent.realcluster.addons import ADDONS
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.cluster import DEFAULT_NODES, RealCluster
from launch_agent.realcluster.multicluster import MultiCluster
from launch_agent.realcluster.processes import StartError
from launch_agent.sandbox.cluster.nodes import Node

# The order controllers start in: Kueue last, so that its job frameworks find their CRDs.
ADDON_ORDER = ("jobset", "lws", "kuberay", "training-operator", "trainer", "kueue")
MAX_WORKERS = 20  # MultiKueueConfig lists at most 20 clusters (kueue#8561)


def built_addons(bins: Binaries) -> list[str]:
    """Every controller whose binary `make cluster-bins` built, in start order."""
    return [name for name in ADDON_ORDER if name in ADDONS and bins.has(ADDONS[name]().binary)]


def sim_nodes(count: int) -> list[Node]:
    """`count` simulated nodes shaped like `DEFAULT_NODES`' (64 CPU, 256Gi, 8 GPUs)."""
    template = DEFAULT_NODES[0]
    return [
        Node(f"sim-node-{i + 1}", dict(template.allocatable), dict(template.labels))
        for i in range(count)
    ]


def build(
    directory: Path,
    *,
    bins: Binaries,
    addons: Sequence[str],
    workers: int = 0,
    nodes: int = len(DEFAULT_NODES),
    default_outcome: str = "succeed after=5s",
    worker_lost_timeout: str = "15m",
) -> RealCluster | MultiCluster:
    """One cluster with `nodes` nodes, or (`workers` > 0) a MultiKueue manager and `workers`
    workers of `nodes` nodes each; not started yet (`async with` starts it)."""
    if workers:
        if "kueue" not in addons:
            raise StartError("--workers needs Kueue (MultiKueue runs in it): it is not built")
        return MultiCluster(
            directory,
            workers=workers,
            addons=addons,
            bins=bins,
            default_outcome=default_outcome,
            worker_lost_timeout=worker_lost_timeout,
            nodes_per_worker=nodes,
        )
    return RealCluster(
        directory, nodes=sim_nodes(nodes), addons=addons, bins=bins, default_outcome=default_outcome
    )


def clusters_of(world: RealCluster | MultiCluster) -> list[RealCluster]:
    return world.clusters if isinstance(world, MultiCluster) else [world]


def main_cluster(world: RealCluster | MultiCluster) -> RealCluster:
    """The cluster an agent runs against: the only one, or MultiKueue's manager."""
    return world.manager if isinstance(world, MultiCluster) else world
