"""Contexts: reproducible archives, Dockerfile choice, git and code-artifact sources."""

from __future__ import annotations

import asyncio
import os
import random
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.adapters.build_context import (
    ContextError,
    choose_dockerfile,
    dockerfile_for,
    pack,
    pack_context,
    resolve_artifact,
    resolve_git,
)
from launch_agent.model.config import GitSourceConfig
from launch_agent.sandbox.wandb import WandbServer
from tests.git_repos import LOOPBACK_GIT, GitHttpServer


def make_tree(root: Path, order: list[str], mtime: int, umask_mode: int) -> None:
    files = {"train.py": "print(1)\n", "lib/util.py": "X = 1\n", "lib/data/a.csv": "1,2\n",
             "run.sh": "#!/bin/sh\n", "Dockerfile": "FROM scratch\n"}  # fmt: skip
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[name])
        path.chmod(umask_mode | (0o111 if name == "run.sh" else 0))
        os.utime(path, (mtime, mtime))
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "link").symlink_to("train.py")


def test_same_input_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    names = ["train.py", "lib/util.py", "lib/data/a.csv", "run.sh", "Dockerfile"]
    make_tree(a, names, 1_000_000, 0o644)
    make_tree(b, list(reversed(names)), 2_000_000, 0o664)
    pa = pack_context(a, "FROM python:3.11\n", tmp_path / "a.tgz")
    pb = pack_context(b, "FROM python:3.11\n", tmp_path / "b.tgz")
    assert pa.sha256 == pb.sha256
    assert (tmp_path / "a.tgz").read_bytes() == (tmp_path / "b.tgz").read_bytes()
    pc = pack_context(a, "FROM python:3.12\n", tmp_path / "c.tgz")
    assert pc.sha256 != pa.sha256

    with tarfile.open(tmp_path / "a.tgz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert ".git" not in members and ".git/HEAD" not in members
        assert [n for n in members if n == "Dockerfile"] == ["Dockerfile"]
        dockerfile = tar.extractfile("Dockerfile")
        assert dockerfile is not None and dockerfile.read() == b"FROM python:3.11\n"
        assert members["run.sh"].mode == 0o755
        assert members["train.py"].mode == 0o644
        assert members["lib"].isdir() and members["lib"].mode == 0o755
        assert members["link"].issym() and members["link"].linkname == "train.py"
        assert {(m.mtime, m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, 0, "")}


async def test_pack_runs_off_the_loop(tmp_path: Path) -> None:
    root = tmp_path / "src"
    await asyncio.to_thread(make_tree, root, ["train.py"], 1, 0o644)
    packed = await pack(root, "FROM scratch\n", tmp_path / "ctx.tgz")
    assert packed.files == 3  # train.py, link and the Dockerfile (.git is left out)
    assert packed.size > 0


def test_pack_rejects_a_missing_tree(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="not a directory"):
        pack_context(tmp_path / "nope", "FROM scratch\n", tmp_path / "x.tgz")


@pytest.mark.parametrize(
    ("files", "kwargs", "expected"),
    [
        ({"Dockerfile.ml": "FROM a\n", "Dockerfile": "FROM b\n"},
         {"override": "Dockerfile.ml", "job_dockerfile": "Dockerfile"}, "FROM a\n"),
        ({"Dockerfile": "FROM b\n"}, {"job_dockerfile": "Dockerfile"}, "FROM b\n"),
        ({"requirements.txt": "numpy\n"},
         {"base_image": "python:3.11", "entrypoint": ["python", "t.py"]}, "-r requirements.txt"),
        ({"pyproject.toml": "[project]\n"},
         {"base_image": "python:3.11", "entrypoint": ["python", "t.py"]}, "pip install --no-cache-dir ."),
    ],
)  # fmt: skip
def test_choose_dockerfile(
    tmp_path: Path, files: dict[str, str], kwargs: dict[str, object], expected: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert expected in choose_dockerfile(tmp_path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"override": "../etc/passwd"}, "inside the source tree"),
        ({"override": "/etc/passwd"}, "inside the source tree"),
        ({"job_dockerfile": "missing/Dockerfile"}, "does not exist"),
        ({"base_image": "python:3.11"}, "entry point"),
    ],
)
async def test_choose_dockerfile_errors(
    tmp_path: Path, kwargs: dict[str, object], reason: str
) -> None:
    with pytest.raises(ContextError, match=reason):
        await dockerfile_for(tmp_path, **kwargs)


