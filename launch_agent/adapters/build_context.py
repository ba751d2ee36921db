"""Build contexts: sources fetched and pinned, then packed as a deterministic tar.gz.

Sources are resolved to an exact digest before anything else, because the image tag is a hash
of it: a git repository to the commit sha `git rev-parse` prints after fetching the wanted ref,
a W&B code artifact to its content digest (downloaded through the wandb SDK).

The archive is reproducible: the same tree and Dockerfile give the same bytes, whatever the
checkout's timestamps, owners, umask or directory order. Entries are sorted; mtime is 0;
uid/gid 0 with empty owner names; modes are 0755 for directories and executables, 0644 for the
rest; symlinks are kept as links; `.git` is left out; the gzip header has mtime 0 and no file
name. The Dockerfile is written as `Dockerfile` at the root (Kaniko's `--dockerfile`).

Everything here blocks (git, file walks, compression, the SDK) and so runs in the default
executor through the async wrappers; nothing touches the event loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import io
import os
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from launch_agent.adapters.bounded import InputTooLarge, read_text_file
from launch_agent.model.build import python_dockerfile
from launch_agent.model.build_source import (
    GitUrl,
    SourceError,
    check_git_url,
    check_member_name,
    check_ref,
    check_relative_path,
    redact_url,
)
from launch_agent.model.config import GitSourceConfig

T = TypeVar("T")
SKIP_DIRS = frozenset({".git"})
GIT_TIMEOUT = 300.0


class ContextError(RuntimeError):
    """A source that cannot be fetched or a context that cannot be packed; says which and why."""


@dataclass(frozen=True, slots=True)
class PackedContext:
    path: Path
    size: int
    sha256: str
    files: int


async def _in_executor(fn: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


# --- packing ---------------------------------------------------------------------------------


def _walk(root: Path) -> Iterator[Path]:
    """Every file, link and directory below `root`, relative, in a fixed (sorted) order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        base = Path(dirpath)
        for name in sorted([*dirnames, *filenames]):
            yield (base / name).relative_to(root)


def _normalised(info: tarfile.TarInfo, executable: bool) -> tarfile.TarInfo:
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isdir() or executable:
        info.mode = 0o755
    else:
        info.mode = 0o644
    return info


