"""Build-context objects through boto3 (moto server) and google-cloud-storage (GCS emulator)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import boto3
import pytest

from launch_agent.adapters.object_store import ObjectStore, ObjectStoreError


async def _roundtrip(store: ObjectStore, tmp_path: Path) -> None:
    path = tmp_path / "ctx.tgz"
    await asyncio.to_thread(path.write_bytes, b"\x1f\x8b" + b"x" * 2048)
    assert not await store.exists("run-1.tgz")
    uri = await store.upload(path, "run-1.tgz")
    assert uri == store.uri("run-1.tgz")
    assert await store.exists("run-1.tgz")
    await store.delete("run-1.tgz")
    assert not await store.exists("run-1.tgz")
    await store.delete("run-1.tgz")  # already gone: not an error


async def test_s3(s3_endpoint: str, s3_bucket: str, tmp_path: Path) -> None:
    store = ObjectStore(f"s3://{s3_bucket}/builds", endpoint_url=s3_endpoint, region="us-east-1")
    path = tmp_path / "ctx.tgz"
    await asyncio.to_thread(path.write_bytes, b"context")
    await store.upload(path, "a.tgz")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    obj = await asyncio.to_thread(client.get_object, Bucket=s3_bucket, Key="builds/a.tgz")
    body = await asyncio.to_thread(obj["Body"].read)
    assert body == b"context"
    await store.delete("a.tgz")
    await _roundtrip(store, tmp_path)


async def test_gcs(gcs_env: str, tmp_path: Path) -> None:
    store = ObjectStore(f"gs://{gcs_env}/builds")
    await _roundtrip(store, tmp_path)


async def test_missing_bucket_is_a_clear_error(
    s3_endpoint: str, aws_env: None, tmp_path: Path
) -> None:
    store = ObjectStore("s3://no-such-bucket/x", endpoint_url=s3_endpoint, region="us-east-1")
    path = tmp_path / "ctx.tgz"
    await asyncio.to_thread(path.write_bytes, b"context")
    with pytest.raises(
        ObjectStoreError, match=r"upload to s3://no-such-bucket/x/a\.tgz.*NoSuchBucket"
    ):
        await store.upload(path, "a.tgz")


async def test_one_client_per_store(s3_endpoint: str, s3_bucket: str, tmp_path: Path) -> None:
    store = ObjectStore(f"s3://{s3_bucket}", endpoint_url=s3_endpoint, region="us-east-1")
    await asyncio.gather(*(store.exists(f"o{i}") for i in range(8)))
    first = store._client
    await store.exists("again")
    assert first is not None and store._client is first


@pytest.mark.parametrize("scheme", ["s3", "gs"])
async def test_ensure_bucket(
    scheme: str, s3_endpoint: str, aws_env: None, gcs_env: str, tmp_path: Path
) -> None:
    store = ObjectStore(f"{scheme}://made-by-test/x", endpoint_url=s3_endpoint, region="us-east-1")
    await store.ensure_bucket()
    await store.ensure_bucket()  # already there: fine
    await _roundtrip(store, tmp_path)
