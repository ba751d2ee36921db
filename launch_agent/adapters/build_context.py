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
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from launch_agent.model.build import python_dockerfile

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


def _inside(root: Path, relative: str, what: str) -> Path:
    rel = PurePosixPath(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise ContextError(f"{what} {relative!r} must be a path inside the source tree")
    path = root / rel
    if not path.is_file():
        raise ContextError(f"{what} {relative!r} does not exist in the source tree")
    return path


def choose_dockerfile(
    root: Path,
    *,
    override: str | None = None,
    job_dockerfile: str | None = None,
    base_image: str | None = None,
    entrypoint: list[str] | None = None,
) -> str:
    """The Dockerfile text: `overrides.dockerfile`, else the job's own, else a generated one."""
    for relative, what in ((override, "overrides.dockerfile"), (job_dockerfile, "dockerfile")):
        if relative:
            return _inside(root, relative, what).read_text(encoding="utf-8")
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


def _git(args: list[str], cwd: Path, credentials_file: Path | None) -> str:
    config: list[str] = ["-c", "advice.detachedHead=false"]
    if credentials_file is not None:
        # The chart's `gitCreds` Secret is a git-credentials file: `https://user:token@host`.
        config += ["-c", f"credential.helper=store --file={credentials_file}"]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(
            ["git", *config, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ContextError(f"git {args[0]} timed out after {GIT_TIMEOUT:g}s") from None
    except FileNotFoundError:
        raise ContextError("the git command is not installed") from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise ContextError(f"git {' '.join(args[:2])} failed: {tail}")
    return done.stdout.strip()


def fetch_git(url: str, ref: str | None, dest: Path, credentials_file: Path | None = None) -> str:
    """Check out `ref` (commit, branch or tag; default HEAD) of `url` into `dest`; the sha."""
    dest.mkdir(parents=True, exist_ok=True)
    _git(["init", "-q"], dest, credentials_file)
    _git(["remote", "add", "origin", url], dest, credentials_file)
    want = ref or "HEAD"
    try:
        _git(["fetch", "-q", "--depth", "1", "origin", want], dest, credentials_file)
        _git(["checkout", "-q", "FETCH_HEAD"], dest, credentials_file)
    except ContextError:
        # Servers that cannot fetch one ref shallowly (dumb HTTP, a bare sha without
        # allowReachableSHA1InWant): fetch every branch and tag, then find `want` among them.
        _git(["fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"],
             dest, credentials_file)  # fmt: skip
        if ref is None:
            _git(["remote", "set-head", "origin", "--auto"], dest, credentials_file)
            candidates = ["origin/HEAD"]
        else:
            candidates = [f"origin/{ref}", ref]
        for candidate in candidates:
            try:
                sha = _git(["rev-parse", "--verify", "-q", f"{candidate}^{{commit}}"],
                           dest, credentials_file)  # fmt: skip
            except ContextError:
                continue
            _git(["checkout", "-q", sha], dest, credentials_file)
            break
        else:
            raise ContextError(f"{url}: {want!r} is not a commit, branch or tag there")
    return _git(["rev-parse", "HEAD"], dest, credentials_file)


async def resolve_git(
    url: str, ref: str | None, dest: Path, credentials_file: Path | None = None
) -> str:
    """`fetch_git` in the executor; the exact commit sha."""
    return await _in_executor(functools.partial(fetch_git, url, ref, dest, credentials_file))


# --- W&B code artifacts -----------------------------------------------------------------------


def fetch_artifact(name: str, dest: Path, base_url: str, api_key: str) -> str:
    """Download the code artifact `entity/project/name:alias` into `dest`; its digest."""
    import wandb

    try:
        api = wandb.Api(api_key=api_key, overrides={"base_url": base_url}, timeout=60)
        artifact = api.artifact(name.removeprefix("wandb-artifact://"), type="code")
        artifact.download(root=str(dest))
    except Exception as exc:
        raise ContextError(f"code artifact {name}: {exc}") from exc
    return str(artifact.digest)


async def resolve_artifact(name: str, dest: Path, base_url: str, api_key: str) -> str:
    return await _in_executor(functools.partial(fetch_artifact, name, dest, base_url, api_key))


async def remove_tree(path: Path) -> None:
    await _in_executor(functools.partial(shutil.rmtree, path, ignore_errors=True))
