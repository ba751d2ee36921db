"""The agent's W&B client: GraphQL over one aiohttp session, with retries and typed errors.

One `ClientSession` per client, opened and closed by `async with WandbClient(...)`; no session,
connector or thread per call or per run. Each request is `POST {base_url}/graphql` with
`Authorization: Basic base64("api:" + key)` and the headers the reference sends for launch calls
(`User-Agent: W&B Public Client 0.31.0`, `Use-Admin-Privileges: true`): the W&B backend gates
some launch access on that user agent.

Documents come from `wandb_documents` (equal to the real client's, batched where that saves
requests), answers are read by `wandb_results`, the retry engine and its rules are `retry`;
this module only does the I/O. Per call: an attempt timeout, jittered exponential backoff on
network errors, 5xx, 408 and 429 (honouring `Retry-After`), then `WandbUnavailable`. The caller
pauses and tries again later: an outage never ends the process.

W&B's rate limits: an answer (any status) with `RateLimit-Remaining: 0` holds every request of
this client until its `RateLimit-Reset` seconds have passed, and a 429's `Retry-After` does the
same, so the calls in flight together wait with the one that was told instead of each spending
an attempt on another 429. A hold longer than the policy's `max_retry_after` fails the call at
once (`WandbUnavailable`), as a long `Retry-After` does.

Request economy (the agent targets at most 4 W&B requests per run): `pop` asks every queue in
one mutation, `run_stopped` checks many runs in one query (chunked to `stop_check_batch` runs
so a document never grows without bound), and nothing is polled per run.

Reading answers: every body is read through `bounded.read_body`, at most
`max_response_bytes` (the `wandb.max_response_bytes` setting, default 32 MiB) counted as it
streams: a Content-Length over it is refused before reading, a chunked body when it passes
it, and the connection is closed (`WandbResponseTooLarge`, not retried). A pop refused that
way loses the items W&B leased in it until their leases lapse and W&B offers them again.
Every body then goes through `safe_load.decode_response`, which never raises
anything but `InputError` (no `RecursionError`, no `ValueError` from a 5,000-digit number):
values nested deeper than the item limit, duplicate keys and non-finite numbers become markers
in place, so a hostile runSpec fails its own item (`wandb_results.run_spec`). A 200 whose body
cannot be read at all (cut short, not UTF-8, not JSON: a proxy's page, say) is retried like a
5xx (it may have been applied) and ends as `WandbUnavailable`; a readable answer of the wrong
shape is a `WandbProtocolError`. Big bodies are decoded off the event loop.

Retried mutations: a pop whose answer was lost leaves an item leased, which the server re-queues
after its lease expires, so retrying is safe. An ack is not: if an attempt may have reached the
server and the retry answers `success: false`, the first attempt may have won, so `ack` raises
`WandbAckUncertain` instead of reporting a lost race.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import ssl
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self

import aiohttp

from launch_agent.adapters import wandb_documents as docs
from launch_agent.adapters import wandb_results as results
from launch_agent.adapters.bounded import BodyTooLarge, read_body
from launch_agent.adapters.retry import (
    NETWORK_ERRORS,
    WANDB_RETRY,
    GaveUp,
    Retryable,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
    rate_limit_wait,
    wandb_verdict,
)
from launch_agent.adapters.tls import client_ssl_context
from launch_agent.adapters.wandb_errors import (
    WandbAckUncertain,
    WandbAuthError,
    WandbError,
    WandbNotFound,
    WandbProtocolError,
    WandbResponseTooLarge,
    WandbUnavailable,
)
from launch_agent.adapters.wandb_results import (
    LaunchAgentInfo,
    PushedItem,
    QueueConfig,
    QueuedItem,
    RunQueue,
    RunQueueItem,
    RunRef,
    Viewer,
)
from launch_agent.model.config import AgentConfig, LimitsConfig, WandbConfig
from launch_agent.model.safe_load import InputError, decode_response

log = logging.getLogger(__name__)

USER_AGENT = "W&B Public Client 0.31.0"
AgentStatus = Literal["POLLING", "RUNNING", "KILLED"]
# Keys of the agent configuration that must never travel to W&B in `agentConfig`.
_SECRET_CONFIG_KEYS = frozenset({"api_key"})
# Answers wrap a runSpec in a few levels (body, data, alias, item): values deeper than the item
# limit plus this are cut while decoding (and then refused by the item's depth check).
_ANSWER_WRAPPING = 8
# Bodies bigger than this are decoded in a thread, so a big item does not stall the loop.
_DECODE_IN_THREAD = 512 * 1024
# (operation, HTTP status or None for a network error, seconds): for metrics.
Observer = Callable[[str, int | None, float], None]


class _Unreadable(Exception):
    """A 200 whose body is not JSON at all: transient (a proxy, a cut connection), retried."""


class WandbClient:
    """Async W&B Launch client. Use as `async with WandbClient(url, key) as wandb: ...`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        retry: RetryPolicy | None = None,
        stop_check_batch: int = 100,
        max_connections: int = 16,
        user_agent: str = USER_AGENT,
        observer: Observer | None = None,
        rng: random.Random | None = None,
        limits: LimitsConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_response_bytes: int = WandbConfig().max_response_bytes,
    ) -> None:
        """`ssl_context`: the TLS trust for https W&B URLs (default: `tls.client_ssl_context`,
        the system roots plus the CA bundle the environment names). `max_response_bytes`:
        the largest answer read (`wandb.max_response_bytes`)."""
        if not api_key:
            raise ValueError("an API key is required (WANDB_API_KEY or ~/.netrc)")
        if stop_check_batch < 1:
            raise ValueError("stop_check_batch must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/graphql"
        self.retry = retry or WANDB_RETRY
        self.stop_check_batch = stop_check_batch
        self.stats: Counter[str] = Counter()
        self._max_connections = max_connections
        self._observer = observer
        self._rng = rng or random.Random()
        self.limits = limits or LimitsConfig()
        self.max_response_bytes = max_response_bytes
        token = base64.b64encode(f"api:{api_key}".encode()).decode("ascii")
        self._headers = {
            "Authorization": f"Basic {token}",
            "User-Agent": user_agent,
            "Use-Admin-Privileges": "true",
        }
        self._session: aiohttp.ClientSession | None = None
        # Monotonic time before which no request is sent: W&B said its rate-limit window is
        # spent (`RateLimit-Remaining: 0`) or answered 429 with `Retry-After` (module
        # docstring). One for the client: every call waits, not only the one that was told.
        self._resume_at = 0.0
        self._ssl = ssl_context  # None: the default, made when entered (off the loop)

    @classmethod
    def from_config(cls, config: AgentConfig, **options: Any) -> WandbClient:
        """A client for the configured W&B server and key (`options` as for the constructor)."""
        if config.api_key is None or not config.api_key.get_secret_value():
            raise WandbAuthError(
                f"no API key for W&B at {config.base_url}: set WANDB_API_KEY or add the host"
                " to ~/.netrc"
            )
        options.setdefault("limits", config.limits)
        options.setdefault("max_response_bytes", config.wandb.max_response_bytes)
        options.setdefault("stop_check_batch", config.tracking.stop_check_batch)
        if "ssl_context" not in options:
            options["ssl_context"] = client_ssl_context(configured=config.ca_bundle)
        return cls(config.base_url, config.api_key.get_secret_value(), **options)

    def __repr__(self) -> str:  # never the key
        return f"WandbClient({self.base_url!r})"

    async def __aenter__(self) -> Self:
        if self._ssl is None:
            # Loading the system roots is 50 ms of CPU: a thread's, not the loop's.
            self._ssl = await asyncio.to_thread(client_ssl_context)
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- operations --------------------------------------------------------------------------

    async def viewer(self) -> Viewer:
        """Who the key belongs to; `WandbAuthError` naming the URL when W&B does not know it."""
        data = await self._single(docs.single("Viewer", {}, "viewer"))
        viewer = results.viewer(data)
        if viewer is None:
            raise WandbAuthError(
                f"W&B at {self.base_url} did not recognise the API key (viewer is null): check"
                " WANDB_API_KEY or the ~/.netrc entry for this host"
            )
        return viewer

    async def project_run_queues(self, entity: str) -> list[RunQueue]:
        variables = {"entity": entity, "projectName": docs.LAUNCH_PROJECT}
        data = await self._single(docs.single("ProjectRunQueues", variables, "project"))
        queues = results.run_queues(data)
        if queues is None:
            raise WandbNotFound(
                f"W&B at {self.base_url}: entity {entity!r} has no project"
                f" {docs.LAUNCH_PROJECT!r} visible to this API key"
            )
        return queues

    async def create_launch_agent(
        self,
        entity: str,
        queue_ids: Sequence[str],
        hostname: str,
        agent_config: Mapping[str, Any],
        version: str,
    ) -> str:
        """Register the agent; returns its launch agent id."""
        config = {k: v for k, v in agent_config.items() if k not in _SECRET_CONFIG_KEYS}
        variables = {
            "entity": entity,
            "project": docs.LAUNCH_PROJECT,
            "queues": list(queue_ids),
            "hostname": hostname,
            "agentConfig": json.dumps(config, default=str),
            "version": version,
        }
        request = docs.single("createLaunchAgent", variables, "createLaunchAgent")
        return results.launch_agent_id(await self._single(request))

    async def launch_agent(self, agent_id: str) -> LaunchAgentInfo:
        """The agent's record, including `stop_polling`."""
        request = docs.single("LaunchAgent", {"agentId": agent_id}, "launchAgent")
        info = results.launch_agent(await self._single(request))
        if info is None:
            raise WandbNotFound(f"W&B at {self.base_url} does not know launch agent {agent_id}")
        return info

    async def update_launch_agent(self, agent_id: str, status: AgentStatus) -> bool:
        variables = {"agentId": agent_id, "agentStatus": status}
        request = docs.single("updateLaunchAgent", variables, "updateLaunchAgent")
        return results.success("updateLaunchAgent", await self._single(request))

    async def pop(
        self, entity: str, queues: Sequence[str], agent_id: str | None
    ) -> dict[str, RunQueueItem | None]:
        """At most one item from each queue, all in one request; None for an empty queue.

        A queue whose pop failed on the server (for example it was deleted) maps to None and
        is logged; the items popped from the other queues are returned, because they are
        already leased to this agent.
        """
        return dict(await self.pop_many(entity, list(dict.fromkeys(queues)), agent_id))

    async def pop_many(
        self, entity: str, slots: Sequence[str], agent_id: str | None
    ) -> list[tuple[str, RunQueueItem | None]]:
        """One pop per slot (a queue may fill several), all in one request, in slot order.

        A pop that failed on the server (for example its queue was deleted) answers None and
        is logged; the items popped by the other slots are returned, because they are already
        leased to this agent.
        """
        if not slots:
            return []
        request = docs.pop_batch(entity, slots, agent_id)
        data, errors = await self._batch(request)
        out: list[tuple[str, RunQueueItem | None]] = []
        for queue, key in zip(slots, request.keys, strict=True):
            item: RunQueueItem | None = None
            if key in errors:
                self.stats["pop_queue_errors"] += 1
                log.warning("W&B could not pop queue %r: %s", queue, errors[key])
            else:
                try:
                    item = results.popped(
                        queue,
                        data.get(key),
                        max_depth=self.limits.max_item_depth,
                        max_bytes=self.limits.max_item_bytes,
                    )
                except WandbProtocolError as exc:
                    # Without an item id nothing can be reported back; the lease expires on W&B.
                    self.stats["pop_unreadable"] += 1
                    log.error("unreadable pop answer from W&B: %s", exc)
            out.append((queue, item))
        return out

    async def ack(self, item_id: str, run_name: str) -> bool:
        """Claim a popped item under `run_name`; False when another agent acked it first."""
        variables = {"itemId": item_id, "runId": run_name}
        request = docs.single("ackRunQueueItem", variables, "ackRunQueueItem")
        body, maybe_applied = await self._post(request)
        data, _ = results.split_errors(request.operation, body, request.keys)
        won = results.success("ackRunQueueItem", data.get("ackRunQueueItem"))
        if not won and maybe_applied:
            raise WandbAckUncertain(item_id, run_name)
        return won

    async def fail(
        self, item_id: str, message: str, stage: str, file_paths: Sequence[str] | None = None
    ) -> bool:
        """Mark an item failed with a message a person can act on; `filePaths` only when set."""
        variables: dict[str, Any] = {"runQueueItemId": item_id, "message": message}
        variables["stage"] = stage
        if file_paths is not None:
            variables["filePaths"] = list(file_paths)
        request = docs.single("failRunQueueItem", variables, "failRunQueueItem")
        return results.success("failRunQueueItem", await self._single(request))

    async def warn(
        self, item_id: str, message: str, stage: str, file_paths: Sequence[str] = ()
    ) -> bool:
        """Attach a warning to an item (the reference always sends `filePaths`)."""
        variables = {
            "runQueueItemId": item_id,
            "message": message,
            "stage": stage,
            "filePaths": list(file_paths),
        }
        request = docs.single("updateRunQueueItemWarning", variables, "updateRunQueueItemWarning")
        return results.success("updateRunQueueItemWarning", await self._single(request))

    async def run_stopped(self, runs: Sequence[tuple[str, str, str]]) -> dict[RunRef, bool]:
        """Whether each (entity, project, run id) was stopped from the UI.

        One request per `stop_check_batch` runs. A missing project or run is not stopped, and a
        run whose check errored on the server counts as not stopped until the next check.
        """
        refs = list(dict.fromkeys(RunRef(*run) for run in runs))
        out: dict[RunRef, bool] = {}
        for start in range(0, len(refs), self.stop_check_batch):
            chunk = refs[start : start + self.stop_check_batch]
            request = docs.run_stopped_batch(chunk)
            data, errors = await self._batch(request)
            for ref, key in zip(chunk, request.keys, strict=True):
                if key in errors:
                    log.warning("W&B could not check run %s/%s/%s: %s", *ref, errors[key])
                out[ref] = key not in errors and results.run_stopped(data.get(key))
        return out

    async def run_state(self, entity: str, project: str, run_id: str) -> str | None:
        """The W&B run's state (`pending`, `running`, ...); None when it does not exist."""
        variables = {"project": project, "entity": entity, "name": run_id}
        data = await self._single(docs.single("RunState", variables, "project"))
        return results.run_state(data)

    async def sweep_state(self, entity: str, project: str, sweep: str) -> str | None:
        """The sweep's state (`RUNNING`, `PAUSED`, `FINISHED`, ...); None when it does not
        exist. wandb `apis/public/sweeps.py` `_get_sweep_state`."""
        variables = {"entity": entity, "project": project, "sweep": sweep}
        data = await self._single(docs.single("GetSweepState", variables, "project"))
        return results.sweep_state(data)

    async def set_sweep_state(self, entity: str, project: str, sweep: str, state: str) -> bool:
        """Set a sweep's state as wandb's `_set_sweep_state` does: read the sweep's id, leave a
        sweep that is already over alone (False), then `UpsertSweep`."""
        variables = {"entity": entity, "project": project, "sweep": sweep, "specs": ["{}"]}
        found = results.sweep_field(
            await self._single(docs.single("SweepWithRuns", variables, "project"))
        )
        if found is None or not isinstance(found.get("id"), str):
            return False
        current = str(found.get("state") or "").upper()
        if state != "RUNNING" and current not in ("RUNNING", "PAUSED", "PENDING"):
            return False
        upsert = {"id": found["id"], "state": state, "entityName": entity, "projectName": project}
        await self._single(docs.single("UpsertSweep", upsert, "upsertSweep"))
        return True

    async def push_to_run_queue_by_name(
        self,
        entity: str,
        queue_name: str,
        run_spec: Mapping[str, Any],
        *,
        project: str = docs.LAUNCH_PROJECT,
        priority: int | None = None,
        template_variable_values: Mapping[str, Any] | None = None,
    ) -> PushedItem:
        """Push a run spec onto a queue (the agent requeues preempted runs with it)."""
        request = docs.push_to_run_queue_by_name(
            entity,
            project,
            queue_name,
            run_spec,
            priority=priority,
            template_variable_values=template_variable_values,
        )
        return results.pushed(await self._single(request))

    async def run_queue_item(self, entity: str, queue: str, item_id: str) -> QueuedItem | None:
        """The item's state as W&B has it (wandb `QueuedRun._get_item`); None when the queue
        holds no such item."""
        variables = {
            "projectName": docs.LAUNCH_PROJECT,
            "entityName": entity,
            "runQueue": queue,
            "itemId": item_id,
        }
        data = await self._single(docs.single("GetRunQueueItem", variables, "project"))
        return results.run_queue_item(queue, data)

    async def run_queue_items(self, entity: str, queue: str) -> list[QueuedItem]:
        """The queue's first `RUN_QUEUE_ITEMS_PAGE` items with their states and runSpecs
        (wandb `RunQueue.items`)."""
        data = await self._single(docs.run_queue_items(entity, queue))
        return results.run_queue_items(queue, data)

    async def queue_config(self, entity: str, queue: str) -> QueueConfig:
        """The queue's default resource config and template variables (`launch-agent migrate`).

        Two queries, as wandb's `RunQueue.default_resource_config` makes them: the queue's
        metadata names the config's id, the entity serves the config by id.
        """
        variables = {"projectName": docs.LAUNCH_PROJECT, "entityName": entity, "runQueue": queue}
        data = await self._single(docs.single("GetRunQueueMetadata", variables, "project"))
        config_id = results.resource_config_id(queue, data)
        if config_id is None:
            return QueueConfig(queue, None, {})
        variables = {"entityName": entity, "id": config_id}
        data = await self._single(docs.single("GetDefaultResourceConfig", variables, "entity"))
        return results.queue_config(queue, data)

    # --- transport ---------------------------------------------------------------------------

    async def _single(self, request: docs.Request) -> Any:
        data, _ = results.split_errors(request.operation, (await self._post(request))[0], ())
        return data.get(request.keys[0])

    async def _batch(self, request: docs.Request) -> tuple[dict[str, Any], dict[str, str]]:
        body, _ = await self._post(request)
        return results.split_errors(request.operation, body, request.keys)

    async def _post(self, request: docs.Request) -> tuple[dict[str, Any], bool]:
        """The decoded JSON body, and whether an earlier failed attempt may have been applied."""
        if self._session is None:
            raise RuntimeError("WandbClient is used outside `async with`")
        payload = {"query": request.document, "variables": request.variables}
        timeout = aiohttp.ClientTimeout(total=self.retry.timeout)
        session = self._session
        maybe_applied = False

        async def attempt() -> tuple[dict[str, Any], bool]:
            nonlocal maybe_applied
            await self._rate_limited()
            started = time.monotonic()
            self.stats["requests"] += 1
            self.stats[f"requests:{request.operation}"] += 1
            status: int | None = None
            try:
                async with session.post(self.url, json=payload, timeout=timeout) as resp:
                    status = resp.status
                    verdict = wandb_verdict(status)
                    spent = self._note_rate_limit(status, resp.headers)
                    if verdict == "retry":
                        # 429 means "not processed"; a 5xx may come after the work was done.
                        maybe_applied |= status != 429
                        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                        raise Retryable(
                            f"HTTP {status}", spent if retry_after is None else retry_after
                        )
                    raw = await read_body(
                        resp,
                        self.max_response_bytes,
                        what=f"W&B's answer to {request.operation}",
                        setting="wandb.max_response_bytes",
                    )
                    return await self._decode(request, verdict, status, raw), maybe_applied
            except BodyTooLarge as exc:
                self.stats["too_large"] += 1
                raise WandbResponseTooLarge(f"W&B at {self.base_url}: {exc}") from None
            except _Unreadable as exc:
                # A body cut short or garbled on the way; like a 5xx, the work may have been done.
                maybe_applied = True
                raise Retryable(f"HTTP {status} with an unreadable body: {exc}") from exc
            except aiohttp.ClientConnectorError as exc:
                raise Retryable(f"cannot connect: {exc}") from exc
            except NETWORK_ERRORS as exc:
                maybe_applied = True
                text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise Retryable(text) from exc
            finally:
                if self._observer is not None:
                    self._observer(request.operation, status, time.monotonic() - started)

        def on_retry(number: int, failure: Retryable, wait: float) -> None:
            self.stats["retries"] += 1
            log.info(
                "W&B %s failed (%s), attempt %d of %s; retrying in %.2fs",
                request.operation,
                failure,
                number + 1,
                self.retry.attempts,
                wait,
            )

        try:
            return await call_with_retries(attempt, self.retry, rng=self._rng, on_retry=on_retry)
        except GaveUp as gave_up:
            last_error = str(gave_up.last)
            if gave_up.reason == "retry-after":
                last_error += f" with Retry-After {gave_up.last.retry_after:.0f}s"
            self.stats["unavailable"] += 1
            raise WandbUnavailable(
                f"W&B at {self.base_url} is unavailable: {request.operation} failed"
                f" {gave_up.attempts} time(s), last: {last_error}",
                attempts=gave_up.attempts,
                last_error=last_error,
            ) from None

    async def _rate_limited(self) -> None:
        """Wait until W&B's rate limit lets a request go (`_resume_at`); a wait longer than
        the policy's `max_retry_after` is not made here: the call fails as an unavailable W&B
        and its caller pauses (the retry engine's rule)."""
        wait = self._resume_at - time.monotonic()
        if wait <= 0:
            return
        if wait > self.retry.max_retry_after:
            raise Retryable(f"W&B's rate limit resets in {wait:.0f}s", wait)
        self.stats["rate_limited"] += 1
        log.info("W&B's rate limit is spent: waiting %.2fs before the next request", wait)
        await asyncio.sleep(wait)

    def _note_rate_limit(self, status: int, headers: Mapping[str, str]) -> float | None:
        """Hold every later request until W&B's window resets, when it says none is left in
        it, or for a 429's `Retry-After`; the wait it asked for (None: none)."""
        spent = rate_limit_wait(headers.get("RateLimit-Remaining"), headers.get("RateLimit-Reset"))
        wait = spent
        if status == 429:
            retry_after = parse_retry_after(headers.get("Retry-After"))
            wait = max(wait or 0.0, retry_after or 0.0) if wait or retry_after else None
        if wait is not None:
            self._resume_at = max(self._resume_at, time.monotonic() + wait)
        return spent

    async def _decode(
        self, request: docs.Request, verdict: str, status: int, raw: bytes
    ) -> dict[str, Any]:
        if verdict == "auth":
            raise WandbAuthError(
                f"W&B at {self.base_url} refused the API key (HTTP {status}) for"
                f" {request.operation}: check WANDB_API_KEY or the ~/.netrc entry for this host"
            )
        depth = self.limits.max_item_depth
        try:
            if len(raw) > _DECODE_IN_THREAD:
                body = await asyncio.to_thread(
                    decode_response, raw, cut=depth + _ANSWER_WRAPPING, limit=depth
                )
            else:
                body = decode_response(raw, cut=depth + _ANSWER_WRAPPING, limit=depth)
        except InputError as exc:
            if verdict == "ok":
                raise _Unreadable(f"{exc}; {raw[:200].decode('utf-8', 'replace')!r}") from None
            body = None
        if isinstance(body, dict) and (verdict == "ok" or body.get("errors")):
            # A 4xx with GraphQL `errors` (a validation error, say) is read like a 200.
            return body
        snippet = raw[:200].decode("utf-8", "replace")
        what = "not a JSON object" if verdict == "ok" else "an error without GraphQL errors"
        raise WandbProtocolError(
            f"W&B at {self.base_url} answered {request.operation} with HTTP {status}, {what}:"
            f" {snippet!r}"
        )


__all__ = [
    "AgentStatus",
    "LaunchAgentInfo",
    "PushedItem",
    "QueueConfig",
    "QueuedItem",
    "RunQueue",
    "RunQueueItem",
    "RunRef",
    "Viewer",
    "WandbClient",
    "WandbError",
]
