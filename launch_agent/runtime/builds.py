"""Builds in the agent: a run whose job has no image gets one from the process's `ImageBuilder`.

The dispatcher calls `BuildService.image_for(item, run)` for a run that names a job and no
image. The service reads the job artifact's `wandb-job.json` (through the wandb SDK, off the
loop), maps its source to a `BuildSpec` (`spec_for`, pure), and awaits the one `ImageBuilder`
of the process, which shares a build between every run that needs the same image and skips it
when the registry already has the image. The result is the image URI the workload is rendered
with, or None when the item was failed (or left for W&B to offer again).

Why it looks like this:

- **The poller is not held.** The dispatcher already runs in its own task per item; a build
  takes minutes and only that item's task waits for it.
- **Shutdown does not wait for builds.** The wait races the agent's `stopping` event: on stop
  the item is left un-acked (W&B offers it again after its lease, and the next start finds the
  image in the registry if the build had finished) and the service returns at once. The build
  itself belongs to the `ImageBuilder`, whose `aclose` (on the agent's exit stack) cancels it,
  deletes the Kaniko Job and the context object.
- **A long build outlives the item's lease.** W&B then offers the item again, possibly to this
  agent: a second dispatch of an item this process is already building returns at once and
  the first one creates and acks (`_active`). Another replica that pops it builds the same tag
  (the Kaniko Job name is derived from it, so it adopts the same Job) and its create 409s onto
  the same workload.
- **Failures are the item's, outages are not.** A job artifact W&B says does not exist, or
  that describes no buildable source, fails the item at stage `agent`; W&B not answering is
  retried (`job_info`) and, when the agent stops first, leaves the item for the next start;
  a failed build (`BuildFailed`) fails it at stage `build` with the reason and the tail of
  Kaniko's log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from launch_agent.adapters.bounded import MIB, read_text_file
from launch_agent.adapters.builder import BuildFailed, BuildSpec, Credentials, ImageBuilder
from launch_agent.adapters.digest_record import DigestRecord, RecordUnavailable
from launch_agent.adapters.job_artifact import (
    JobArtifactError,
    JobArtifactUnavailable,
    job_info,
)
from launch_agent.adapters.kube import KubeClient, KubeForbidden, KubeUnauthorized
from launch_agent.adapters.object_store import ContextStore, ObjectStore, PvcStore
from launch_agent.adapters.registry import RegistryClient, docker_config_auths
from launch_agent.adapters.tls import CABundleError, client_ssl_context
from launch_agent.adapters.wandb_client import RunQueueItem
from launch_agent.aio import race
from launch_agent.model.build import (
    DestinationError,
    SourceKind,
    builder_problems,
    destination_uri,
    parse_destination,
)
from launch_agent.model.build_source import (
    DEFAULT_SCHEMES,
    SourceError,
    check_artifact_name,
    check_entrypoint,
    check_git_url,
    check_image,
    check_ref,
    check_relative_path,
)
from launch_agent.model.config import AgentConfig, ImageTrustConfig
from launch_agent.model.run_item import RunItem, shown_item_id
from launch_agent.model.safe_load import load_json
from launch_agent.render.kaniko import KanikoSettings
from launch_agent.render.naming import derived_run_id
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.reporter import Reporter
from launch_agent.runtime.startup import StartupError

log = logging.getLogger(__name__)

DEFAULT_PYTHON = "3.11"
# A docker config.json with a few registries' credentials is a few KiB.
MAX_DOCKER_CONFIG = MIB
_RUNTIME = re.compile(r"^(\d{1,2}\.\d{1,3})(?!\d)")
JobReader = Callable[[str], Coroutine[Any, Any, Mapping[str, Any]]]


class JobSpecError(ValueError):
    """`wandb-job.json` (or the run spec) describes no buildable source; says which key."""


# --- the pure part: job artifact + run → BuildSpec ---------------------------------------------


def _text(mapping: Mapping[str, Any], key: str, path: str) -> str | None:
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise JobSpecError(f"{path}.{key}: must be a string, not {type(value).__name__}")
    return value


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise JobSpecError(f"{path}: must be a mapping, not {type(value).__name__}")
    return value


def base_image_for(info: Mapping[str, Any]) -> str:
    """`python:<runtime>-slim` from the job's recorded Python version (W&B's `runtime`).

    Only `MAJOR.MINOR` digits are taken from the submitter's text, so nothing else of it
    reaches the generated Dockerfile's FROM line.
    """
    runtime = info.get("runtime")
    match = _RUNTIME.match(runtime) if isinstance(runtime, str) else None
    return f"python:{match.group(1) if match else DEFAULT_PYTHON}-slim"


def _dockerfile_path(source: Mapping[str, Any], where: str) -> str | None:
    dockerfile = _text(source, "dockerfile", where)
    context = _text(source, "build_context", where)
    if context is not None:
        context = check_relative_path(context, f"{where}.build_context", allow_dot=True)
    if context is not None and context != ".":
        # The context is the whole source tree here; a sub-directory context would make the
        # Dockerfile's COPY paths point elsewhere, so it is refused rather than mis-built.
        raise JobSpecError(
            f"{where}.build_context: {context!r} is not supported (the build"
            " context is the root of the source); move the Dockerfile's paths to the root"
        )
    if dockerfile is None:
        return None
    return check_relative_path(dockerfile, f"{where}.dockerfile")


def spec_for(
    run: RunItem,
    info: Mapping[str, Any],
    job: str,
    allowed_schemes: Sequence[str] = DEFAULT_SCHEMES,
) -> BuildSpec:
    """What to build for `run`, from its job's `wandb-job.json`; `JobSpecError` if nothing.

    Every submitter value of the build path is checked here (`build_source`), so a refused
    one fails the item with its runSpec or job artifact path before any git or file access.
    """
    try:
        return _spec_for(run, info, job, tuple(allowed_schemes))
    except SourceError as exc:
        raise JobSpecError(str(exc)) from None


def _spec_for(
    run: RunItem, info: Mapping[str, Any], job: str, allowed: tuple[str, ...]
) -> BuildSpec:
    check_artifact_name(job, "runSpec.job")
    where = f"job artifact {job}: source"
    source_type = info.get("source_type")
    source = info.get("source")
    if not isinstance(source, Mapping):
        raise JobSpecError(f"job artifact {job}: wandb-job.json has no `source` object")
    run_id = run.run_id or derived_run_id(run.run_queue_item_id)
    spec = _mapping(run.raw.get("runSpec"), "runSpec")
    overrides = _mapping(spec.get("overrides"), "runSpec.overrides")
    override_dockerfile = _text(overrides, "dockerfile", "runSpec.overrides")
    if override_dockerfile is not None:
        override_dockerfile = check_relative_path(
            override_dockerfile, "runSpec.overrides.dockerfile"
        )
    if run.entry_point:
        entrypoint = check_entrypoint(list(run.entry_point), "runSpec.overrides.entry_point")
    else:
        entrypoint = check_entrypoint(source.get("entrypoint"), f"{where}.entrypoint")
    common: dict[str, Any] = {
        "override_dockerfile": override_dockerfile,
        "base_image": base_image_for(info),
        "entrypoint": entrypoint,
        "run_queue_item": run.run_queue_item_id,
    }
    if source_type == "image":
        image = _text(source, "image", where)
        if image is None:
            raise JobSpecError(f"{where}.image is missing")
        return BuildSpec(run_id, SourceKind.IMAGE, check_image(image, f"{where}.image"))
    if source_type == "repo":
        git = source.get("git")
        if not isinstance(git, Mapping):
            raise JobSpecError(f"{where}.git is missing")
        # `runSpec.git` ({repo, version}) overrides the job's remote and commit, as in W&B.
        run_git = _mapping(spec.get("git"), "runSpec.git")
        remote, remote_at = _text(run_git, "repo", "runSpec.git"), "runSpec.git.repo"
        if remote is None:
            remote, remote_at = _text(git, "remote", f"{where}.git"), f"{where}.git.remote"
        commit, commit_at = _text(run_git, "version", "runSpec.git"), "runSpec.git.version"
        if commit is None:
            commit, commit_at = _text(git, "commit", f"{where}.git"), f"{where}.git.commit"
        if remote is None:
            raise JobSpecError(f"{where}.git.remote is missing")
        url = check_git_url(remote, remote_at, allowed)
        ref = check_ref(commit, commit_at)
        return BuildSpec(
            run_id,
            SourceKind.GIT,
            url.url,
            ref,
            dockerfile=_dockerfile_path(source, where),
            **common,
        )
    if source_type == "artifact":
        artifact = _text(source, "artifact", where)
        if artifact is None:
            raise JobSpecError(f"{where}.artifact is missing")
        artifact = check_artifact_name(artifact, f"{where}.artifact")
        return BuildSpec(
            run_id,
            SourceKind.ARTIFACT,
            artifact,
            dockerfile=_dockerfile_path(source, where),
            **common,
        )
    raise JobSpecError(
        f"job artifact {job}: wandb-job.json source_type {source_type!r} is not one of repo,"
        " artifact, image"
    )


def build_failure_message(job: str, exc: BuildFailed) -> str:
    """What W&B shows for a failed build: what failed, what to do, then Kaniko's last lines."""
    if exc.explained:
        advice = ""  # the reason names the setting, Secret or limit to change
    elif exc.log_tail:
        advice = "check the job's Dockerfile and dependencies in the build log below"
    elif exc.reason.startswith("preparing the build context"):
        advice = "check the job's source: repository URL, commit and git credentials, or artifact"
    else:
        advice = "check the agent's log and the events in the Kaniko namespace"
    text = f"building the image for job {job} failed: {exc.reason}"
    text += f" ({advice})" if advice else ""
    if exc.log_tail:
        text += f"\n--- build log (tail) ---\n{exc.log_tail}"
    return text


