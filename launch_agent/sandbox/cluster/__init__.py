"""A deterministic, clock-driven simulated cluster for the sandbox API server.

Interface (stable)::

    from launch_agent.sandbox.cluster import ManualClock, Node, SimulatedCluster

    async with KubeApiServer() as kube, SimulatedCluster(kube) as cluster:
        cluster.script("launch-agent.io/run-id=abc", "oomkilled after=10s")
        ...                      # the agent creates a Job over HTTP; pods appear at once
        cluster.advance(11)      # ManualClock (default): time moves only here
        cluster.problems         # malformed outcome annotations, as messages

    SimulatedCluster(kube, clock=RealClock())            # demo and benchmarks: wall-clock time
    SimulatedCluster(kube, nodes=[Node("gpu-1", {"cpu": "8", "memory": "64Gi",
                                                 "nvidia.com/gpu": "1", "pods": "110"})])

The outcome grammar is documented in `launch_agent.sandbox.cluster.outcomes` and
`docs/sandbox.md`.
"""

from launch_agent.sandbox.cluster.clock import Clock, ManualClock, RealClock
from launch_agent.sandbox.cluster.nodes import Node
from launch_agent.sandbox.cluster.outcomes import ANNOTATION, Outcome, OutcomeError, parse_outcome
from launch_agent.sandbox.cluster.simulated import SimulatedCluster

__all__ = [
    "ANNOTATION",
    "Clock",
    "ManualClock",
    "Node",
    "Outcome",
    "OutcomeError",
    "RealClock",
    "SimulatedCluster",
    "parse_outcome",
]
