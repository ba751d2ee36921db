"""`ImageBuilder`: the one entry point the agent calls to turn a job's source into an image.

    async with ImageBuilder(kube, store, registry, settings, workdir) as builder:
        image = await builder.build(spec)          # raises BuildFailed (stage "build")

Steps for one `BuildSpec`:

1. fetch the source and pin it (git commit sha / code artifact digest) into a private temp dir;
2. choose the Dockerfile (override, the job's own, or generated) and compute the tag;
3. single flight: concurrent calls for the same image share one build task (owned by the
   builder, shielded from any one caller's cancellation, cancelled on `aclose`);
4. skip everything when the registry already has `destination:tag`;
5. pack the context (deterministic tar.gz, in the executor), upload it to the context store;
6. create the Kaniko Job (`render/kaniko.py`), adopting one of the same name (a restarted agent
   or a second replica building the same image), and wait for its outcome on a watch of that
   Job (resumed from the last resourceVersion when the stream ends; never polled);
7. on failure read the tail of the Kaniko container's log and raise `BuildFailed`;
8. always delete the Job (propagationPolicy Background, so its pod goes too), the context
   object and the temp dir. A failing clean-up is logged and never hides the build's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from launch_agent.adapters.build_context import (
    ContextError,
    dockerfile_for,
    pack,
    resolve_artifact,
    resolve_git,
)
from launch_agent.adapters.kube import KubeClient, KubeError, KubeGone, Resource
from launch_agent.adapters.object_store import ObjectStore, ObjectStoreError
from launch_agent.adapters.registry import RegistryClient, RegistryError
from launch_agent.model.build import BuildRequest, BuildSource, Destination, SourceKind
from launch_agent.render.kaniko import CONTAINER, IMAGE_TAG, KanikoSettings, kaniko_job

log = logging.getLogger(__name__)
JOBS = Resource("batch", "v1", "Job", "jobs")
PODS = Resource("", "v1", "Pod", "pods")
STAGE = "build"


class BuildFailed(Exception):
    """A build that did not produce an image; `stage` is W&B's error stage, `log_tail` Kaniko's."""

    stage = STAGE

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message + (f"\n--- build log (tail) ---\n{log_tail}" if log_tail else ""))
        self.reason = message
        self.log_tail = log_tail


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """What a run needs built: its source (unresolved), Dockerfile choices and arguments."""

    run_id: str
    source: SourceKind
    uri: str  # git URL, code artifact name, or the image itself
    ref: str | None = None  # git commit, branch or tag
    dockerfile: str | None = None  # the job's own Dockerfile, a path in the source
    override_dockerfile: str | None = None  # `overrides.dockerfile`
    base_image: str | None = None  # for a generated Dockerfile
    entrypoint: tuple[str, ...] = ()
    build_args: tuple[tuple[str, str], ...] = ()
    run_queue_item: str = ""


@dataclass
class BuilderStats:
    requests: int = 0
    builds: int = 0
    skipped: int = 0
    shared: int = 0
    failed: int = 0
    context_bytes: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where sources come from: W&B (code artifacts) and a git-credentials file."""

    wandb_base_url: str = ""
    wandb_api_key: str = ""
    git_credentials_file: Path | None = None