# --- the service -------------------------------------------------------------------------------


class BuildService:
    """The agent's builds: one `ImageBuilder`, the job reader, and the item failures."""

    def __init__(
        self,
        builder: ImageBuilder,
        reporter: Reporter,
        stopping: asyncio.Event,
        read_job: JobReader,
        allowed_schemes: Sequence[str] = DEFAULT_SCHEMES,
    ) -> None:
        self.builder = builder
        self.reporter = reporter
        self.stopping = stopping
        self.read_job = read_job
        self.allowed_schemes = tuple(allowed_schemes)
        self._active: set[str] = set()

    async def image_for(self, item: RunQueueItem, run: RunItem) -> str | None:
        """The image to run `run` with; None if the item was failed or is left for later."""
        assert run.job is not None
        if item.id in self._active:
            log.info(
                "item %s offered again while its image builds: the first dispatch owns it",
                shown_item_id(item.id),
            )
            return None
        self._active.add(item.id)
        try:
            return await self._image(item, run, run.job)
        finally:
            self._active.discard(item.id)

    async def _image(self, item: RunQueueItem, run: RunItem, job: str) -> str | None:
        try:
            # The name reaches the wandb SDK first: it is checked before that read too.
            check_artifact_name(job, "runSpec.job")
        except SourceError as exc:
            await self.reporter.fail(
                item.id, f"cannot build this run: {exc}", stage="agent", reason="job"
            )
            return None
        try:
            # The read retries through a W&B outage (`job_info`); one SDK read in flight can
            # take a minute, which shutdown does not wait for.
            read = await race(self.read_job(job), self.stopping, name=f"job-read {item.id}")
            if read is None:
                log.info("stopping: item %s is left for the next start", shown_item_id(item.id))
                return None
            spec = spec_for(run, read.result(), job, self.allowed_schemes)
        except JobArtifactUnavailable as exc:
            # W&B did not answer: not the item's fault; it is offered again after its lease.
            log.warning("item %s left for a later pop: %s", shown_item_id(item.id), exc)
            return None
        except (JobArtifactError, JobSpecError) as exc:
            await self.reporter.fail(
                item.id, f"cannot build this run: {exc}", stage="agent", reason="job"
            )
            return None
        if spec.source is SourceKind.IMAGE:
            return spec.uri
        build = asyncio.create_task(self.builder.build(spec), name=f"build-wait {item.id}")
        stop = asyncio.create_task(self.stopping.wait(), name=f"build-stop {item.id}")
        try:
            await asyncio.wait({build, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Cancelling this caller's wait leaves the shared build to the builder (shielded);
            # the builder's aclose cancels and cleans it up when the agent shuts down.
            for task in (build, stop):
                task.cancel()
            await asyncio.gather(build, stop, return_exceptions=True)
        if not build.done() or build.cancelled():
            log.info(
                "stopping: the build for item %s is abandoned; W&B offers it again",
                shown_item_id(item.id),
            )
            return None
        failure = build.exception()
        if isinstance(failure, BuildFailed):
            message = build_failure_message(job, failure)
            await self.reporter.fail(item.id, message, stage=failure.stage, reason="build")
            return None
        built = build.result()  # raises anything else: a bug, logged by the poller
        for warning in built.warnings:
            # A poisoned tag: every run that waited for this build hears of it in W&B.
            self.reporter.warn(item.id, warning, "build")
        return built.image


# --- construction, once per process --------------------------------------------------------


def read_docker_config() -> dict[str, tuple[str, str]]:
    """Registry credentials for the existence check from `$DOCKER_CONFIG/config.json` (or
    `~/.docker/config.json`): the agent's pull credentials (blocking; run in the executor)."""
    folder = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    try:
        text = read_text_file(path, MAX_DOCKER_CONFIG, what="a docker config.json")
        data = load_json(text, source=str(path))
    except (OSError, ValueError) as exc:
        raise StartupError(f"{path}: not a readable docker config.json: {exc}") from exc
    if not isinstance(data, dict):
        raise StartupError(f"{path}: a docker config.json must be a JSON object")
    try:
        return docker_config_auths(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StartupError(f"{path}: auths: an entry's `auth` is not base64 user:password") from exc


def check_builder(config: AgentConfig) -> None:
    """`StartupError` naming every bad `builder` key (the CLI's config resolution reports the
    same with file:line; this covers an `AgentConfig` built in code)."""
    problems = builder_problems(
        config.builder, config.registry, pvc=config.kaniko_pvc_name is not None
    )
    if problems:
        raise StartupError(
            "the Kaniko builder is misconfigured: " + "; ".join(str(p) for p in problems)
        )


def record_location(config: AgentConfig) -> tuple[str, str]:
    """(namespace, name) of the build record ConfigMap (docs/builds.md, "Image trust")."""
    trust = config.builder.trust if config.builder is not None else ImageTrustConfig()
    namespace = trust.record_namespace or config.leader_election.namespace or config.namespaces[0]
    return namespace, trust.record_name or f"{config.agent_name}-image-digests"


async def open_record(config: AgentConfig, kube: KubeClient) -> DigestRecord:
    """The record of the digests this agent built, read once: missing RBAC stops the start
    with what to grant; an API server that does not answer is retried at the first build."""
    namespace, name = record_location(config)
    trust = config.builder.trust if config.builder is not None else ImageTrustConfig()
    record = DigestRecord(
        kube, namespace, name, agent=config.agent_name, max_entries=trust.max_record_entries
    )
    try:
        await record.load()
    except RecordUnavailable as exc:
        if isinstance(exc.__cause__, KubeForbidden | KubeUnauthorized):
            raise StartupError(
                f"{exc}: the agent's service account needs get and update on configmaps"
                f" {name} and create on configmaps in namespace {namespace}"
                " (the chart's Role <release>-build-record)"
            ) from None
        log.warning("%s; it is read again at the first build", exc)
    log.info("build record: %s, %d context hashes", record.where, len(record))
    return record


def _context_store(config: AgentConfig) -> tuple[ContextStore, str]:
    """Where build contexts go (a PVC, or an object store), and how to say so in the log."""
    builder_config = config.builder
    assert builder_config is not None
    pvc = config.kaniko_pvc_name
    if pvc is not None:
        return PvcStore(pvc, config.kaniko_pvc_mount_path), (
            f"PVC {pvc} (mounted at {config.kaniko_pvc_mount_path})"
        )
    assert builder_config.build_context_store is not None  # builder_problems checked it
    region = config.environment.region if config.environment else None
    store = ObjectStore(builder_config.build_context_store, region=region)
    return store, builder_config.build_context_store


async def _registry(config: AgentConfig) -> RegistryClient:
    assert config.builder is not None
    credentials = await asyncio.to_thread(read_docker_config)
    try:
        # 50 ms of CPU for the system roots: off the loop.
        trust = await asyncio.to_thread(client_ssl_context, configured=config.ca_bundle)
    except CABundleError as exc:
        raise StartupError(str(exc)) from None
    return RegistryClient(
        credentials, ssl_context=trust, max_response_bytes=config.builder.max_response_bytes
    )


async def open_builds(
    stack: AsyncExitStack,
    config: AgentConfig,
    kube: KubeClient,
    reporter: Reporter,
    stopping: asyncio.Event,
    *,
    metrics: Metrics | None = None,
) -> BuildService | None:
    """The process's build service when `builder.type` is `kaniko` (else None).

    Its clients (object store, registry) and the `ImageBuilder` live on `stack`, so they are
    closed, and builds in flight cancelled and cleaned up, when the agent stops.
    """
    check_builder(config)  # (a PVC replaces the context store: see check_builder)
    builder_config = config.builder
    if builder_config is None or builder_config.type != "kaniko":
        return None
    pvc = config.kaniko_pvc_name
    try:
        destination = parse_destination(destination_uri(builder_config, config.registry) or "")
    except DestinationError as exc:  # pragma: no cover - builder_problems reports it first
        raise StartupError(f"builder.destination: {exc}") from exc
    store, where = _context_store(config)
    registry = await stack.enter_async_context(await _registry(config))
    record = await open_record(config, kube)
    settings = KanikoSettings(
        builder_config,
        config.kaniko_namespace or config.namespaces[0],
        config.kaniko_service_account,
        config.kaniko_docker_config_secret,
        pvc_claim=pvc,
        azure_key_secret=config.azure_storage_key_secret,
    )
    assert config.api_key is not None  # WandbClient.from_config checked it
    api_key = config.api_key.get_secret_value()
    builder = await stack.enter_async_context(
        ImageBuilder(
            kube,
            store,
            registry,
            settings,
            destination,
            agent=config.agent_name,
            credentials=Credentials(config.base_url, api_key, builder_config.git),
            log_tail_lines=config.tracking.log_tail_lines,
            unschedulable_timeout=config.tracking.unschedulable_timeout_seconds,
            observer=metrics.built if metrics is not None else None,
            record=record,
            untrusted_tag=builder_config.trust.untrusted_tag,
            on_untrusted=metrics.untrusted_tag if metrics is not None else None,
        )
    )

    async def read_job(name: str) -> Mapping[str, Any]:
        return await job_info(name, config.base_url, api_key, stop=stopping)

    log.info(
        "Kaniko builds: context in %s, images to %s, build Jobs in namespace %s",
        where,
        destination.uri,
        settings.namespace,
    )
    return BuildService(builder, reporter, stopping, read_job, builder_config.git.allowed_schemes)