async def test_git_source_pins_the_commit(git_repo: tuple[str, str, str], tmp_path: Path) -> None:
    url, first, second = git_repo
    assert await resolve_git(url, None, tmp_path / "head", LOOPBACK_GIT) == second
    assert await resolve_git(url, "main", tmp_path / "branch", LOOPBACK_GIT) == second
    assert await resolve_git(url, first, tmp_path / "sha", LOOPBACK_GIT) == first
    text = await asyncio.to_thread((tmp_path / "sha" / "train.py").read_text)
    assert text == "print('v1')\n"
    with pytest.raises(ContextError, match="not a commit, branch or tag"):
        await resolve_git(url, "no-such-branch", tmp_path / "bad", LOOPBACK_GIT)


async def test_git_credentials_file_is_used_for_its_host_only(
    git_repo: tuple[str, str, str],
    git_private: tuple[GitHttpServer, str],
    git_server: GitHttpServer,
    tmp_path: Path,
) -> None:
    """A private repository: refused without credentials, fetched with the chart's
    git-credentials file, whose password never goes to a host it is not for."""
    _, first, second = git_repo
    private, line = git_private
    url = private.repo_url("repo")
    with pytest.raises(ContextError, match="git fetch"):
        await resolve_git(url, None, tmp_path / "anon", LOOPBACK_GIT)
    creds = tmp_path / ".git-credentials"
    await asyncio.to_thread(creds.write_text, line)
    settings = GitSourceConfig(allowed_schemes=["http"], credentials_file=str(creds))
    assert await resolve_git(url, None, tmp_path / "head", settings) == second
    assert await resolve_git(url, first, tmp_path / "sha", settings) == first
    assert any(auth for _, _, auth in private.requests)
    # Read, never rewritten: git's own store helper would rewrite it and drop lines on a 401.
    assert await asyncio.to_thread(creds.read_text) == line
    # Another host (the open server: another port) gets no helper and so no Authorization.
    assert await resolve_git(git_server.repo_url("repo"), None, tmp_path / "o", settings) == second
    assert [auth for _, _, auth in git_server.requests if auth] == []


