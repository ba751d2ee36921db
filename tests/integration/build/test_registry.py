"""Image existence checks: the v2 client against the sandbox registry (token auth), ECR on moto."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

import aiohttp
import boto3
import pytest
from aiohttp import web

from launch_agent.adapters.registry import (
    RegistryClient,
    RegistryError,
    docker_config_auths,
    parse_challenge,
)
from launch_agent.model.build import Destination, RegistryKind, parse_destination
from launch_agent.sandbox.registry import RegistryServer
from launch_agent.sandbox.registry.server import OCI_INDEX

USERS = {"ci": "s3cret"}


@pytest.fixture
async def registry() -> AsyncIterator[RegistryServer]:
    async with RegistryServer(users=USERS) as server:
        yield server


def dest(server: RegistryServer, repo: str = "ml/train") -> Destination:
    return parse_destination(f"{server.hostport}/{repo}")


async def test_exists_with_token_auth(registry: RegistryServer) -> None:
    registry.put_image("ml/train", "abc")
    async with RegistryClient({registry.hostport: ("ci", "s3cret")}) as client:
        assert await client.exists(dest(registry), "abc")
        assert not await client.exists(dest(registry), "missing")
    # challenge, token, retry; then the cached token goes straight through.
    assert [(m, s) for m, _, s in registry.requests] == [
        ("HEAD", 401),
        ("GET", 200),
        ("HEAD", 200),
        ("HEAD", 404),
    ]
    assert registry.tokens_issued == 1


async def test_the_digest_is_the_registrys_for_the_tag_now(registry: RegistryServer) -> None:
    first = registry.put_image("ml/train", "abc", build="one")
    async with RegistryClient({registry.hostport: ("ci", "s3cret")}) as client:
        assert await client.digest(dest(registry), "abc") == first
        moved = registry.put_image("ml/train", "abc", build="two")  # the tag moved
        assert moved != first
        assert await client.digest(dest(registry), "abc") == moved
        assert await client.digest(dest(registry), "missing") is None


@pytest.mark.parametrize("header", [None, "garbage", "sha256:short"])
async def test_without_a_digest_header_the_manifest_is_hashed(header: str | None) -> None:
    """The distribution spec defines the digest as sha256 of the manifest's bytes: a registry
    that leaves Docker-Content-Digest out (or sends something else) is asked GET."""
    body = b'{"schemaVersion": 2, "layers": []}'
    seen: list[str] = []

    async def manifest(request: web.Request) -> web.Response:
        seen.append(request.method)
        headers = {"Docker-Content-Digest": header} if header else {}
        return web.Response(body=body if request.method == "GET" else None, headers=headers)

    app = web.Application()
    app.router.add_route("*", "/v2/ml/train/manifests/{ref}", manifest)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    target = parse_destination("registry.example.com/ml/train")
    try:
        endpoints = {target.host: f"http://127.0.0.1:{runner.addresses[0][1]}"}
        async with RegistryClient(endpoints=endpoints) as client:
            assert await client.digest(target, "t") == "sha256:" + hashlib.sha256(body).hexdigest()
    finally:
        await runner.cleanup()
    assert seen == ["HEAD", "GET"]


async def test_multi_arch_index_is_found(registry: RegistryServer) -> None:
    registry.put_image("ml/train", "multi", media_type=OCI_INDEX)
    async with RegistryClient({registry.hostport: ("ci", "s3cret")}) as client:
        assert await client.exists(dest(registry), "multi")


async def test_wrong_password_is_a_clear_error(registry: RegistryServer) -> None:
    async with RegistryClient({registry.hostport: ("ci", "nope")}) as client:
        with pytest.raises(RegistryError, match="refused the configured credentials"):
            await client.exists(dest(registry), "abc")


async def test_anonymous_pull() -> None:
    async with RegistryServer(users=USERS, anonymous_pull=True) as server:
        server.put_image("public/img", "v1")
        async with RegistryClient() as client:
            assert await client.exists(dest(server, "public/img"), "v1")
    async with RegistryServer(users=USERS) as server, RegistryClient() as client:
        with pytest.raises(RegistryError, match="refused anonymous access"):
            await client.exists(dest(server, "public/img"), "v1")


async def test_open_registry_without_auth() -> None:
    async with RegistryServer(auth=False) as server, RegistryClient() as client:
        server.put_image("ml/train", "t")
        assert await client.exists(dest(server), "t")
        assert not await client.exists(dest(server), "u")


async def test_unreachable_registry() -> None:
    async with RegistryServer(auth=False) as server:
        gone = dest(server)
    async with RegistryClient(timeout=5) as client:
        with pytest.raises(RegistryError, match="cannot reach"):
            await client.exists(gone, "t")


@pytest.mark.parametrize(
    ("header", "scheme", "params"),
    [
        (
            'Bearer realm="https://auth.example/token",service="reg",scope="repository:a:pull"',
            "bearer",
            {"realm": "https://auth.example/token", "service": "reg", "scope": "repository:a:pull"},
        ),
        ('Basic realm="Registry"', "basic", {"realm": "Registry"}),
        ("", "", {}),
    ],
)
def test_parse_challenge(header: str, scheme: str, params: dict[str, str]) -> None:
    assert parse_challenge(header) == (scheme, params)


def test_docker_config_auths() -> None:
    config = {
        "auths": {
            "https://registry.example:5000/v1/": {"auth": "Y2k6czNjcmV0"},
            "ghcr.io": {"username": "bot", "password": "tok"},
            "bad": "not a mapping",
        }
    }
    assert docker_config_auths(config) == {
        "registry.example:5000": ("ci", "s3cret"),
        "ghcr.io": ("bot", "tok"),
    }


async def test_ecr_describe_images(s3_endpoint: str, aws_env: None) -> None:
    # Creating a boto3 client reads botocore's data files: off the loop.
    ecr = await asyncio.to_thread(
        boto3.client, "ecr", endpoint_url=s3_endpoint, region_name="us-east-1"
    )
    await asyncio.to_thread(ecr.create_repository, repositoryName="ml/train")
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {},
            "layers": [],
        }
    )
    await asyncio.to_thread(
        ecr.put_image, repositoryName="ml/train", imageManifest=manifest, imageTag="abc"
    )
    account = "123456789012"
    target = Destination(
        RegistryKind.ECR,
        f"{account}.dkr.ecr.us-east-1.amazonaws.com",
        "ml/train",
        "us-east-1",
        account,
    )
    async with RegistryClient(ecr_endpoint_url=s3_endpoint) as client:
        assert await client.exists(target, "abc")
        # ECR's own imageDigest (moto computes it its own way; ECR hashes the manifest).
        described = await asyncio.to_thread(
            ecr.describe_images, repositoryName="ml/train", imageIds=[{"imageTag": "abc"}]
        )
        assert await client.digest(target, "abc") == described["imageDetails"][0]["imageDigest"]
        assert not await client.exists(target, "other")
        missing = Destination(RegistryKind.ECR, target.host, "no/repo", "us-east-1", account)
        with pytest.raises(RegistryError, match="ECR repository does not exist"):
            await client.exists(missing, "abc")


async def _token(session: aiohttp.ClientSession, server: RegistryServer, scope: str,
                 auth: tuple[str, str] | None) -> int | str:  # fmt: skip
    params = {"service": server.service, "scope": scope}
    headers = {"Authorization": aiohttp.encode_basic_auth(*auth)} if auth else {}
    async with session.get(f"{server.url}/token", params=params, headers=headers) as r:
        return r.status if r.status != 200 else str((await r.json())["token"])


async def test_sandbox_registry_push_needs_an_account() -> None:
    """The peer itself: a push token only for a known user; a pushed manifest is served."""
    manifest = b'{"schemaVersion": 2}'
    ctype = "application/vnd.oci.image.manifest.v1+json"
    async with (
        RegistryServer(users=USERS, anonymous_pull=True) as server,
        aiohttp.ClientSession() as session,
    ):
        url = f"{server.url}/v2/ml/train/manifests/v1"
        anon = await _token(session, server, "repository:ml/train:pull,push", None)
        assert isinstance(anon, str)
        put = {"Authorization": f"Bearer {anon}", "Content-Type": ctype}
        async with session.put(url, data=manifest, headers=put) as r:
            assert r.status == 401  # anonymous tokens carry pull only
        user = await _token(session, server, "repository:ml/train:pull,push",
                            ("ci", "s3cret"))  # fmt: skip
        assert isinstance(user, str)
        put["Authorization"] = f"Bearer {user}"
        async with session.put(url, data=manifest, headers=put) as r:
            assert r.status == 201
            digest = r.headers["Docker-Content-Digest"]
        get = {"Authorization": f"Bearer {user}", "Accept": ctype}
        async with session.get(url, headers=get) as r:
            assert (r.status, await r.read(), r.headers["Docker-Content-Digest"]) == (
                200, manifest, digest,
            )  # fmt: skip
        # A client that does not accept the manifest's type does not get it.
        async with session.head(url, headers={**get, "Accept": "text/plain"}) as r:
            assert r.status == 404
        assert await _token(session, server, "repository:ml/train:pull",
                            ("ci", "wrong")) == 401  # fmt: skip
