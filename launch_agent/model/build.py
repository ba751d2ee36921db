"""Image builds, the pure part: what to build, its tag, where it goes, and start-up checks.

A build is described by a `BuildRequest`: the source resolved to an exact digest (a git commit,
a W&B code artifact's digest, or a base image), the Dockerfile text, build arguments and the
destination repository. The image tag is a hash of exactly those inputs, so the same job built
twice yields the same tag, and the registry's "does this tag exist" answers "was this built".

W&B's agent hashes `"<job artifact name>:v<version>" + Dockerfile` and keeps 8 hex digits; here
the source is the resolved digest (a moved git branch is a new image, a re-logged identical job
is not), build arguments are part of the hash, and the tag keeps 20 hex digits (80 bits), so two
different builds colliding is not a practical concern.

`builder_problems` checks the `builder` block at start-up (W&B's agent only finds a missing
`build-context-store` at the first upload) and returns every problem with its config path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from launch_agent.model.config import BuilderConfig, RegistryConfig

TAG_LENGTH = 20


class SourceKind(StrEnum):
    GIT = "git"
    ARTIFACT = "artifact"
    IMAGE = "image"


@dataclass(frozen=True, slots=True)
class BuildSource:
    """Where the code comes from, pinned: `digest` is a commit sha or an artifact digest."""

    kind: SourceKind
    uri: str
    digest: str

    def __post_init__(self) -> None:
        if not self.digest:
            raise ValueError(f"{self.kind} source {self.uri!r} has no digest: resolve it first")


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """One image to build for one run (other runs needing the same tag share the build)."""

    run_id: str
    source: BuildSource
    dockerfile: str
    destination: str
    build_args: tuple[tuple[str, str], ...] = ()
    # The agent's name and the run queue item, stamped on the build Job as labels.
    agent: str = "launch-agent"
    run_queue_item: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return image_tag(self.source.digest, self.dockerfile, dict(self.build_args))

    @property
    def image(self) -> str:
        return f"{self.destination}:{self.tag}"


def image_tag(source_digest: str, dockerfile: str, build_args: Mapping[str, str]) -> str:
    """A deterministic tag: the same inputs give the same tag, any change gives a new one.

    Canonical JSON (sorted keys) keeps the hash independent of the order build args are given
    in and free of ambiguity between fields (no concatenation of free text).
    """
    canonical = json.dumps(
        {
            "source": source_digest,
            "dockerfile": dockerfile,
            "args": dict(sorted(build_args.items())),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:TAG_LENGTH]


# --- destinations (registries) ----------------------------------------------------------------


class RegistryKind(StrEnum):
    ECR = "ecr"
    GAR = "gar"
    ACR = "acr"
    GENERIC = "generic"


@dataclass(frozen=True, slots=True)
class Destination:
    """A parsed destination repository: `host/repository` without a tag."""

    kind: RegistryKind
    host: str
    repository: str
    region: str = ""
    account: str = ""

    @property
    def uri(self) -> str:
        return f"{self.host}/{self.repository}"


_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_GAR = re.compile(r"^(?P<region>[a-z0-9-]+)-docker\.pkg\.dev$")
_ACR = re.compile(r"^[a-z0-9]{5,50}\.azurecr\.io$")
_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?$")
# The distribution spec's repository name grammar.
_REPO = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)


class DestinationError(ValueError):
    """An unsupported or malformed destination; the message says what is wrong."""


def parse_destination(uri: str) -> Destination:
    """Parse `[https://]host[:port]/repo/path`; raise `DestinationError` naming the problem."""
    text = uri.strip()
    if text.startswith("https://"):
        text = text[len("https://") :]
    elif "://" in text:
        raise DestinationError(f"{uri!r}: only https registries are supported")
    host, _, repository = text.partition("/")
    if not host or not repository:
        raise DestinationError(
            f"{uri!r}: expected host/repository (e.g. registry.example/ml/train)"
        )
    if not _HOST.match(host):
        raise DestinationError(f"{uri!r}: {host!r} is not a registry host name")
    if "@" in repository or ":" in repository:
        raise DestinationError(f"{uri!r}: give the repository without a tag or digest")
    if not _REPO.match(repository):
        raise DestinationError(
            f"{uri!r}: {repository!r} is not a repository name (lower-case path components)"
        )
    if host in ("gcr.io", "us.gcr.io", "eu.gcr.io", "asia.gcr.io"):
        raise DestinationError(
            f"{uri!r}: Container Registry (gcr.io) is shut down; use Artifact Registry"
            " (REGION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE)"
        )
    if m := _ECR.match(host):
        return Destination(RegistryKind.ECR, host, repository, m["region"], m["account"])
    if m := _GAR.match(host):
        if repository.count("/") < 2:
            raise DestinationError(f"{uri!r}: Artifact Registry paths are PROJECT/REPOSITORY/IMAGE")
        return Destination(
            RegistryKind.GAR, host, repository, m["region"], repository.split("/")[0]
        )
    if _ACR.match(host):
        return Destination(RegistryKind.ACR, host, repository)
    if host.endswith((".amazonaws.com", ".pkg.dev", ".azurecr.io")):
        raise DestinationError(f"{uri!r}: {host!r} looks like a cloud registry but is malformed")
    return Destination(RegistryKind.GENERIC, host, repository)


# --- build context store --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """`s3://bucket/prefix`, `gs://bucket/prefix` or an Azure Blob container URL
    (`https://ACCOUNT.blob.core.windows.net/CONTAINER/prefix`, scheme `azblob`, `bucket` the
    container); objects go under the prefix."""

    scheme: str
    bucket: str
    prefix: str
    account: str = ""

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def uri(self, name: str) -> str:
        if self.scheme == AZURE:
            # The form Kaniko reads an Azure Blob context from (with AZURE_STORAGE_ACCESS_KEY).
            return f"https://{self.account}{AZURE_HOST}/{self.bucket}/{self.key(name)}"
        return f"{self.scheme}://{self.bucket}/{self.key(name)}"


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_AZURE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_AZURE_CONTAINER = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
AZURE = "azblob"
AZURE_HOST = ".blob.core.windows.net"
STORE_SCHEMES = ("s3", "gs", "https (Azure Blob)")
_EXPECTED = (
    "expected s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or"
    " https://ACCOUNT.blob.core.windows.net/CONTAINER[/PREFIX]"
)


def parse_store(uri: str) -> StoreLocation:
    """Parse a build-context-store URI; raise `ValueError` naming the problem."""
    scheme, sep, rest = uri.strip().partition("://")
    if not sep:
        raise ValueError(f"{uri!r}: {_EXPECTED}")
    if scheme == "https":
        return _parse_azure(uri, rest)
    if scheme not in ("s3", "gs"):
        raise ValueError(f"{uri!r}: scheme {scheme!r} is not supported ({_EXPECTED})")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ValueError(f"{uri!r}: {bucket!r} is not a valid bucket name")
    return StoreLocation(scheme, bucket, prefix.strip("/"))


def _parse_azure(uri: str, rest: str) -> StoreLocation:
    # W&B's form (wandb/sdk/launch/environment/azure_environment.py, `verify_storage_uri`).
    host, _, path = rest.partition("/")
    if not host.endswith(AZURE_HOST):
        raise ValueError(f"{uri!r}: an https store must be an Azure Blob URL ({_EXPECTED})")
    account = host[: -len(AZURE_HOST)]
    if not _AZURE_ACCOUNT.match(account):
        raise ValueError(f"{uri!r}: {account!r} is not a valid Azure storage account name")
    container, _, prefix = path.partition("/")
    if not _AZURE_CONTAINER.match(container):
        raise ValueError(f"{uri!r}: {container!r} is not a valid Azure Blob container name")
    return StoreLocation(AZURE, container, prefix.strip("/"), account)


# --- start-up validation ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuildProblem:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def destination_uri(builder: BuilderConfig, registry: RegistryConfig | None) -> str | None:
    """`builder.destination`, else W&B's deprecated `registry.uri`."""
    if builder.destination:
        return builder.destination
    return registry.uri if registry is not None else None


