"""Azure Blob build contexts through azure-storage-blob, against Azurite (Microsoft's emulator,
from npm) on loopback, and the Kaniko Job that reads them."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch_agent.adapters.object_store import ObjectStore, ObjectStoreError
from launch_agent.model.build import parse_store

# Azurite's fixed development account (docs: "Connect to Azurite with SDKs").
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> Path:
    """`make` installs it into the virtualenv (`AZURITE_BIN`); AZURITE_BLOB overrides."""
    override = os.environ.get("AZURITE_BLOB")
    path = (
        Path(override) if override else Path(sys.prefix) / "azurite/node_modules/.bin/azurite-blob"
    )
    assert path.is_file(), f"Azurite is not installed at {path}: run `make {path}` (see Makefile)"
    return path


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The blob endpoint of a fresh Azurite (`http://127.0.0.1:PORT/devstoreaccount1`)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    data = tmp_path_factory.mktemp("azurite")
    process = subprocess.Popen(
        [
            str(azurite_binary()),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(data),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "Azurite did not listen within 60 s"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/{ACCOUNT}"
    finally:
        # Azurite may take its time over SIGTERM (it closes its stores first): then kill it.
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


STORE = f"https://{ACCOUNT}.blob.core.windows.net/contexts/builds"


async def roundtrip(store: ObjectStore, tmp_path: Path) -> None:
    path = tmp_path / "ctx.tgz"
    await asyncio.to_thread(path.write_bytes, b"\x1f\x8b" + b"x" * 2048)
    await store.ensure_bucket()
    assert not await store.exists("run-1.tgz")
    uri = await store.upload(path, "run-1.tgz")
    assert uri == f"https://{ACCOUNT}.blob.core.windows.net/contexts/builds/run-1.tgz"
    assert await store.exists("run-1.tgz")
    await store.delete("run-1.tgz")
    assert not await store.exists("run-1.tgz")
    await store.delete("run-1.tgz")  # already gone: not an error


async def test_account_key_as_wandb_sets_it(
    azurite: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCESS_KEY", KEY)
    await roundtrip(ObjectStore(STORE, endpoint_url=azurite), tmp_path)


async def test_connection_string(
    azurite: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_ACCESS_KEY", raising=False)
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint={azurite};",
    )
    await roundtrip(ObjectStore(STORE), tmp_path)


async def test_a_wrong_key_names_the_object(
    azurite: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCESS_KEY", "d3Jvbmc=")
    path = tmp_path / "ctx.tgz"
    path.write_bytes(b"x")
    store = ObjectStore(STORE, endpoint_url=azurite)
    with pytest.raises(ObjectStoreError, match=r"upload to https://devstoreaccount1\.blob"):
        await store.upload(path, "run-2.tgz")


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("https://example.com/c/p", "must be an Azure Blob URL"),
        ("https://UPPER.blob.core.windows.net/c1/p", "not a valid Azure storage account"),
        ("https://acct.blob.core.windows.net/a--b/p", "not a valid Azure Blob container"),
        ("ftp://acct/x", "not supported"),
    ],
)
def test_bad_azure_stores_are_refused(uri: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_store(uri)


def test_azure_store_parses() -> None:
    location = parse_store("https://acct01.blob.core.windows.net/ctx/a/b/")
    assert (location.scheme, location.account, location.bucket, location.prefix) == (
        "azblob",
        "acct01",
        "ctx",
        "a/b",
    )
    assert location.uri("x.tgz") == "https://acct01.blob.core.windows.net/ctx/a/b/x.tgz"
