"""`ImageBuilder`: the one entry point the agent calls to turn a job's source into an image.

    async with ImageBuilder(kube, store, registry, settings, dest, record=record) as builder:
        built = await builder.build(spec)          # raises BuildFailed (stage "build")
        built.image                                # REPO@sha256:...: the run is pinned to it

Steps for one `BuildSpec`:

1. fetch the source and pin it (git commit sha / code artifact digest) into a private temp dir;
2. choose the Dockerfile (override, the job's own, or generated) and compute the tag;
3. single flight: concurrent calls for the same image share one build task (owned by the
   builder, shielded from any one caller's cancellation, cancelled on `aclose`);
4. skip everything when the registry's digest for `destination:tag` is on the agent's record of
   its own builds (`digest_record.py`); a tag whose digest is not (pushed by someone else:
   Kaniko runs `RUN` steps next to the push credential, so any build can push any tag) is
   reported and built again, or the run refused (`builder.trust.untrusted_tag`);
5. pack the context (deterministic tar.gz, in the executor), upload it to the context store;
6. create the Kaniko Job (`render/kaniko.py`), adopting one of the same name (a restarted agent
   or a second replica building the same image), and wait for its outcome (below);
7. on success read the digest Kaniko pushed from its termination message (`--digest-file`),
   add it to the record and pin the image to it (`REPO@sha256:...`: a tag moved after the
   build cannot swap the image); on failure read the tail of the Kaniko container's log (when
   the executor ran) and raise `BuildFailed` with the reason;
8. always delete the Job (propagationPolicy Background, so its pod goes too), the context
   object and the temp dir. A failing clean-up is logged and never hides the build's error.

Status comes from two informers the builder starts on `async with` and stops on exit: one for
Jobs and one for pods in the Kaniko namespace, both selecting this agent's build objects
(`launch-agent.io/agent=<agent>,app.kubernetes.io/component=image-build`, labels the Job and
its pod template both carry). However many builds run, that is two watch streams, relisted
after 410 and reconnected by the informers themselves. A build waits on an event keyed by its
Job's name; the informers' handler sets it on any change to the Job or its pods, and the build
re-assesses from the informers' caches with the pure `tracking.build_pods.assess_build`. So a
pod that cannot pull the executor image, misses a Secret, is OOMKilled or stays unschedulable
past `tracking.unschedulable_timeout_seconds` fails the build within seconds of the kubelet or
scheduler saying so, not at the Job's `activeDeadlineSeconds`. `deadline_seconds + 120` stays
as the last resort against a cluster that never reports anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from launch_agent.adapters.build_context import (
    ContextError,
    dockerfile_for,
    pack,
    resolve_artifact,
    resolve_git,
)
from launch_agent.adapters.digest_record import DigestRecord, RecordUnavailable
from launch_agent.adapters.kube import (
    Informer,
    InformerEvent,
    InformerSet,
    InformerSettings,
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    Resource,
)
from launch_agent.adapters.object_store import ContextStore, ObjectStoreError
from launch_agent.adapters.registry import RegistryClient, RegistryError
from launch_agent.model import labels
from launch_agent.model.build import BuildRequest, BuildSource, Destination, SourceKind
from launch_agent.model.build_source import SourceError, check_build_arg
from launch_agent.model.config import GitSourceConfig
from launch_agent.render.kaniko import COMPONENT, CONTAINER, KanikoSettings, kaniko_job
from launch_agent.render.kaniko import job_name as kaniko_job_name
from launch_agent.tracking.build_pods import (
    BuildContext,
    BuildState,
    BuildStatus,
    assess_build,
    job_outcome,
    pushed_digest,
    unschedulable_pods,
)
from launch_agent.tracking.views import Meta

__all__ = [
    "JOBS",
    "PODS",
    "STAGE",
    "BuildFailed",
    "BuildSpec",
    "BuilderStats",
    "BuiltImage",
    "Credentials",
    "ImageBuilder",
    "job_outcome",
    "owner_job",
]

log = logging.getLogger(__name__)
JOBS = Resource("batch", "v1", "Job", "jobs")
PODS = Resource("", "v1", "Pod", "pods")
SECRETS = Resource("", "v1", "Secret", "secrets")
STAGE = "build"


class BuildFailed(Exception):
    """A build that did not produce an image; `stage` is W&B's error stage, `log_tail` Kaniko's."""

    stage = STAGE

    def __init__(self, message: str, log_tail: str = "", *, explained: bool = False) -> None:
        super().__init__(message + (f"\n--- build log (tail) ---\n{log_tail}" if log_tail else ""))
        self.reason = message
        self.log_tail = log_tail
        # The reason already says what to change (a setting, a Secret, a limit).
        self.explained = explained


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


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """A build's result: the image pinned by digest, whether it was a trusted registry hit,
    and what the runs waiting for it should be warned about (a poisoned tag)."""

    image: str
    cached: bool = False
    warnings: tuple[str, ...] = ()


@dataclass
class BuilderStats:
    requests: int = 0
    builds: int = 0
    skipped: int = 0
    shared: int = 0
    failed: int = 0
    untrusted: int = 0
    context_bytes: list[int] = field(default_factory=list)


@dataclass
class _Waiter:
    """One build's wait: woken by its Job's and pods' events."""

    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # The Job was in the informer's cache once (absent later: deleted), or its DELETED event
    # came (both its ADDED and DELETED may arrive before the build looks again).
    seen: bool = False
    deleted: bool = False
    # pod name -> loop time it was first seen unschedulable
    unschedulable_since: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where sources come from: W&B (code artifacts) and git (allowed schemes, credentials)."""

    wandb_base_url: str = ""
    wandb_api_key: str = ""
    git: GitSourceConfig = field(default_factory=GitSourceConfig)


class ImageBuilder:
    def __init__(
        self,
        kube: KubeClient,
        store: ContextStore,
        registry: RegistryClient,
        settings: KanikoSettings,
        destination: Destination,
        *,
        agent: str = "launch-agent",
        credentials: Credentials | None = None,
        workdir: Path | None = None,
        log_tail_lines: int = 50,
        watch_timeout: int = 300,
        unschedulable_timeout: float = 600.0,
        observer: Callable[[str, float, str], None] | None = None,
        record: DigestRecord,
        untrusted_tag: Literal["rebuild", "refuse"] = "rebuild",
        on_untrusted: Callable[[str, str, str], None] | None = None,
    ) -> None:
        """`observer(result, seconds, image)` hears every build once it ends (a build shared
        by several runs once): result `built`, `cached` (the registry had it) or `failed`.
        `record` is the agent's record of the digests it built; `untrusted_tag` what a tag
        whose digest is not on it does (`rebuild` or `refuse`), and `on_untrusted(image,
        digest, action)` hears each such tag (action `rebuilt` or `refused`)."""
        self.kube = kube
        self.record = record
        self.untrusted_tag = untrusted_tag
        self.on_untrusted = on_untrusted
        self.observer = observer
        self.store = store
        self.registry = registry
        self.settings = settings
        self.destination = destination
        self.agent = agent
        self.credentials = credentials or Credentials()
        self.workdir = workdir
        self.log_tail_lines = log_tail_lines
        self.watch_timeout = watch_timeout
        self.unschedulable_timeout = unschedulable_timeout
        self.stats = BuilderStats()
        self._flights: dict[str, asyncio.Task[BuiltImage]] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._context = BuildContext(
            settings.builder.kaniko_image, CONTAINER, settings.docker_config_secret
        )
        self._informers: InformerSet | None = None
        self._jobs: Informer | None = None
        self._pods: Informer | None = None

    @property
    def informers(self) -> InformerSet | None:
        """The build informers (Jobs, pods) while the builder is entered; their stats."""
        return self._informers

    @property
    def label_selector(self) -> str:
        """What the build informers select: this agent's Kaniko Jobs and their pods."""
        return f"{labels.AGENT}={self.agent},{COMPONENT}=image-build"

    async def __aenter__(self) -> ImageBuilder:
        informers = InformerSet(
            self.kube,
            self._on_event,
            InformerSettings(label_selector=self.label_selector, watch_timeout=self.watch_timeout),
        )
        self._jobs = informers.add(JOBS, self.settings.namespace)
        self._pods = informers.add(PODS, self.settings.namespace)
        await informers.__aenter__()
        self._informers = informers
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
        # After the builds: their clean-up does not need the informers, but their waits do.
        informers, self._informers = self._informers, None
        if informers is not None:
            await informers.__aexit__(None, None, None)

    # --- the entry point ---------------------------------------------------------------------

    async def build(self, spec: BuildSpec) -> BuiltImage:
        """The image for `spec`, built unless the registry has one this agent built."""
        self.stats.requests += 1
        if spec.source is SourceKind.IMAGE:
            return BuiltImage(spec.uri)
        if self._informers is None:
            raise RuntimeError("ImageBuilder.build needs `async with ImageBuilder(...)` first")
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

    def _landed(self, tag: str, task: asyncio.Task[BuiltImage]) -> None:
        if self._flights.get(tag) is task:
            del self._flights[tag]
        if not task.cancelled() and task.exception() is not None:
            self.stats.failed += 1

    async def _prepare(self, spec: BuildSpec, tmp: Path) -> tuple[BuildRequest, Path]:
        tree = tmp / "src"
        creds = self.credentials
        try:
            for key, value in spec.build_args:
                check_build_arg(key, value, "build arguments")
        except SourceError as exc:
            raise BuildFailed(f"preparing the build: {exc}", explained=True) from exc
        try:
            if spec.source is SourceKind.GIT:
                digest = await resolve_git(spec.uri, spec.ref, tree, creds.git)
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

    async def _build_once(self, request: BuildRequest, tree: Path) -> BuiltImage:
        started = time.monotonic()
        try:
            built = await self._build_missing(request, tree)
            self._observe("cached" if built.cached else "built", started, request.image)
            return built
        except BuildFailed:
            self._observe("failed", started, request.image)
            raise
        finally:
            await asyncio.to_thread(shutil.rmtree, tree.parent, True)

    def _observe(self, result: str, started: float, image: str) -> None:
        if self.observer is not None:
            self.observer(result, time.monotonic() - started, image)

    def _pinned(self, digest: str) -> str:
        return f"{self.destination.uri}@{digest}"

    async def _build_missing(self, request: BuildRequest, tree: Path) -> BuiltImage:
        """The image pinned by digest: the registry's if this agent built it, else built."""
        warnings: tuple[str, ...] = ()
        try:
            found = await self.registry.digest(self.destination, request.tag)
        except RegistryError as exc:
            # Not knowing is not fatal: build, and let Kaniko's push report real problems.
            log.warning("cannot tell whether %s exists, building it: %s", request.image, exc)
            found = None
        if found is not None:
            trusted = await self._trusted(request, found)
            if trusted:
                self.stats.skipped += 1
                log.info("image %s (%s) was built by this agent; build skipped", request.image,
                         found)  # fmt: skip
                await self._clean_up_leftover(request)
                return BuiltImage(self._pinned(found), cached=True)
            if trusted is not None:
                warnings = (self._untrusted(request, found),)
        digest = await self._build_and_push(request, tree)
        return BuiltImage(self._pinned(digest), warnings=warnings)

    async def _trusted(self, request: BuildRequest, found: str) -> bool | None:
        """Whether `found` is a digest this agent built for the tag; None: cannot tell."""
        try:
            if await self.record.trusts(request.tag, found):
                return True
        except RecordUnavailable as exc:
            log.warning("building %s: %s", request.image, exc)
            return None
        # A build of this agent that ended before it could record its digest (a kill): its
        # Job, left in the Kaniko namespace, says what it pushed.
        name = kaniko_job_name(self.settings.builder.build_job_name, request.tag)
        assert self._jobs is not None, "build() checked that the builder was entered"
        job = self._jobs.get(self.settings.namespace, name)
        if (
            job is not None
            and job_outcome(job) == "succeeded"
            and pushed_digest(self._pods_of(name), CONTAINER) == found
        ):
            await self._remember(request, found)
            return True
        return False

    def _untrusted(self, request: BuildRequest, found: str) -> str:
        """Report a tag whose digest this agent did not build; the warning for its runs, or
        `BuildFailed` when the admin chose `refuse`."""
        self.stats.untrusted += 1
        refuse = self.untrusted_tag == "refuse"
        message = (
            f"the registry's {request.image} points at {found}, which this agent did not build"
            " (another build may have pushed it: Kaniko's RUN steps can use the push"
            " credential; see docs/builds.md, 'Image trust')"
        )
        log.warning("untrusted image tag: %s; %s", message, "refusing the run" if refuse
                    else "building it again")  # fmt: skip
        if self.on_untrusted is not None:
            self.on_untrusted(request.image, found, "refused" if refuse else "rebuilt")
        if refuse:
            raise BuildFailed(
                f"{message}; the run is refused (builder.trust.untrusted_tag is refuse)",
                explained=True,
            )
        return f"{message}; it was built again and the run uses the new digest"

    async def _remember(self, request: BuildRequest, digest: str) -> None:
        try:
            await self.record.add(request.tag, digest)
        except RecordUnavailable as exc:
            # The run is still pinned to the digest it built; the next run builds again.
            log.warning("built %s (%s) but did not record it: %s", request.image, digest, exc)

    async def _build_and_push(self, request: BuildRequest, tree: Path) -> str:
        """Build with Kaniko; the digest it pushed, recorded before the Job is deleted."""
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
            await self._check_docker_config()
            job = kaniko_job(request, self.destination, context_uri, self.settings)
            job_name = job["metadata"]["name"]
            created = await self.kube.create(job, self.settings.namespace)
            await self._wait(created.obj, request)
            digest = await self._pushed(job_name, request)
            await self._remember(request, digest)
            log.info("built %s (%s)", request.image, digest)
            return digest
        except (ObjectStoreError, KubeError) as exc:
            raise BuildFailed(f"building {request.image}: {exc}") from exc
        finally:
            await self._clean_up(job_name, object_name if uploaded else None)

    async def _check_docker_config(self) -> None:
        """Fail at once when the registry's docker config Secret does not exist.

        The Job mounts it as a volume, and kubelet's volume manager
        (`pkg/volume/secret/secret.go`, `SetUpAt`) answers a missing one with `FailedMount`
        Events on a pod that stays ContainerCreating: nothing on the pod or the Job would
        end the build before `activeDeadlineSeconds`. The chart grants `get` on that one
        Secret's name; without the grant (403) the check is skipped, not the build.
        """
        name = self.settings.docker_config_secret
        if not name:
            return
        namespace = self.settings.namespace
        try:
            await self.kube.get(SECRETS, namespace, name)
        except KubeNotFound:
            raise BuildFailed(
                f"the build cannot start: Secret {name} (the registry's docker config Secret,"
                f" kaniko_docker_config_secret) is missing in namespace {namespace}; create it"
                " or change the setting",
                explained=True,
            ) from None
        except KubeForbidden as exc:
            log.debug("cannot read Secret %s/%s (%s); building anyway", namespace, name, exc)

    async def _wait(self, job: Mapping[str, Any], request: BuildRequest) -> None:
        """Until the Job completes (return) or fails (`BuildFailed`), as the informers see it.

        Woken by any event of the Job or its pods; also after `recheck_in` when a pod is
        unschedulable (it stays Pending without events while its deadline passes).
        """
        assert self._jobs is not None, "build() checked that the builder was entered"
        name = job["metadata"]["name"]
        ns = self.settings.namespace
        limit = self.settings.deadline_seconds + 120
        waiter = _Waiter()
        self._waiters[name] = waiter
        try:
            # The last resort: informers reconnect and relist, so only a cluster that never
            # reports an outcome (or an API server that stays away) gets here.
            async with asyncio.timeout(limit):
                while True:
                    waiter.changed.clear()
                    status = self._status(name, job, waiter)
                    if status.state is BuildState.SUCCEEDED:
                        return
                    if status.state is BuildState.FAILED:
                        tail = await self._log_tail(name) if status.ran else ""
                        raise BuildFailed(
                            f"building {request.image}: {status.reason}",
                            tail,
                            explained=status.explained,
                        )
                    with contextlib.suppress(TimeoutError):
                        recheck = None if status.recheck_in is None else status.recheck_in + 0.01
                        async with asyncio.timeout(recheck):
                            await waiter.changed.wait()
        except TimeoutError:
            raise BuildFailed(
                f"building {request.image}: no outcome from Job {ns}/{name} in {limit}s",
                await self._log_tail(name),
            ) from None
        finally:
            if self._waiters.get(name) is waiter:
                del self._waiters[name]

    async def _pushed(self, job_name: str, request: BuildRequest) -> str:
        """The digest the Kaniko container wrote to its termination message. The informer's
        pod may lag the Job's completion; the API server's pods are asked then."""
        digest = pushed_digest(self._pods_of(job_name), CONTAINER)
        if digest is None:
            listed = await self.kube.list(
                PODS, self.settings.namespace, label_selector=f"job-name={job_name}"
            )
            digest = pushed_digest(listed.items, CONTAINER)
        if digest is None:
            raise BuildFailed(
                f"building {request.image}: the Kaniko Job succeeded but its container reported"
                " no image digest (its --digest-file, the termination message); the image is not"
                " run unpinned. Check that builder.kaniko-image is Kaniko's executor",
                explained=True,
            )
        return digest

    def _status(self, name: str, created: Mapping[str, Any], waiter: _Waiter) -> BuildStatus:
        assert self._jobs is not None
        ns = self.settings.namespace
        job: Mapping[str, Any] | None = self._jobs.get(ns, name)
        if job is None or waiter.deleted:
            if waiter.seen or waiter.deleted:
                raise BuildFailed(f"Job {ns}/{name} was deleted")
            job = created  # the informer has not caught up with the create yet
        else:
            waiter.seen = True
        pods = self._pods_of(name)
        now = asyncio.get_running_loop().time()
        pending = unschedulable_pods(pods)
        since = waiter.unschedulable_since
        for pod in list(since):
            if pod not in pending:
                del since[pod]  # scheduled (or gone): a later Pending counts afresh
        for pod in pending:
            since.setdefault(pod, now)
        waited = {pod: now - t for pod, t in since.items()}
        return assess_build(job, pods, waited, self.unschedulable_timeout, self._context)

    def _pods_of(self, job_name: str) -> list[Mapping[str, Any]]:
        assert self._pods is not None
        return [p for p in self._pods.cache.values() if owner_job(p) == job_name]

    async def _on_event(self, event: InformerEvent) -> None:
        """Wake the build waiting on the Job this event is about (if any); nothing else."""
        obj = event.obj
        name = _name(obj) if event.resource == JOBS else owner_job(obj)
        waiter = self._waiters.get(name) if name else None
        if waiter is not None:
            if event.resource == JOBS and event.type == "DELETED":
                waiter.deleted = True
            waiter.changed.set()

    async def _log_tail(self, job_name: str) -> str:
        if self.log_tail_lines <= 0:
            return ""
        try:
            pods: list[Mapping[str, Any]] = self._pods_of(job_name) if self._pods else []
            if not pods:
                pods[:] = (
                    await self.kube.list(
                        PODS, self.settings.namespace, label_selector=f"job-name={job_name}"
                    )
                ).items
            if not pods:
                return ""
            latest = max(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
            pod = latest["metadata"]["name"]
            return await self.kube.pod_log_tail(
                self.settings.namespace, pod, CONTAINER, self.log_tail_lines
            )
        except KubeError as exc:
            return f"(the build log could not be read: {exc})"

    async def _clean_up_leftover(self, request: BuildRequest) -> None:
        """The build Job and context of an agent killed while it built this image: Kaniko
        pushed, so the image exists and the build is skipped, but nobody else would ever
        delete them (the Job's TTL goes only after the 10 minute `ttlSecondsAfterFinished`
        where a TTL controller runs; the context never). Found by `bench chaos`.

        The context is deleted even when no Job is left: the kill may have fallen between
        the Job's delete and the context's (`_clean_up` deletes in that order). A delete of
        a missing object is not an error, and nothing else reads `<tag>.tgz` once the image
        exists, so the one extra request per skipped build is the whole cost."""
        assert self._jobs is not None, "build() checked that the builder was entered"
        name = kaniko_job_name(self.settings.builder.build_job_name, request.tag)
        job: str | None = None
        if self._jobs.get(self.settings.namespace, name) is not None:
            log.info("deleting build Job %s left by an earlier build of %s", name, request.image)
            job = name
        await self._clean_up(job, f"{request.tag}.tgz")

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


def owner_job(pod: Mapping[str, Any]) -> str | None:
    """The name of the Job that owns `pod` (its controller reference, else `job-name`)."""
    meta = Meta(pod)
    return (
        meta.controller("Job")
        or meta.label("batch.kubernetes.io/job-name")
        or meta.label("job-name")
    )


def _name(obj: Mapping[str, Any]) -> str | None:
    return Meta(obj).name or None
