"""Read a W&B job artifact's `wandb-job.json`: what the agent needs to know to build its image.

A run spec that names `"job": "ENTITY/PROJECT/NAME:ALIAS"` and no image says nothing about
where the code is; the job artifact does. Its `wandb-job.json` has `source_type` (`repo`,
`artifact` or `image`) and `source` (the git remote and commit, the code artifact, or the
image, plus the entry point). The wandb SDK downloads it (`Api().artifact(name, type="job")`),
the same read path W&B's agent uses, so every auth and URL detail of the real server holds.

The SDK blocks (HTTP, files), so `job_info` runs it in the default executor; the download goes
to a private temporary directory that is removed before returning.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path
from typing import Any

from launch_agent.model.safe_load import load_json

JOB_FILE = "wandb-job.json"
TIMEOUT = 120.0


class JobArtifactError(RuntimeError):
    """The job artifact could not be read; the message names it and says why."""


class JobArtifactUnavailable(JobArtifactError):
    """W&B could not be asked (unreachable, timed out): not the item's fault, try again later."""


def unavailable(exc: BaseException) -> bool:
    """Whether an SDK error means "W&B did not answer" rather than "no such job".

    The SDK wraps every failure in `CommError`; a missing entity, project or artifact is a
    `CommError` caused by a `ValueError` (what the server answered), while connection errors,
    timeouts and an unresponsive service carry no such cause.
    """
    from wandb.errors import CommError

    return isinstance(exc, CommError) and not isinstance(exc.exc, ValueError)


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
            info = load_json(path.read_text(encoding="utf-8"), source=JOB_FILE)
        except (ValueError, UnicodeDecodeError) as exc:
            raise JobArtifactError(f"job artifact {name}: {JOB_FILE} is not JSON: {exc}") from exc
    if not isinstance(info, dict):
        raise JobArtifactError(f"job artifact {name}: {JOB_FILE} is not a JSON object")
    return info


async def job_info(name: str, base_url: str, api_key: str) -> dict[str, Any]:
    """`fetch_job_info` in the executor, bounded by `TIMEOUT`."""
    loop = asyncio.get_running_loop()
    call = functools.partial(fetch_job_info, name, base_url, api_key)
    try:
        async with asyncio.timeout(TIMEOUT):
            return await loop.run_in_executor(None, call)
    except TimeoutError:
        raise JobArtifactUnavailable(f"job artifact {name}: no answer in {TIMEOUT:g}s") from None
