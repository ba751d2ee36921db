"""Read a W&B job artifact's `wandb-job.json`: what the agent needs to know to build its image.

A run spec that names `"job": "ENTITY/PROJECT/NAME:ALIAS"` and no image says nothing about
where the code is; the job artifact does. Its `wandb-job.json` has `source_type` (`repo`,
`artifact` or `image`) and `source` (the git remote and commit, the code artifact, or the
image, plus the entry point). The wandb SDK downloads it (`Api().artifact(name, type="job")`),
the same read path W&B's agent uses, so every auth and URL detail of the real server holds.

The SDK blocks (HTTP, files), so `job_info` runs it in a daemon thread; the download goes
to a private temporary directory that is removed before returning.

Only W&B's answer about the job fails its item (no such entity, project or artifact; no
`wandb-job.json`; not JSON). Anything else is W&B not answering and is retried through the one
retry engine (`adapters/retry.py`): during an outage the SDK (wandb-core) retries 5xx itself
and then gives up with "the service process is busy and did not respond in time"
(`wandb/sdk/lib/service/service_connection.py` `api_request`, a `WandbApiFailedError` that is
no `CommError`), which used to fail build runs for good (found by `launch-agent bench chaos`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from launch_agent.adapters.bounded import MIB, InputTooLarge, read_text_file
from launch_agent.adapters.retry import GaveUp, Retryable, RetryPolicy, call_with_retries
from launch_agent.model.safe_load import load_json

log = logging.getLogger(__name__)
T = TypeVar("T")

JOB_FILE = "wandb-job.json"
# The submitter's file: W&B's own are a few KiB (source, entry point, input and output types).
MAX_JOB_FILE = MIB
# One SDK read: wandb-core gives up on a request after 60 s of its own retries.
TIMEOUT = 120.0
# Reads of one job: until W&B answers, the agent stops or 15 minutes passed (the item is then
# left for a later pop, never failed). Spaced widely: each failed read already took a minute.
JOB_RETRY = RetryPolicy(attempts=None, base_delay=1.0, max_delay=30.0, timeout=TIMEOUT,
                        deadline=900.0)  # fmt: skip


class JobArtifactError(RuntimeError):
    """The job artifact could not be read; the message names it and says why."""


class JobArtifactUnavailable(JobArtifactError):
    """W&B could not be asked (unreachable, timed out): not the item's fault, try again later."""


def unavailable(exc: BaseException) -> bool:
    """Whether an SDK error means "W&B did not answer" rather than "no such job".

    Definite answers are few and known: the SDK wraps what the server said about a missing
    entity, project or artifact in a `CommError` caused by a `ValueError`, and raises
    `ValueError` (or `KeyError`/`TypeError` on a response without the artifact) or `UsageError`
    (a malformed name) itself. Everything else (connection errors, timeouts, an unresponsive
    wandb-core, a `CommError` with no such cause) is an outage: failing the item on it would
    lose a run that is fine.
    """
    from wandb.errors import CommError, UsageError

    if isinstance(exc, CommError):
        return not isinstance(exc.exc, ValueError)
    return not isinstance(exc, (ValueError, KeyError, TypeError, UsageError))


def fetch_job_info(name: str, base_url: str, api_key: str) -> dict[str, Any]:
    """The parsed `wandb-job.json` of the job artifact `name` (blocking)."""
    import wandb

    with tempfile.TemporaryDirectory(prefix="job-") as tmp:
        try:
            api = wandb.Api(api_key=api_key, overrides={"base_url": base_url}, timeout=60)
            artifact = api.artifact(name, type="job")
            artifact.download(root=tmp)
        except Exception as exc:
            kind = JobArtifactUnavailable if unavailable(exc) else JobArtifactError
            raise kind(f"job artifact {name}: {exc}") from exc
        path = Path(tmp) / JOB_FILE
        if not path.is_file():
            raise JobArtifactError(f"job artifact {name} has no {JOB_FILE}")
        try:
            text = read_text_file(path, MAX_JOB_FILE, what=f"a job artifact's {JOB_FILE}")
            info = load_json(text, source=JOB_FILE)
        except InputTooLarge as exc:
            raise JobArtifactError(f"job artifact {name}: {JOB_FILE} {exc.strerror}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise JobArtifactError(f"job artifact {name}: {JOB_FILE} is not JSON: {exc}") from exc
    if not isinstance(info, dict):
        raise JobArtifactError(f"job artifact {name}: {JOB_FILE} is not a JSON object")
    return info


async def job_info(
    name: str,
    base_url: str,
    api_key: str,
    *,
    stop: asyncio.Event | None = None,
    policy: RetryPolicy = JOB_RETRY,
) -> dict[str, Any]:
    """`fetch_job_info` in the executor, each attempt bounded by `policy.timeout`, retried
    through an outage; `JobArtifactUnavailable` when the retries end (`stop` set, deadline)."""

    async def attempt() -> dict[str, Any]:
        try:
            return await _read_once(name, base_url, api_key, policy.timeout)
        except JobArtifactUnavailable as exc:
            raise Retryable(exc) from exc

    def on_retry(number: int, failure: Retryable, wait: float) -> None:
        log.warning("%s; read %d failed, the next in %.1fs", failure, number + 1, wait)

    try:
        return await call_with_retries(attempt, policy, stop=stop, on_retry=on_retry)
    except GaveUp as exc:
        raise JobArtifactUnavailable(
            f"{exc.last} (gave up after {exc.attempts} read(s): {exc.reason})"
        ) from exc


async def _read_once(name: str, base_url: str, api_key: str, seconds: float) -> dict[str, Any]:
    call = functools.partial(fetch_job_info, name, base_url, api_key)
    try:
        async with asyncio.timeout(seconds):
            return await _in_daemon_thread(call, f"job-read {name}")
    except TimeoutError:
        raise JobArtifactUnavailable(f"job artifact {name}: no answer in {seconds:g}s") from None


def _in_daemon_thread(call: Callable[[], T], name: str) -> asyncio.Future[T]:
    """`call()` in a daemon thread of its own, not the default executor: a read stuck in
    wandb-core's minute of retries when the agent stops must not hold the process's exit
    (`asyncio.run` waits for the default executor's threads), and its result is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled: the caller's timeout or the agent's stop
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # T when error is None

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = call()
        except BaseException as exc:  # delivered to the awaiting task, which handles it
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
