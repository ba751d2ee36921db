"""The elastic quota tree and its admission engine. Pure and deterministic.

- `tree`: the TREE.yaml / `quota.tree` format, its validation (R1) and the immutable model.
  `validate_tree(mapping)` returns every problem with its path; `parse_tree` raises `TreeError`.
- `ledger`: per-node usage and the predicates fit (R3), guarantee (R4), borrowed share (R5).
- `preemption`: victim selection for reclaim (R7) and within-queue preemption (R8).
- `candidates`: each leaf's candidate and each node's winner, kept current incrementally.
- `engine`: `AdmissionEngine`, the admission cycle (R6) with eviction and reservation (R10),
  readiness timeouts and backoff (R11) and the Strict guard (R9).
- `simulate`: the `quota simulate` event format and report.

docs/quota.md describes the rules as implemented and the choices made where the reference
(`quota-admission.md`) leaves them open.

The engine modules can be compiled with mypyc (`scripts/build_compiled.py`, used by the
container image and `make bench`); `engine_build()` tells which build is loaded.
"""

from launch_agent.quota import engine as _engine
from launch_agent.quota.engine import AdmissionEngine, EngineError
from launch_agent.quota.runs import Decision, PodSet, Run, RunSpec, RunState
from launch_agent.quota.tree import (
    COUNT_RESOURCES,
    QuotaNode,
    QuotaTree,
    TreeError,
    TreeProblem,
    parse_tree,
    validate_tree,
)


def engine_build() -> str:
    """'compiled' when the engine modules are mypyc extensions, else 'interpreted'."""
    return "interpreted" if _engine.__file__.endswith(".py") else "compiled"


__all__ = [
    "COUNT_RESOURCES",
    "AdmissionEngine",
    "Decision",
    "EngineError",
    "PodSet",
    "QuotaNode",
    "QuotaTree",
    "Run",
    "RunSpec",
    "RunState",
    "TreeError",
    "TreeProblem",
    "engine_build",
    "parse_tree",
    "validate_tree",
]
