"""Job and code artifacts, downloaded by the real wandb SDK and by its own documents."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from wandb.sdk.artifacts._generated import (
    ARTIFACT_MEMBERSHIP_BY_NAME_GQL,
    FETCH_ARTIFACT_MANIFEST_GQL,
    GET_ARTIFACT_MEMBERSHIP_FILE_URLS_GQL,
    ArtifactMembershipByName,
    FetchArtifactManifest,
    GetArtifactMembershipFileUrls,
)

from launch_agent.sandbox.wandb import WandbServer
from launch_agent.sandbox.wandb.artifacts import job_files
from tests.integration.sandbox_wandb.conftest import Client

CODE = {
    "train.py": b"print('training')\n",
    "requirements.txt": b"numpy\n",
    "lib/util.py": b"X = 1\n",
}


def seed(server: WandbServer) -> None:
    state = server.state
    state.add_artifact("ent", "proj", "code-train", "code", files=CODE)
    state.add_job("ent", "proj", "job-code", code_artifact="ent/proj/code-train:latest")
    state.add_job("ent", "proj", "job-image", image="busybox:1.36")
    state.add_job("ent", "proj", "job-image", image="busybox:1.37")  # v1 takes `latest`


async def membership(client: Client, name: str, project: str = "proj") -> Any:
    variables = {"entity": "ent", "project": project, "name": name, "includeAliases": True}
    return await client.data(ARTIFACT_MEMBERSHIP_BY_NAME_GQL, variables)


@pytest.mark.parametrize(
    ("name", "version", "image"),
    [
        ("job-image:latest", 1, "busybox:1.37"),
        ("job-image:v0", 0, "busybox:1.36"),
        ("job-image:v1", 1, "busybox:1.37"),
    ],
)
async def test_membership_by_name_parses_with_the_sdk_models(
    server: WandbServer, client: Client, name: str, version: int, image: str
) -> None:
    seed(server)
    data = await membership(client, name)
    parsed = ArtifactMembershipByName.model_validate(data)
    assert parsed.project is not None
    found = parsed.project.artifact_collection_membership
    assert found is not None
    assert found.artifact is not None
    assert found.version_index == version
    assert found.artifact.artifact_type.name == "job"
    assert found.artifact.artifact_sequence.name == "job-image"
    assert found.artifact.file_count == 2
    stored = server.state.artifacts.versions[found.artifact.id]
    assert json.loads(stored.files["wandb-job.json"])["source"]["image"] == image


async def test_unknown_artifacts_are_null(server: WandbServer, client: Client) -> None:
    seed(server)
    assert await membership(client, "nope:latest") == {
        "project": {"artifactCollectionMembership": None}
    }
    assert await membership(client, "job-image:v7") == {
        "project": {"artifactCollectionMembership": None}
    }
    assert await membership(client, "job-image:latest", project="other") == {"project": None}


async def test_manifest_and_files_download_with_matching_digests(
    server: WandbServer, client: Client
) -> None:
    seed(server)
    found = (await membership(client, "code-train:latest"))["project"][
        "artifactCollectionMembership"
    ]
    artifact_id = found["artifact"]["id"]
    fetched = FetchArtifactManifest.model_validate(
        await client.data(FETCH_ARTIFACT_MANIFEST_GQL, {"id": artifact_id})
    )
    assert fetched.artifact is not None
    assert fetched.artifact.current_manifest is not None
    # Presigned URLs: no Authorization header.
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(fetched.artifact.current_manifest.file.direct_url) as response:
            assert response.status == 200
            manifest = await response.json()
        assert manifest["version"] == 1
        assert sorted(manifest["contents"]) == sorted(CODE)
        urls: dict[str, str] = {}
        cursor = None
        pages = 0
        while True:
            variables = {"entity": "ent", "project": "proj", "collection": "code-train",
                         "alias": "latest", "cursor": cursor, "perPage": 2}  # fmt: skip
            page = GetArtifactMembershipFileUrls.model_validate(
                await client.data(GET_ARTIFACT_MEMBERSHIP_FILE_URLS_GQL, variables)
            )
            assert page.project is not None
            assert page.project.artifact_collection is not None
            assert page.project.artifact_collection.artifact_membership is not None
            files = page.project.artifact_collection.artifact_membership.files
            assert files is not None
            urls |= {e.node.name: e.node.direct_url for e in files.edges if e.node}
            pages += 1
            if not files.page_info.has_next_page:
                break
            cursor = files.page_info.end_cursor
        assert pages == 2
        for name, url in urls.items():
            async with anonymous.get(url) as response:
                data = await response.read()
            assert data == CODE[name]
            md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
            assert manifest["contents"][name]["digest"] == md5
        missing = url.rsplit("/", 1)[0] + "/missing.txt"
        async with anonymous.get(missing) as response:
            assert response.status == 404
            assert "has no file missing.txt" in (await response.json())["errors"][0]["message"]
    assert server.log.count("REST artifact file") == len(CODE) + 1


async def test_download_urls_are_signed(server: WandbServer, client: Client) -> None:
    seed(server)
    found = (await membership(client, "job-image:latest"))["project"][
        "artifactCollectionMembership"
    ]
    data = await client.data(FETCH_ARTIFACT_MANIFEST_GQL, {"id": found["artifact"]["id"]})
    url = data["artifact"]["currentManifest"]["file"]["directUrl"]
    token = url.split("/")[4]
    async with (
        aiohttp.ClientSession() as anonymous,
        anonymous.get(url.replace(token, "forged")) as r,
    ):
        assert r.status == 403


def test_a_job_has_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one source"):
        job_files(image="a", repo="b")
    with pytest.raises(ValueError, match="exactly one source"):
        job_files()


SDK_DOWNLOAD = """
import json, sys, wandb
api = wandb.Api()
job = api.job(sys.argv[1], path=sys.argv[2])
code = api.artifact(sys.argv[3], type="code")
code.download(root=sys.argv[4])
print(json.dumps({"job": job.name, "code": code.name}))
"""


async def test_the_wandb_sdk_downloads_a_job_and_its_code(
    server: WandbServer, tmp_path: Path
) -> None:
    seed(server)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "WANDB_BASE_URL": server.url,
        "WANDB_API_KEY": server.api_key,
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
        "WANDB_ERROR_REPORTING": "false",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SDK_DOWNLOAD,
        "ent/proj/job-code:latest", str(tmp_path / "job"),
        "ent/proj/code-train:latest", str(tmp_path / "code"),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-3000:]
    assert json.loads(out.decode().strip().splitlines()[-1]) == {
        "job": "ent/proj/job-code:latest",
        "code": "code-train:latest",
    }
    loop = asyncio.get_running_loop()
    job_info = json.loads(
        await loop.run_in_executor(None, (tmp_path / "job" / "wandb-job.json").read_bytes)
    )
    assert job_info["source_type"] == "artifact"
    assert job_info["source"]["artifact"] == "wandb-artifact://ent/proj/code-train:latest"
    for name, data in CODE.items():
        assert await loop.run_in_executor(None, (tmp_path / "code" / name).read_bytes) == data
