"""Read access to MultiKueue worker clusters (`multikueue.workers`, docs/multicluster.md).

A queue spec with `spec.kueue.multiKueue` has its runs created on the agent's own cluster, the
MultiKueue manager, whose Kueue copies each admitted run to a worker cluster and mirrors the
run's status back. The state of a run is read on the manager like any other; what only the
worker has (the pods, so the reason a run failed, its log tail and its Events) is read there,
through one client per configured worker. The agent never writes to a worker.

`Workers.open` loads every worker's kubeconfig (off the loop) and opens its client; a worker
whose kubeconfig cannot be loaded is kept as unreadable, with the reason, rather than stopping
the agent: dispatch goes through the manager and does not need it. `unreadable(name)` is the
sentence a failure report carries when the agent cannot read the worker that ran the run.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from launch_agent.adapters.kube import (
    KubeClient,
    KubeError,
    KubeNotFound,
    Resource,
    load_configuration,
)
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.config import WorkerAccess

log = logging.getLogger(__name__)

# What the agent needs on a worker, for the messages that say it lacks it.
NEEDED = "get, list and watch on pods, pods/log and events"
SECRET = Resource("", "v1", "Secret", "secrets")


def unreadable_message(worker: str, namespace: str, why: str) -> str:
    """The sentence a report carries when the agent cannot read the worker a run ran on."""
    return (
        f"the agent cannot read worker cluster {worker}, where the run ran ({why}), so the"
        " pods' own reasons, the log tail and the Events are not here: give the agent a"
        f" kubeconfig for {worker} under multikueue.workers with {NEEDED} in namespace"
        f" {namespace} (docs/multicluster.md)"
    )


class Workers:
    """One read-only client per configured worker; the reason for each one that has none."""

    def __init__(
        self,
        access: Sequence[WorkerAccess],
        *,
        policy: RetryPolicy | None = None,
        observer: Callable[[str, int | None, float], None] | None = None,
        limits: Mapping[str, Any] | None = None,
    ) -> None:
        """`limits`: the `KubeClient` options of each client's own rate limit (`qps`,
        `burst`, `stop`, `throttled`): a bucket per worker, as the API servers are apart."""
        self.access = list(access)
        self.policy = policy
        self.observer = observer
        self.limits = dict(limits or {})
        self.clients: dict[str, KubeClient] = {}
        self.broken: dict[str, str] = {}  # worker -> why its client could not be made

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.access]

    async def open(self, stack: AsyncExitStack) -> None:
        for worker in self.access:
            try:
                client = await self._client(worker)
            except Exception as exc:
                # The kubeconfig is missing or cannot be loaded: reported on the runs that need
                # it; dispatch goes through the manager and does not.
                why = f"its kubeconfig {worker.kubeconfig} cannot be loaded: {exc}"
                self.broken[worker.name] = why
                log.warning("MultiKueue worker %s: %s", worker.name, why)
                continue
            self.clients[worker.name] = await stack.enter_async_context(client)
            log.info("MultiKueue worker %s: reading pods, logs and Events there", worker.name)

    async def _client(self, worker: WorkerAccess) -> KubeClient:
        if not await asyncio.to_thread(os.path.isfile, worker.kubeconfig):
            raise FileNotFoundError("no such file")
        configuration = await load_configuration(worker.kubeconfig, worker.context, False)
        options: dict[str, Any] = {
            "policy": self.policy,
            "observer": self.observer,
            **self.limits,
        }
        options.update(KubeClient.renewal(worker.kubeconfig, worker.context, False))
        return KubeClient(configuration, **options)

    async def check_api_key_secrets(
        self, namespaces: Sequence[str], *, name: str, key: str
    ) -> list[str]:
        """Runs placed on a worker read `WANDB_API_KEY` from the same Secret there as here, and
        the agent never writes to a worker: an admin creates it (docs/multicluster.md). Each
        one missing (or unreadable) is warned about at start; the warnings, for the tests."""
        checks = [
            self._check_secret(worker, client, namespace, name, key)
            for worker, client in self.clients.items()
            for namespace in namespaces
        ]
        found = await asyncio.gather(*checks)
        return [w for w in found if w]

    async def _check_secret(
        self, worker: str, client: KubeClient, namespace: str, name: str, key: str
    ) -> str | None:
        where = f"{namespace}/{name} on worker cluster {worker}"
        try:
            secret = await client.get(SECRET, namespace, name)
        except KubeNotFound:
            problem = (
                f"the API-key Secret {where} does not exist: runs MultiKueue places there cannot"
                f" start (CreateContainerConfigError) until an admin creates it (key {key!r})"
            )
        except KubeError as exc:
            problem = f"cannot check the API-key Secret {where}: {exc}"
        else:
            if key in (secret.get("data") or {}):
                return None
            problem = f"the API-key Secret {where} has no key {key!r}"
        log.warning("%s", problem)
        return problem

    def client(self, name: str) -> KubeClient | None:
        return self.clients.get(name)

    def why_not(self, name: str) -> str | None:
        """Why the agent has no client for worker `name` (None: it has one)."""
        if name in self.clients:
            return None
        if name in self.broken:
            return self.broken[name]
        return "it is not listed under multikueue.workers"