def builder_problems(
    builder: BuilderConfig | None, registry: RegistryConfig | None = None, *, pvc: bool = False
) -> list[BuildProblem]:
    """Every problem with a Kaniko `builder` block; empty when builds can run (or are off).

    `pvc`: contexts go to a PVC (`kaniko_pvc_name`), so no context store is needed.
    """
    if builder is None or builder.type != "kaniko":
        return []
    problems: list[BuildProblem] = []
    if not builder.build_context_store:
        if not pvc:
            problems.append(
                BuildProblem(
                    "builder.build-context-store",
                    "required for Kaniko builds (s3://, gs:// or an Azure Blob https:// URL;"
                    " or kaniko_pvc_name)",
                )
            )
    elif not pvc:  # with a PVC the store is not used (as in W&B's kaniko_builder.py)
        try:
            parse_store(builder.build_context_store)
        except ValueError as exc:
            problems.append(BuildProblem("builder.build-context-store", str(exc)))
    dest = destination_uri(builder, registry)
    if not dest:
        problems.append(
            BuildProblem("builder.destination", "required for Kaniko builds (the image repository)")
        )
    else:
        try:
            parse_destination(dest)
        except DestinationError as exc:
            where = "builder.destination" if builder.destination else "registry.uri"
            problems.append(BuildProblem(where, str(exc)))
    if (builder.secret_name is None) != (builder.secret_key is None):
        missing = "secret-key" if builder.secret_key is None else "secret-name"
        problems.append(
            BuildProblem(f"builder.{missing}", "secret-name and secret-key must be set together")
        )
    problems.extend(_overlay_problems(builder.kaniko_config or {}))
    return problems