class ImageBuilder:
    def __init__(
        self,
        kube: KubeClient,
        store: ObjectStore,
        registry: RegistryClient,
        settings: KanikoSettings,
        destination: Destination,
        *,
        agent: str = "launch-agent",
        credentials: Credentials | None = None,
        workdir: Path | None = None,
        log_tail_lines: int = 50,
        watch_timeout: int = 300,
    ) -> None:
        self.kube = kube
        self.store = store
        self.registry = registry
        self.settings = settings
        self.destination = destination
        self.agent = agent
        self.credentials = credentials or Credentials()
        self.workdir = workdir
        self.log_tail_lines = log_tail_lines
        self.watch_timeout = watch_timeout
        self.stats = BuilderStats()
        self._flights: dict[str, asyncio.Task[str]] = {}

    async def __aenter__(self) -> ImageBuilder:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel builds in flight and wait for their clean-up."""
        tasks = list(self._flights.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._flights.clear()

    # --- the entry point ---------------------------------------------------------------------

    async def build(self, spec: BuildSpec) -> str:
        """The image for `spec`, built if the registry does not have it yet."""
        self.stats.requests += 1
        if spec.source is SourceKind.IMAGE:
            return spec.uri
        tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="build-", dir=self.workdir))
        handed_over = False
        try:
            request, tree = await self._prepare(spec, tmp)
            task = self._flights.get(request.tag)
            if task is None:
                # The task owns the source tree from here on (and removes it when done): it
                # outlives this caller if this caller is cancelled.
                task = asyncio.create_task(
                    self._build_once(request, tree), name=f"image-build-{request.tag}"
                )
                handed_over = True
                self._flights[request.tag] = task
                task.add_done_callback(functools.partial(self._landed, request.tag))
            else:
                self.stats.shared += 1
            # One caller giving up (its run was stopped) does not cancel the others' build.
            return await asyncio.shield(task)
        finally:
            if not handed_over:
                await asyncio.to_thread(shutil.rmtree, tmp, True)

    def _landed(self, tag: str, task: asyncio.Task[str]) -> None:
        if self._flights.get(tag) is task:
            del self._flights[tag]
        if not task.cancelled() and task.exception() is not None:
            self.stats.failed += 1

    async def _prepare(self, spec: BuildSpec, tmp: Path) -> tuple[BuildRequest, Path]:
        tree = tmp / "src"
        creds = self.credentials
        try:
            if spec.source is SourceKind.GIT:
                digest = await resolve_git(spec.uri, spec.ref, tree, creds.git_credentials_file)
            else:
                digest = await resolve_artifact(
                    spec.uri, tree, creds.wandb_base_url, creds.wandb_api_key
                )
            dockerfile = await dockerfile_for(
                tree,
                override=spec.override_dockerfile,
                job_dockerfile=spec.dockerfile,
                base_image=spec.base_image,
                entrypoint=list(spec.entrypoint) or None,
            )
        except ContextError as exc:
            raise BuildFailed(f"preparing the build context: {exc}") from exc
        request = BuildRequest(
            spec.run_id,
            BuildSource(spec.source, spec.uri, digest),
            dockerfile,
            self.destination.uri,
            build_args=spec.build_args,
            agent=self.agent,
            run_queue_item=spec.run_queue_item,
        )
        return request, tree

    # --- one build ---------------------------------------------------------------------------

    async def _build_once(self, request: BuildRequest, tree: Path) -> str:
        try:
            return await self._build_missing(request, tree)
        finally:
            await asyncio.to_thread(shutil.rmtree, tree.parent, True)

    async def _build_missing(self, request: BuildRequest, tree: Path) -> str:
        try:
            if await self.registry.exists(self.destination, request.tag):
                self.stats.skipped += 1
                log.info("image %s exists; build skipped", request.image)
                return request.image
        except RegistryError as exc:
            # Not knowing is not fatal: build, and let Kaniko's push report real problems.
            log.warning("cannot tell whether %s exists, building it: %s", request.image, exc)
        self.stats.builds += 1
        object_name = f"{request.tag}.tgz"
        archive = tree.parent / object_name
        job_name: str | None = None
        uploaded = False
        try:
            packed = await pack(tree, request.dockerfile, archive)
            self.stats.context_bytes.append(packed.size)
            context_uri = await self.store.upload(archive, object_name)
            uploaded = True
            job = kaniko_job(request, self.destination, context_uri, self.settings)
            job_name = job["metadata"]["name"]
            created = await self.kube.create(job, self.settings.namespace)
            await self._wait(created.obj, request)
            log.info("built %s", request.image)
            return request.image
        except (ObjectStoreError, KubeError) as exc:
            raise BuildFailed(f"building {request.image}: {exc}") from exc
        finally:
            await self._clean_up(job_name, object_name if uploaded else None)

    async def _wait(self, job: Mapping[str, Any], request: BuildRequest) -> None:
        """Until the Job completes (return) or fails (`BuildFailed`), from a watch on it."""
        name = job["metadata"]["name"]
        ns = self.settings.namespace
        selector = f"{IMAGE_TAG}={request.tag}"
        limit = self.settings.deadline_seconds + 120
        try:
            async with asyncio.timeout(limit):
                current: Mapping[str, Any] = job
                while True:
                    outcome = job_outcome(current)
                    if outcome == "succeeded":
                        return
                    if outcome is not None:
                        raise BuildFailed(
                            f"building {request.image}: Job {ns}/{name} failed: {outcome}",
                            await self._log_tail(name),
                        )
                    version = str(current["metadata"].get("resourceVersion", ""))
                    current = await self._next_change(
                        name, version, selector
                    ) or await self.kube.get(JOBS, ns, name)
        except TimeoutError:
            raise BuildFailed(
                f"building {request.image}: no outcome from Job {ns}/{name} in {limit}s",
                await self._log_tail(name),
            ) from None

    async def _next_change(
        self, name: str, version: str, selector: str
    ) -> Mapping[str, Any] | None:
        """The Job's next version from a watch; None when the stream ended or expired."""
        try:
            async for event in self.kube.watch_stream(
                JOBS,
                self.settings.namespace,
                resource_version=version,
                label_selector=selector,
                timeout_seconds=self.watch_timeout,
            ):
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":
                    return None  # e.g. 410 Gone: read the Job afresh and watch from there
                if kind in ("ADDED", "MODIFIED") and obj.get("metadata", {}).get("name") == name:
                    return dict(obj)
                if kind == "DELETED" and obj.get("metadata", {}).get("name") == name:
                    raise BuildFailed(f"Job {self.settings.namespace}/{name} was deleted")
        except KubeGone:
            return None
        return None

    async def _log_tail(self, job_name: str) -> str:
        if self.log_tail_lines <= 0:
            return ""
        try:
            pods = await self.kube.list(
                PODS, self.settings.namespace, label_selector=f"job-name={job_name}"
            )
            if not pods.items:
                return ""
            pod = pods.items[-1]["metadata"]["name"]
            return await self.kube.pod_log_tail(
                self.settings.namespace, pod, CONTAINER, self.log_tail_lines
            )
        except KubeError as exc:
            return f"(the build log could not be read: {exc})"

    async def _clean_up(self, job_name: str | None, object_name: str | None) -> None:
        if job_name is not None:
            try:
                await self.kube.delete(JOBS, self.settings.namespace, job_name, "Background")
            except KubeError as exc:
                log.warning("build Job %s was not deleted: %s", job_name, exc)
        if object_name is not None:
            try:
                await self.store.delete(object_name)
            except ObjectStoreError as exc:
                log.warning("build context %s was not deleted: %s", object_name, exc)


def job_outcome(job: Mapping[str, Any]) -> str | None:
    """ "succeeded", a failure reason, or None while the Job runs (by its conditions)."""
    status = job.get("status") or {}
    for cond in status.get("conditions") or ():
        if cond.get("status") != "True":
            continue
        if cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if cond.get("type") in ("Failed", "FailureTarget"):
            reason = cond.get("reason") or "Failed"
            message = cond.get("message") or ""
            return f"{reason}: {message}" if message else str(reason)
    return None
