"""Start-up: check the key and the queues, register with W&B, ensure the API-key Secrets.

Failures that retrying cannot fix stop the agent at once with a message that says what to do:
a key W&B refuses (the message names the W&B URL), an entity without the launch project, queues
that do not exist (all of them listed by name). An unreachable W&B or Kubernetes API is retried
with backoff until it answers or the agent is asked to stop: an outage never ends the process.

The agent registers (`createLaunchAgent`) under W&B's rules (W&B names the agent record); its
stable identity on the cluster is `agent_name`, which labels everything it creates, so a
restarted agent is the same agent to Kubernetes and adopts its runs.

Pods get the W&B API key from one Secret per target namespace (`api_key_secret`, key
`api_key_secret_key`), never one per run. If the Helm chart (or an admin) created it, it is used
as is (the agent only reads it); otherwise the agent creates it.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from launch_agent.adapters.kube import (
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeUnavailable,
    Resource,
)
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.adapters.wandb_errors import WandbNotFound, WandbUnavailable
from launch_agent.aio import wait_event
from launch_agent.model import labels as L
from launch_agent.model.config import LAUNCH_PROJECT, AgentConfig

log = logging.getLogger(__name__)

T = TypeVar("T")
SECRET = Resource("", "v1", "Secret", "secrets")


class StartupError(Exception):
    """The agent cannot start; the message says why and what to do."""


def unserved_message(queues: Sequence[str], specs_dir: str) -> str:
    """Why the agent refuses to start when a configured queue has no queue spec."""
    names = ", ".join(repr(q) for q in queues)
    return (
        f"no queue spec in {specs_dir} serves queue(s) {names}: every item of such a queue would"
        " fail. Write one spec per queue; `launch-agent migrate` writes them from the queues'"
        " configs in W&B (docs/migrating.md)"
    )


class Stopped(Exception):
    """The agent was asked to stop while it was still starting."""


@dataclass(frozen=True)
class Registration:
    entity: str
    agent_id: str
    queues: tuple[str, ...]


async def until_available(
    what: str,
    call: Callable[[], Awaitable[T]],
    stopping: asyncio.Event,
    *,
    base: float = 0.5,
    cap: float = 30.0,
) -> T:
    """`call()` until it does not raise an outage error; `Stopped` if asked to stop."""
    delay = base
    while True:
        try:
            return await call()
        except (WandbUnavailable, KubeUnavailable) as exc:
            log.warning("%s: %s; retrying in %.1fs", what, exc, delay)
        if await wait_event(stopping, delay):
            raise Stopped(what)
        delay = min(cap, delay * 2)


@dataclass(frozen=True)
class Queues:
    """The entity and the run queues the agent serves, as W&B knows them (read-only checks)."""

    entity: str
    ids: tuple[str, ...]
    names: tuple[str, ...]


async def resolve_queues(
    config: AgentConfig, wandb: WandbClient, stopping: asyncio.Event
) -> Queues:
    """The API key, the entity and every configured queue checked, nothing written: a standby
    replica (runtime/leader.py) does this much, and registers only once it leads."""
    viewer = await until_available("checking the API key with W&B", wandb.viewer, stopping)
    entity = config.entity or viewer.entity or viewer.username
    if not entity:
        raise StartupError(
            f"no entity: set `entity` (or WANDB_ENTITY); W&B at {config.base_url} reports no"
            " default entity for this API key"
        )
    wanted = config.all_queues
    if not wanted:
        raise StartupError("no queue to serve: set `queues` in launch-config.yaml or pass --queue")
    try:
        found = await until_available(
            "listing run queues", lambda: wandb.project_run_queues(entity), stopping
        )
    except WandbNotFound as exc:
        raise StartupError(str(exc)) from None
    by_name = {q.name: q for q in found}
    missing = [q for q in wanted if q not in by_name]
    if missing:
        existing = ", ".join(sorted(by_name)) or "none"
        raise StartupError(
            f"run queue(s) not found in {entity}/{LAUNCH_PROJECT} at {config.base_url}:"
            f" {', '.join(missing)} (existing queues: {existing}); create them in the W&B UI"
            " (Launch → Create queue) or fix `queues`"
        )
    return Queues(entity, tuple(by_name[q].id for q in wanted), tuple(wanted))


async def register(
    config: AgentConfig,
    wandb: WandbClient,
    stopping: asyncio.Event,
    *,
    hostname: str,
    version: str,
    queues: Queues | None = None,
) -> Registration:
    """`createLaunchAgent` for the queues (`resolve_queues` first unless given)."""
    if queues is None:
        queues = await resolve_queues(config, wandb, stopping)
    entity = queues.entity
    agent_config: dict[str, Any] = config.model_dump(mode="json", exclude={"api_key"})
    agent_id = await until_available(
        "registering the launch agent",
        lambda: wandb.create_launch_agent(
            entity, list(queues.ids), hostname, agent_config, version
        ),
        stopping,
    )
    log.info(
        "registered with W&B at %s as launch agent %s (entity %s, queues %s, agent name %s)",
        config.base_url,
        agent_id,
        entity,
        ", ".join(queues.names),
        config.agent_name,
    )
    return Registration(entity, agent_id, queues.names)


async def ensure_api_key_secrets(
    kube: KubeClient,
    namespaces: Sequence[str],
    *,
    name: str,
    key: str,
    api_key: str,
    agent_name: str,
    stopping: asyncio.Event,
) -> None:
    """One Secret holding the API key per namespace; an existing one is left as it is.

    Read first (the Helm chart creates the Secret and grants only `get` on that one name),
    created only when it is missing.
    """
    encoded = base64.b64encode(api_key.encode()).decode("ascii")
    for namespace in namespaces:
        where = f"{namespace}/{name}"
        try:
            existing = await until_available(
                f"reading Secret {where}",
                functools.partial(kube.get, SECRET, namespace, name),
                stopping,
            )
        except KubeNotFound:
            existing = None
        except KubeForbidden as exc:
            log.warning("cannot read Secret %s (%s); assuming it exists", where, exc.message)
            continue
        if existing is not None:
            if key not in (existing.get("data") or {}):
                log.warning(
                    "Secret %s has no key %r: run pods will fail with CreateContainerConfigError"
                    " until it does",
                    where,
                    key,
                )
            log.info("API-key Secret %s found", where)
            continue
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": {L.AGENT: agent_name}},
            "type": "Opaque",
            "data": {key: encoded},
        }
        try:
            await until_available(
                f"creating Secret {where}",
                functools.partial(kube.create, body, namespace),
                stopping,
            )
        except KubeError as exc:
            raise StartupError(
                f"the API-key Secret {where} does not exist and the agent cannot create it: {exc}"
                f" (create it, as the Helm chart does, or grant create on secrets in {namespace})"
            ) from None
        log.info("API-key Secret %s created", where)
