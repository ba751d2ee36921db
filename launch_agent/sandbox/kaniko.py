"""What Kaniko's executor does that a client of the cluster can see: its push and its digest.

A Job whose container carries Kaniko's flags is played by the simulated cluster with whatever
outcome it is scripted to have (`cluster/outcomes.py`). This adds the two effects of the real
executor:

- **the push**: when the Job completes, a manifest is stored under the `--destination`'s
  `REPOSITORY:TAG` in the sandbox registry;
- **the digest file**: with `--digest-file=/dev/termination-log` (the container's
  `terminationMessagePath`), the container's terminated state carries that manifest's digest
  as its `message`, which is how kubelet reports the file Kaniko wrote (Kaniko's README
  documents the flag for exactly this).

Each Job pushes a manifest of its own (its uid is in it): a second build of one tag gives a
second digest, as two real builds do. `jobs` keeps every Kaniko Job ever created, so tests can
count builds after the Jobs are gone, and `pushed` every (repository, tag, digest).

    kaniko = SimulatedKaniko(kube_store, cluster, registry)   # attaches itself
    ...
    kaniko.close()
"""

from __future__ import annotations

from typing import Any

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube.store import Obj, Store
from launch_agent.sandbox.registry import RegistryServer

DIGEST_FILE = "/dev/termination-log"


def _kaniko_args(job: Obj) -> list[str] | None:
    spec = (job.get("spec") or {}).get("template", {}).get("spec") or {}
    for container in spec.get("containers") or []:
        args = [str(a) for a in container.get("args") or []]
        if any(a.startswith("--destination=") for a in args):
            return args
    return None


def _flag(args: list[str], name: str) -> str | None:
    prefix = f"--{name}="
    return next((a[len(prefix) :] for a in args if a.startswith(prefix)), None)


def destination(job: Obj) -> tuple[str, str] | None:
    """(repository, tag) of a Kaniko Job's `--destination=HOST/REPOSITORY:TAG`."""
    args = _kaniko_args(job)
    dest = _flag(args, "destination") if args is not None else None
    if dest is None or "/" not in dest:
        return None
    repository, _, tag = dest.split("/", 1)[1].rpartition(":")
    return (repository, tag) if repository and tag else None


def _completed(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


class SimulatedKaniko:
    def __init__(self, store: Store, cluster: SimulatedCluster, registry: RegistryServer) -> None:
        self.store = store
        self.cluster = cluster
        self.registry = registry
        self.jobs: list[dict[str, Any]] = []
        self.pushed: list[tuple[str, str, str]] = []
        self._pushed_uids: set[str] = set()
        store.listeners.append(self._on_write)
        cluster.termination_hooks.append(self._termination)

    def close(self) -> None:
        if self._on_write in self.store.listeners:
            self.store.listeners.remove(self._on_write)
        if self._termination in self.cluster.termination_hooks:
            self.cluster.termination_hooks.remove(self._termination)

    def _on_write(self, storage: str, kind: str, obj: Obj) -> None:
        if storage != "batch/jobs" or (where := destination(obj)) is None:
            return
        if kind == "ADDED":
            self.jobs.append(obj)
        uid = str(obj["metadata"].get("uid", ""))
        if kind != "DELETED" and _completed(obj) and uid not in self._pushed_uids:
            self._pushed_uids.add(uid)
            digest = self.registry.put_image(*where, build=uid)
            self.pushed.append((*where, digest))

    def _termination(self, chain: list[Obj]) -> str | None:
        """The digest the pod's Job will push, if it asks for Kaniko's digest file."""
        if len(chain) < 2 or chain[1].get("kind") != "Job":
            return None
        job = chain[1]
        args = _kaniko_args(job)
        where = destination(job)
        if args is None or where is None or _flag(args, "digest-file") != DIGEST_FILE:
            return None
        return self.registry.digest_of(where[1], build=str(job["metadata"].get("uid", "")))
