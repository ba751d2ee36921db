"""Loopback peers for build tests: moto's S3 server, the GCS emulator, a smart-HTTP git server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.git_repos import GitHttpServer, git
from tests.loopback_stores import gcs_emulator, moto_s3


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
def git_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    """The loopback smart-HTTP git server (`git http-backend`), serving `tmp_path/served`."""
    root = tmp_path / "served"
    root.mkdir()
    with GitHttpServer(root) as server:
        yield server


@pytest.fixture
def git_repo(tmp_path: Path, git_server: GitHttpServer) -> tuple[str, str, str]:
    """A repository with two commits on `main`, served over smart HTTP: (URL, first, second)."""
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
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(git_server.root / "repo.git"))
    return git_server.repo_url("repo"), first, second


@pytest.fixture
def git_private(
    git_repo: tuple[str, str, str], git_server: GitHttpServer
) -> Iterator[tuple[GitHttpServer, str]]:
    """The same repository behind Basic auth (user `bot`, password `token`).

    Returns (the server, a credentials line for a git-credentials file).
    """
    with GitHttpServer(git_server.root, users={"bot": "token"}) as private:
        yield private, private.url.replace("http://", "http://bot:token@") + "\n"