def _overlay_problems(overlay: Mapping[str, object]) -> list[BuildProblem]:
    base = "builder.kaniko-config"
    spec = overlay.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if containers is None:
        return []
    path = f"{base}.spec.template.spec.containers"
    if not isinstance(containers, list) or len(containers) > 1:
        return [BuildProblem(path, "at most one container (the Kaniko executor) may be given")]
    problems: list[BuildProblem] = []
    container = containers[0] if containers else {}
    args = container.get("args", []) if isinstance(container, Mapping) else []
    if not isinstance(args, list):
        return [BuildProblem(f"{path}[0].args", "must be a list of --flag=value strings")]
    for i, arg in enumerate(args):
        if not isinstance(arg, str) or not arg.startswith("--"):
            problems.append(BuildProblem(f"{path}[0].args[{i}]", f"{arg!r} is not a --flag"))
    return problems


# --- generated Dockerfiles --------------------------------------------------------------------

# What may stand in the generated text, so no value can end a line, continue one (a trailing
# `\`), or be expanded by the Dockerfile's own `$VAR` substitution: a Docker reference's
# characters for FROM, an absolute path's for WORKDIR; the entry point is a JSON array (ASCII,
# every control character and quote escaped), which ENTRYPOINT takes without substitution.
_FROM = re.compile(r"[A-Za-z0-9._/:@+-]{1,512}")
_WORKDIR = re.compile(r"/[A-Za-z0-9._/-]{0,255}")


def python_dockerfile(
    base_image: str,
    entrypoint: list[str],
    *,
    requirements: bool = False,
    pyproject: bool = False,
    workdir: str = "/src",
) -> str:
    """The Dockerfile for a Python job without one of its own.

    Dependencies are installed before the code is copied, so a code-only change reuses the
    cached dependency layer (Kaniko's `--cache-repo`). `requirements.txt` wins over
    `pyproject.toml` when both exist, as W&B's agent does.
    """
    if not _FROM.fullmatch(base_image):
        raise ValueError(f"{base_image!r} is not an image reference")
    if not _WORKDIR.fullmatch(workdir):
        raise ValueError(f"{workdir!r} is not an absolute path of [A-Za-z0-9._/-]")
    if not entrypoint or not all(isinstance(word, str) for word in entrypoint):
        raise ValueError("a generated Dockerfile needs an entry point (a list of strings)")
    lines = [
        f"FROM {base_image}",
        f"WORKDIR {workdir}",
        "ENV PYTHONUNBUFFERED=1",
    ]
    if requirements:
        lines += [
            "COPY requirements.txt ./",
            "RUN pip install --no-cache-dir -r requirements.txt",
        ]
    elif pyproject:
        lines += ["COPY pyproject.toml ./"]
    lines.append("COPY . ./")
    if pyproject and not requirements:
        lines.append("RUN pip install --no-cache-dir .")
    lines.append(
        "ENTRYPOINT " + json.dumps(entrypoint, ensure_ascii=True).replace("\x7f", "\\u007f")
    )
    return "\n".join(lines) + "\n"