async def test_git_runs_without_the_agent_environment(
    git_server: GitHttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's secrets and its GIT_CONFIG_GLOBAL do not reach git: the admin's ssh
    command (a script here) records the environment git gives its transport."""
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-456")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "evil.gitconfig"))
    # A global config the agent's environment points at: with it, git would run a command.
    marker = tmp_path / "from-global-config"
    (tmp_path / "evil.gitconfig").write_text(f"[core]\n\tsshCommand = touch {marker}; false\n")
    record = tmp_path / "env.txt"
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(f"#!/bin/sh\nenv > {record}\nexit 1\n")
    ssh.chmod(0o755)
    settings = GitSourceConfig(allowed_schemes=["ssh"], ssh_command=str(ssh))
    with pytest.raises(ContextError, match="git fetch"):
        await resolve_git("git@example.invalid:org/repo.git", None, tmp_path / "s", settings)
    seen = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
    assert "WANDB_API_KEY" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen
    assert seen["GIT_CONFIG_GLOBAL"] == os.devnull
    assert seen["GIT_TERMINAL_PROMPT"] == "0"
    assert seen["GIT_ALLOW_PROTOCOL"] == "ssh"
    assert seen["HOME"] != os.environ.get("HOME")
    assert not marker.exists()


@pytest.fixture
async def wandb_server() -> AsyncIterator[WandbServer]:
    async with WandbServer() as server:
        yield server


async def test_code_artifact_source(wandb_server: WandbServer, tmp_path: Path) -> None:
    files = {"train.py": b"print('art')\n", "requirements.txt": b"numpy\n"}
    state = wandb_server.state
    state.add_artifact("ent", "proj", "code-train", "code", files=files, aliases=("v0",))
    state.add_artifact("ent", "proj", "code-other", "code", files=files, aliases=("v0",))
    changed = {**files, "train.py": b"print('art v2')\n"}
    state.add_artifact("ent", "proj", "code-train", "code", files=changed, aliases=("latest",))

    async def digest(name: str, into: str) -> str:
        return await resolve_artifact(
            f"wandb-artifact://ent/proj/{name}", tmp_path / into, wandb_server.url,
            wandb_server.api_key,
        )  # fmt: skip

    first = await digest("code-train:v0", "a")
    assert await asyncio.to_thread((tmp_path / "a" / "train.py").read_bytes) == files["train.py"]
    # The digest is of the contents: same files, same digest; other files, another digest.
    assert await digest("code-other:v0", "b") == first
    assert await digest("code-train:latest", "c") != first
    with pytest.raises(ContextError, match="code artifact ent/proj/nope:latest"):
        await resolve_artifact("ent/proj/nope:latest", tmp_path / "x", wandb_server.url,
                               wandb_server.api_key)  # fmt: skip


async def test_a_code_artifact_escaping_its_directory_is_refused_before_download(
    wandb_server: WandbServer, tmp_path: Path
) -> None:
    """Zip-slip: a file named `../...` in the manifest; nothing is written anywhere."""
    files = {"train.py": b"print(1)\n", "../escaped.py": b"evil\n"}
    wandb_server.state.add_artifact("ent", "proj", "slip", "code", files=files)
    dest = tmp_path / "ctx" / "src"
    with pytest.raises(ContextError) as caught:
        await resolve_artifact(
            "wandb-artifact://ent/proj/slip:latest", dest, wandb_server.url, wandb_server.api_key
        )
    assert "code artifact wandb-artifact://ent/proj/slip:latest: file '../escaped.py'" in str(
        caught.value
    )
    assert not await asyncio.to_thread((tmp_path / "ctx" / "escaped.py").exists)
    assert not await asyncio.to_thread(dest.exists)


NAMES = st.text(alphabet="abcdefgh_-.", min_size=1, max_size=8).filter(
    lambda n: n not in (".", "..", ".git", "Dockerfile")
)


@settings(max_examples=25, deadline=None)
@given(
    files=st.dictionaries(
        st.lists(NAMES, min_size=1, max_size=3).map("/".join), st.binary(max_size=64),
        min_size=1, max_size=8,
    ),
    seed=st.integers(0, 2**16),
)  # fmt: skip
def test_packing_is_independent_of_creation_order_and_times(
    files: dict[str, bytes], seed: int
) -> None:
    # Paths that are both a file and a directory prefix cannot coexist: keep the first.
    kept: dict[str, bytes] = {}
    for name, data in files.items():
        parts = name.split("/")
        prefixes = {"/".join(parts[:i]) for i in range(1, len(parts))}
        if prefixes & kept.keys() or any(k.startswith(name + "/") for k in kept):
            continue
        kept[name] = data
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        digests = []
        for n in range(2):
            root = Path(tmp) / f"t{n}"
            order = list(kept)
            rng.shuffle(order)
            for name in order:
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(kept[name])
                os.utime(path, (rng.randint(0, 2**31), rng.randint(0, 2**31)))
            digests.append(pack_context(root, "FROM x\n", Path(tmp) / f"{n}.tgz").sha256)
        assert digests[0] == digests[1]