def pack_context(root: Path, dockerfile: str, out: Path) -> PackedContext:
    """Pack `root` plus `dockerfile` into `out` (tar.gz), byte-for-byte reproducibly."""
    if not root.is_dir():
        raise ContextError(f"{root}: the source tree is not a directory")
    entries = sorted(_walk(root), key=lambda p: p.as_posix())
    count = 0
    with (
        out.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in entries:
            if rel.as_posix() == "Dockerfile":
                continue  # ours (possibly the same text) is added below
            path = root / rel
            st = path.lstat()
            info = tar.gettarinfo(str(path), arcname=rel.as_posix())
            info = _normalised(info, bool(st.st_mode & stat.S_IXUSR))
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
            count += 1
        data = dockerfile.encode("utf-8")
        info = _normalised(tarfile.TarInfo("Dockerfile"), executable=False)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        count += 1
    digest = hashlib.sha256()
    with out.open("rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    return PackedContext(out, out.stat().st_size, digest.hexdigest(), count)


async def pack(root: Path, dockerfile: str, out: Path) -> PackedContext:
    """`pack_context` in the executor."""
    return await _in_executor(functools.partial(pack_context, root, dockerfile, out))


# --- Dockerfile choice -------------------------------------------------------------------------


MAX_DOCKERFILE = 1 << 20
MAX_CREDENTIALS_FILE = 1 << 20


def _inside(root: Path, relative: str, what: str) -> Path:
    """`root/relative` as a regular file inside `root`, symbolic links resolved."""
    try:
        rel = check_relative_path(relative, what)
    except SourceError as exc:
        raise ContextError(str(exc)) from None
    path = root / rel
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(Path(os.path.realpath(root))):
        # A link in the submitter's tree (`Dockerfile -> /var/run/secrets/...`) must not make
        # the agent read its own files into the build.
        raise ContextError(f"{what}: {relative!r} links outside the source tree")
    if not real.is_file():
        raise ContextError(f"{what}: {relative!r} does not exist in the source tree")
    if real.stat().st_size > MAX_DOCKERFILE:
        raise ContextError(f"{what}: {relative!r} is larger than {MAX_DOCKERFILE} bytes")
    return real


def choose_dockerfile(
    root: Path,
    *,
    override: str | None = None,
    job_dockerfile: str | None = None,
    base_image: str | None = None,
    entrypoint: list[str] | None = None,
) -> str:
    """The Dockerfile text: `overrides.dockerfile`, else the job's own, else a generated one."""
    for relative, what in (
        (override, "runSpec.overrides.dockerfile"),
        (job_dockerfile, "wandb-job.json source.dockerfile"),
    ):
        if relative:
            path = _inside(root, relative, what)
            try:
                return read_text_file(path, MAX_DOCKERFILE, what="a Dockerfile")
            except InputTooLarge:  # grew after the size check in _inside
                raise ContextError(
                    f"{what}: {relative!r} is larger than {MAX_DOCKERFILE} bytes"
                ) from None
    if not base_image or not entrypoint:
        raise ContextError(
            "the job has no Dockerfile; a base image and an entry point are needed to generate one"
        )
    return python_dockerfile(
        base_image,
        entrypoint,
        requirements=(root / "requirements.txt").is_file(),
        pyproject=(root / "pyproject.toml").is_file(),
    )


async def dockerfile_for(root: Path, **kwargs: Any) -> str:
    return await _in_executor(functools.partial(choose_dockerfile, root, **kwargs))


# --- git sources -------------------------------------------------------------------------------

# Config for every git call: no local or command transports whatever the URL says, no
# credential helper unless the admin configured one for this host, no hooks, no submodules.
_GIT_CONFIG = (
    "-c", "protocol.file.allow=never",
    "-c", "protocol.ext.allow=never",
    "-c", "credential.helper=",
    "-c", "core.hooksPath=/dev/null",
    "-c", "fetch.recurseSubmodules=false",
    "-c", "advice.detachedHead=false",
)  # fmt: skip
# Variables git may inherit: they configure TLS trust and proxies, which the admin sets for
# the pod, and hold no W&B or cloud credential.
_PASSED_THROUGH = (
    "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO",
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
)  # fmt: skip


def _credential_origins(path: Path) -> set[tuple[str, str, int | None]]:
    """(scheme, host, port) of every line of a git-credentials file (secrets not kept)."""
    try:
        text = read_text_file(path, MAX_CREDENTIALS_FILE, what="a git-credentials file")
    except OSError as exc:
        raise ContextError(f"builder.git.credentials_file {path}: cannot be read: {exc}") from None
    origins: set[tuple[str, str, int | None]] = set()
    for line in text.splitlines():
        parts = urlsplit(line.strip())
        # git writes `host:port` as `host%3aport`; the user and password are not kept.
        host, _, port = unquote(parts.netloc.rpartition("@")[2]).partition(":")
        if parts.scheme and host:
            origins.add((parts.scheme.lower(), host.lower(), int(port) if port.isdigit() else None))
    return origins


def _read_only_store(path: Path) -> str:
    """A credential helper that answers `get` from the store file and ignores `store`/`erase`:
    git's own `store` helper rewrites the file after every fetch and deletes a line after one
    refused request, which would lose the admin's credentials to a transient 401."""
    store = f"git credential-store --file={shlex.quote(str(path))} get"
    return f'!f() {{ test "$1" = get && exec {store}; }}; f'


def git_invocation(
    url: GitUrl, settings: GitSourceConfig, home: Path
) -> tuple[list[str], dict[str, str]]:
    """The `git -c ...` prefix and the whole environment for fetching `url`.

    The environment is built, never copied from the agent's: git and its helpers (ssh, curl)
    would otherwise see WANDB_API_KEY, cloud credentials and the service account's token path.
    """
    config = list(_GIT_CONFIG)
    if settings.credentials_file and url.scheme in ("https", "http"):
        creds = Path(settings.credentials_file)
        if url.origin in _credential_origins(creds):
            config += ["-c", f"credential.helper={_read_only_store(creds)}"]
    env = {
        "PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ALLOW_PROTOCOL": ":".join(settings.allowed_schemes),
    }
    env.update({k: v for k in _PASSED_THROUGH if (v := os.environ.get(k))})
    if url.scheme == "ssh":
        # Without the admin's ssh config, BatchMode: never a prompt, never a password.
        env["GIT_SSH_COMMAND"] = settings.ssh_command or "ssh -o BatchMode=yes"
        env["GIT_SSH_VARIANT"] = "ssh"
    return config, env


def _git(args: list[str], cwd: Path, prefix: list[str], env: Mapping[str, str]) -> str:
    try:
        done = subprocess.run(
            ["git", *prefix, *args],
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ContextError(f"git {args[0]} timed out after {GIT_TIMEOUT:g}s") from None
    except FileNotFoundError:
        raise ContextError("the git command is not installed") from None
    if done.returncode != 0:
        tail = redact_url(" ".join(done.stderr.strip().splitlines()[-3:]))
        raise ContextError(f"git {args[0]} failed: {tail}")
    return done.stdout.strip()


def fetch_git(
    url: str,
    ref: str | None,
    dest: Path,
    settings: GitSourceConfig | None = None,
    *,
    where: str = "git source",
) -> str:
    """Check out `ref` (commit, branch or tag; default HEAD) of `url` into `dest`; the sha.

    `url` and `ref` are checked again here (`SourceError` -> `ContextError`) so no caller can
    hand git an option or a local path; every user value follows `--end-of-options`.
    """
    settings = settings or GitSourceConfig()
    try:
        remote = check_git_url(url, f"{where} repository", settings.allowed_schemes)
        ref = check_ref(ref, f"{where} ref")
    except SourceError as exc:
        raise ContextError(str(exc)) from None
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="git-home-") as home:
        prefix, env = git_invocation(remote, settings, Path(home))

        def git(*args: str) -> str:
            return _git(list(args), dest, prefix, env)

        git("init", "-q")
        git("remote", "add", "--end-of-options", "origin", remote.url)
        want = ref or "HEAD"
        try:
            git("fetch", "-q", "--depth", "1", "--end-of-options", "origin", want)
            # Our own values (FETCH_HEAD, a sha rev-parse printed); `--` ends the revision.
            git("checkout", "-q", "FETCH_HEAD", "--")
        except ContextError:
            # Servers that cannot fetch one ref shallowly (dumb HTTP, a bare sha without
            # allowReachableSHA1InWant): fetch every branch and tag, then find `want` there.
            git("fetch", "-q", "--tags", "--end-of-options", "origin",
                "+refs/heads/*:refs/remotes/origin/*")  # fmt: skip
            if ref is None:
                git("remote", "set-head", "origin", "--auto")
                candidates = ["origin/HEAD"]
            else:
                candidates = [f"origin/{ref}", ref]
            for candidate in candidates:
                try:
                    sha = git("rev-parse", "--verify", "-q", "--end-of-options",
                              f"{candidate}^{{commit}}")  # fmt: skip
                except ContextError:
                    continue
                git("checkout", "-q", sha, "--")
                break
            else:
                raise ContextError(
                    f"{redact_url(remote.url)}: {want!r} is not a commit, branch or tag there"
                ) from None
        return git("rev-parse", "HEAD")


async def resolve_git(
    url: str,
    ref: str | None,
    dest: Path,
    settings: GitSourceConfig | None = None,
    *,
    where: str = "git source",
) -> str:
    """`fetch_git` in the executor; the exact commit sha."""
    call = functools.partial(fetch_git, url, ref, dest, settings, where=where)
    return await _in_executor(call)


# --- W&B code artifacts -----------------------------------------------------------------------


# The chart's /tmp is a 1 GiB emptyDir; a larger code artifact could not be packed anyway.
MAX_ARTIFACT_BYTES = 1 << 30
MAX_ARTIFACT_FILES = 100_000


def artifact_problems(name: str, entries: Mapping[str, Any]) -> list[str]:
    """Why a code artifact's manifest may not be downloaded into a build context (pure).

    Reference entries are refused: a `file://` reference makes the SDK copy a file from the
    agent's own disk (its service account token, say) into the build context.
    """
    where = f"code artifact {name}"
    problems: list[str] = []
    if len(entries) > MAX_ARTIFACT_FILES:
        problems.append(f"{where}: more than {MAX_ARTIFACT_FILES} files")
    total = 0
    for path, entry in entries.items():
        try:
            check_member_name(path, where)
        except SourceError as exc:
            problems.append(str(exc))
        ref = getattr(entry, "ref", None)
        if ref is not None:
            problems.append(
                f"{where}: file {path!r} is a reference ({redact_url(str(ref))}), not content"
            )
        size = getattr(entry, "size", None)
        total += size if isinstance(size, int) and size > 0 else 0
    if total > MAX_ARTIFACT_BYTES:
        problems.append(f"{where}: {total} bytes is more than {MAX_ARTIFACT_BYTES}")
    return problems


def fetch_artifact(name: str, dest: Path, base_url: str, api_key: str) -> str:
    """Download the code artifact `entity/project/name:alias` into `dest`; its digest."""
    import wandb

    try:
        api = wandb.Api(api_key=api_key, overrides={"base_url": base_url}, timeout=60)
        artifact = api.artifact(name.removeprefix("wandb-artifact://"), type="code")
        problems = artifact_problems(name, artifact.manifest.entries)
    except Exception as exc:
        raise ContextError(f"code artifact {name}: {exc}") from exc
    if problems:
        raise ContextError("; ".join(problems[:5]))
    try:
        artifact.download(root=str(dest))
    except Exception as exc:
        raise ContextError(f"code artifact {name}: {exc}") from exc
    return str(artifact.digest)


async def resolve_artifact(name: str, dest: Path, base_url: str, api_key: str) -> str:
    return await _in_executor(functools.partial(fetch_artifact, name, dest, base_url, api_key))


async def remove_tree(path: Path) -> None:
    await _in_executor(functools.partial(shutil.rmtree, path, ignore_errors=True))
