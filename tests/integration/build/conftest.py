"""Loopback peers for build tests: moto's S3 server, the GCS emulator, a git repository."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import boto3
import pytest
from aiohttp import web

from tests.git_repos import git
from tests.loopback_stores import free_port, gcs_emulator, moto_s3


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as url:
        yield url


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def s3_bucket(s3_endpoint: str, aws_env: None, request: pytest.FixtureRequest) -> str:
    """A fresh bucket per test (named after the test) on the shared moto server."""
    name = "ctx-" + str(abs(hash(request.node.nodeid)) % 10**12)
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def gcs_host() -> Iterator[str]:
    with gcs_emulator("ctx-gcs") as url:
        yield url


@pytest.fixture
def gcs_env(gcs_host: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_host)
    return "ctx-gcs"


@pytest.fixture
def git_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A local repository with two commits; returns (path, first sha, second sha)."""
    repo = tmp_path / "origin"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text("print('v1')\n")
    (repo / "requirements.txt").write_text("numpy==2.1.0\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "train.py").write_text("print('v2')\n")
    git(repo, "commit", "-qam", "two")
    second = git(repo, "rev-parse", "HEAD")
    return repo, first, second


@pytest.fixture
async def git_http(
    git_repo: tuple[Path, str, str], tmp_path: Path
) -> AsyncIterator[tuple[str, str]]:
    """The repository over git's dumb HTTP protocol behind Basic auth (user `bot`, `token`).

    Returns (URL, credentials line for a git-credentials file).
    """
    origin, _, _ = git_repo
    served = tmp_path / "served.git"
    await asyncio.to_thread(git, tmp_path, "clone", "-q", "--bare", str(origin), str(served))
    await asyncio.to_thread(git, served, "update-server-info")
    expected = "Basic " + base64.b64encode(b"bot:token").decode()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != expected:
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
        rel = request.match_info["path"]
        path = (served / rel).resolve()
        if served.resolve() not in path.parents or not await asyncio.to_thread(path.is_file):
            return web.Response(status=404)
        return web.Response(body=await asyncio.to_thread(path.read_bytes))

    app = web.Application()
    app.router.add_get("/repo.git/{path:.*}", handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/repo.git", f"http://bot:token@127.0.0.1:{port}\n"
    finally:
        await runner.cleanup()
