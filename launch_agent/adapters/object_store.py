"""Build-context objects in S3 (boto3), GCS (google-cloud-storage) or Azure Blob
(azure-storage-blob): upload, exists, delete. `PvcStore` is W&B's PVC alternative.

Azure credentials, in order: `AZURE_STORAGE_CONNECTION_STRING` (also how Azurite is reached),
`AZURE_STORAGE_ACCESS_KEY` (the account key, W&B's variable, which Kaniko reads too), else
azure-identity's `DefaultAzureCredential` when it is installed (workload identity).

Both SDKs are blocking, so every call runs in the default executor, never on the event loop
(W&B's agent uploads to S3 synchronously on the loop). One `ObjectStore` — and so one SDK
client with its connection pool — lives for the whole process; the client is created lazily in
the executor because creating it reads credentials files and may call a metadata server.

Errors come back as `ObjectStoreError` naming the URI and the operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from launch_agent.model.build import AZURE, StoreLocation, parse_store

T = TypeVar("T")


class ObjectStoreError(RuntimeError):
    """An upload, delete or existence check that failed; the message names the object."""


class ContextStore(Protocol):
    """Where build contexts go: an object store or a PVC."""

    async def upload(self, path: Path, name: str) -> str: ...
    async def exists(self, name: str) -> bool: ...
    async def delete(self, name: str) -> None: ...


class ObjectStore:
    """One store location (`s3://bucket/prefix` or `gs://bucket/prefix`) and its client.

    `endpoint_url` points S3 at another endpoint (moto in tests, MinIO); GCS honours
    `STORAGE_EMULATOR_HOST` itself. `timeout` bounds every call.
    """

    def __init__(
        self,
        uri: str | StoreLocation,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        timeout: float = 300.0,
    ) -> None:
        self.location = uri if isinstance(uri, StoreLocation) else parse_store(uri)
        self._endpoint = endpoint_url
        self._region = region
        self.timeout = timeout
        self._client: Any = None
        self._lock = threading.Lock()

    def uri(self, name: str) -> str:
        return self.location.uri(name)

    # --- the client, once per process -----------------------------------------------------------

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        if self.location.scheme == "s3":
            import boto3
            from botocore.config import Config

            config = Config(retries={"max_attempts": 5, "mode": "standard"})
            return boto3.session.Session().client(
                "s3", endpoint_url=self._endpoint, region_name=self._region, config=config
            )
        if self.location.scheme == AZURE:
            return self._azure_container()
        from google.cloud import storage

        return storage.Client()

    def _azure_container(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        connection = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "").strip()
        if connection:
            service = BlobServiceClient.from_connection_string(connection)
        else:
            account = self.location.account
            url = self._endpoint or f"https://{account}.blob.core.windows.net"
            key = os.environ.get("AZURE_STORAGE_ACCESS_KEY", "").strip()
            credential: Any
            if key:
                credential = {"account_name": account, "account_key": key}
            else:
                try:
                    from azure.identity import DefaultAzureCredential
                except ImportError:
                    raise ObjectStoreError(
                        f"Azure Blob store {self.uri('')}: no credentials: set"
                        " AZURE_STORAGE_ACCESS_KEY (the chart's azureStorageAccessKey) or"
                        " AZURE_STORAGE_CONNECTION_STRING, or install azure-identity"
                    ) from None
                credential = DefaultAzureCredential()
            service = BlobServiceClient(account_url=url, credential=credential)
        return service.get_container_client(self.location.bucket)

    async def _run(self, what: str, name: str, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                return await loop.run_in_executor(None, fn)
        except TimeoutError:
            raise ObjectStoreError(
                f"{what} {self.uri(name)}: no answer within {self.timeout:g}s"
            ) from None
        except ObjectStoreError:
            raise
        except Exception as exc:
            raise ObjectStoreError(f"{what} {self.uri(name)}: {exc}") from exc

    # --- operations ---------------------------------------------------------------------------

    async def upload(self, path: Path, name: str) -> str:
        """Upload the file at `path` as `name` under the prefix; return its URI."""
        await self._run("upload to", name, functools.partial(self._upload, path, name))
        return self.uri(name)

    async def exists(self, name: str) -> bool:
        return await self._run("existence check of", name, functools.partial(self._exists, name))

    async def delete(self, name: str) -> None:
        """Delete the object; deleting one that is gone is not an error."""
        await self._run("delete of", name, functools.partial(self._delete, name))

    async def ensure_bucket(self) -> None:
        """Create the bucket if it is missing (sandboxes, benchmarks; clusters bring theirs)."""
        await self._run("creating the bucket of", "", self._ensure_bucket)

    def _ensure_bucket(self) -> None:
        client = self._get_client()
        bucket = self.location.bucket
        if self.location.scheme == "s3":
            from botocore.exceptions import ClientError

            try:
                client.head_bucket(Bucket=bucket)
            except ClientError:
                client.create_bucket(Bucket=bucket)
            return
        if self.location.scheme == AZURE:
            if not client.exists():
                client.create_container()
            return
        if client.lookup_bucket(bucket) is None:
            client.create_bucket(bucket)

    def _upload(self, path: Path, name: str) -> None:
        client = self._get_client()
        key = self.location.key(name)
        if self.location.scheme == "s3":
            client.upload_file(str(path), self.location.bucket, key)
        elif self.location.scheme == AZURE:
            with path.open("rb") as data:
                client.upload_blob(key, data, overwrite=True)
        else:
            client.bucket(self.location.bucket).blob(key).upload_from_filename(str(path))

    def _exists(self, name: str) -> bool:
        client = self._get_client()
        key = self.location.key(name)
        if self.location.scheme == "s3":
            from botocore.exceptions import ClientError

            try:
                client.head_object(Bucket=self.location.bucket, Key=key)
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
            return True
        if self.location.scheme == AZURE:
            return bool(client.get_blob_client(key).exists())
        return bool(client.bucket(self.location.bucket).blob(key).exists())

    def _delete(self, name: str) -> None:
        client = self._get_client()
        key = self.location.key(name)
        if self.location.scheme == "s3":
            client.delete_object(Bucket=self.location.bucket, Key=key)
            return
        if self.location.scheme == AZURE:
            from azure.core.exceptions import ResourceNotFoundError

            with contextlib.suppress(ResourceNotFoundError):
                client.delete_blob(key)
            return
        from google.api_core.exceptions import NotFound

        with contextlib.suppress(NotFound):
            client.bucket(self.location.bucket).blob(key).delete()


# The build Job mounts the claim here (wandb's kaniko_builder.py: `mountPath: /context`).
PVC_CONTEXT_DIR = "/context"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class PvcStore:
    """W&B's PVC contexts: the agent writes each context into the claim mounted at
    `mount_path`; the build Job mounts the same claim at /context and Kaniko reads
    `tar:///context/<name>` (wandb's kaniko_builder.py, `_upload_build_context`).

    File copies run in the executor. Names are the builder's own (a digest), never a path.
    """

    def __init__(self, claim: str, mount_path: str | Path, *, timeout: float = 300.0) -> None:
        self.claim = claim
        self.mount_path = Path(mount_path)
        self.timeout = timeout

    def uri(self, name: str) -> str:
        return f"tar://{PVC_CONTEXT_DIR}/{name}"

    def _path(self, name: str) -> Path:
        if not _SAFE_NAME.match(name):
            raise ObjectStoreError(f"PVC {self.claim}: {name!r} is not a plain file name")
        return self.mount_path / name

    async def _run(self, what: str, name: str, fn: Callable[[], T]) -> T:
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.get_running_loop().run_in_executor(None, fn)
        except TimeoutError:
            raise ObjectStoreError(
                f"{what} {name} on PVC {self.claim} ({self.mount_path}): no answer within"
                f" {self.timeout:g}s"
            ) from None
        except OSError as exc:
            raise ObjectStoreError(
                f"{what} {name} on PVC {self.claim} ({self.mount_path}): {exc}"
            ) from exc

    async def upload(self, path: Path, name: str) -> str:
        target = self._path(name)

        def copy() -> None:
            # Written under a temporary name, then renamed: Kaniko never sees half a file.
            partial = _partial(target)
            shutil.copyfile(path, partial)
            os.replace(partial, target)

        await self._run("copy of", name, copy)
        return self.uri(name)

    async def exists(self, name: str) -> bool:
        return await self._run("existence check of", name, self._path(name).is_file)

    async def delete(self, name: str) -> None:
        """The context, and the half copy an agent killed during `upload` left beside it."""
        target = self._path(name)

        def unlink() -> None:
            _partial(target).unlink(missing_ok=True)
            target.unlink(missing_ok=True)

        await self._run("delete of", name, unlink)


def _partial(target: Path) -> Path:
    """Where `PvcStore.upload` copies before its rename (a dot name: Kaniko is never given it)."""
    return target.with_name(f".{target.name}.partial")
