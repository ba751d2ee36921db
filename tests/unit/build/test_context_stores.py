"""PVC and Azure Blob build contexts: where the agent writes them and how the Kaniko Job
reads them (wandb's kaniko_builder.py: the claim at /context, `tar:///context/<name>`;
`AZURE_STORAGE_ACCESS_KEY` for Azure)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from launch_agent.adapters.object_store import ObjectStoreError, PvcStore
from launch_agent.model.build import builder_problems, parse_destination
from launch_agent.model.config import BuilderConfig
from launch_agent.model.config_resolve import resolve
from launch_agent.render.kaniko import KanikoSettings, kaniko_job
from tests.unit.build.test_kaniko_job import request as build_request

DEST = parse_destination("registry.example.com/ml/train")


def kaniko_builder(**extra: Any) -> BuilderConfig:
    return BuilderConfig.model_validate(
        {"type": "kaniko", "destination": "registry.example.com/ml/train", **extra}
    )


async def test_pvc_store_writes_whole_files_and_names_the_tar_url(tmp_path: Path) -> None:
    mount = tmp_path / "kaniko"
    mount.mkdir()
    store = PvcStore("contexts", mount)
    source = tmp_path / "ctx.tgz"
    source.write_bytes(b"\x1f\x8bcontext")
    assert not await store.exists("abc.tgz")
    assert await store.upload(source, "abc.tgz") == "tar:///context/abc.tgz"
    assert (mount / "abc.tgz").read_bytes() == b"\x1f\x8bcontext"
    assert [p.name for p in mount.iterdir()] == ["abc.tgz"]  # no partial file left
    assert await store.exists("abc.tgz")
    await store.delete("abc.tgz")
    await store.delete("abc.tgz")
    assert not await store.exists("abc.tgz")


async def test_pvc_store_delete_takes_the_half_copy_of_a_killed_upload(tmp_path: Path) -> None:
    """A SIGKILL during `upload` leaves `.<name>.partial`; the next build's delete of `<name>`
    (`ImageBuilder._clean_up_leftover`) takes it too, or it would stay in the claim for good."""
    (tmp_path / ".abc.tgz.partial").write_bytes(b"\x1f\x8bhalf")
    (tmp_path / "other.tgz").write_bytes(b"x")
    await PvcStore("contexts", tmp_path).delete("abc.tgz")
    assert await asyncio.to_thread(os.listdir, tmp_path) == ["other.tgz"]


@pytest.mark.parametrize("name", ["../x.tgz", "a/b.tgz", ".hidden", ""])
async def test_pvc_store_refuses_paths(tmp_path: Path, name: str) -> None:
    source = tmp_path / "ctx.tgz"
    source.write_bytes(b"x")
    with pytest.raises(ObjectStoreError, match="not a plain file name"):
        await PvcStore("contexts", tmp_path).upload(source, name)


async def test_pvc_store_error_names_the_claim(tmp_path: Path) -> None:
    source = tmp_path / "ctx.tgz"
    source.write_bytes(b"x")
    with pytest.raises(ObjectStoreError, match=r"on PVC contexts \(.*missing\)"):
        await PvcStore("contexts", tmp_path / "missing").upload(source, "a.tgz")


def test_kaniko_job_mounts_the_claim_read_only() -> None:
    settings = KanikoSettings(kaniko_builder(), "kaniko", pvc_claim="contexts")
    job = kaniko_job(build_request(), DEST, "tar:///context/abc.tgz", settings)
    pod = job["spec"]["template"]["spec"]
    assert {
        "name": "kaniko-pvc",
        "persistentVolumeClaim": {"claimName": "contexts", "readOnly": True},
    } in pod["volumes"]
    container = pod["containers"][0]
    assert {"name": "kaniko-pvc", "mountPath": "/context", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert "--context=tar:///context/abc.tgz" in container["args"]


def test_kaniko_job_reads_azure_with_the_key_secret() -> None:
    settings = KanikoSettings(kaniko_builder(), "kaniko", azure_key_secret="rel-azure-key")
    uri = "https://acct.blob.core.windows.net/ctx/abc.tgz"
    job = kaniko_job(build_request(), DEST, uri, settings)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    ref = {"secretKeyRef": {"name": "rel-azure-key", "key": "password"}}
    assert {"name": "AZURE_STORAGE_ACCESS_KEY", "valueFrom": ref} in env
    # An S3 context does not get the Azure key.
    s3 = kaniko_job(build_request(), DEST, "s3://b/abc.tgz", settings)
    names = [e["name"] for e in s3["spec"]["template"]["spec"]["containers"][0].get("env", [])]
    assert "AZURE_STORAGE_ACCESS_KEY" not in names


def test_a_pvc_replaces_the_context_store() -> None:
    assert [p.path for p in builder_problems(kaniko_builder())] == ["builder.build-context-store"]
    assert builder_problems(kaniko_builder(), pvc=True) == []
    resolved = resolve(
        file_text="builder: {type: kaniko, destination: registry.example.com/ml/train}\n",
        env={
            "WANDB_LAUNCH_KANIKO_PVC_NAME": "contexts",
            "WANDB_LAUNCH_KANIKO_PVC_MOUNT_PATH": "/m",
        },
    )
    assert resolved.config.kaniko_pvc_name == "contexts"
    assert resolved.config.kaniko_pvc_mount_path == "/m"


def test_azure_store_is_a_valid_context_store() -> None:
    assert (
        builder_problems(
            kaniko_builder(**{"build-context-store": "https://acct.blob.core.windows.net/ctx"})
        )
        == []
    )
    (problem,) = builder_problems(kaniko_builder(**{"build-context-store": "https://x.example/c"}))
    assert "Azure Blob URL" in problem.reason
