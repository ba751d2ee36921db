"""Registry logins from cloud identities, against the sandbox registry (token auth) on loopback.

- Artifact Registry: google-auth's application default credentials from a service-account key
  file whose `token_uri` is a loopback OAuth2 token server (it checks the signed JWT assertion
  with the key's public half); the access token is the `oauth2accesstoken` user's password at
  the sandbox registry's token endpoint.
- ACR: a federated token file, a loopback Entra ID token endpoint (client-credentials grant with
  the JWT client assertion) and a loopback ACR front that answers `/oauth2/exchange` and passes
  `/v2/...` to the sandbox registry; the refresh token is the password of ACR's all-zero user.

Cloud hosts (`us-docker.pkg.dev`, `myreg.azurecr.io`) are pointed at the loopback servers with
`RegistryClient(endpoints=...)`; nothing leaves the machine. What cannot be tested here: Google's
and Microsoft's real token services, GKE's metadata server, and whether a real ACR accepts an
access token for `https://containerregistry.azure.net/.default` at `/oauth2/exchange` (Azure's
documentation says it does; W&B's agent uses the same audience through azure-identity).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

from launch_agent.adapters.registry import RegistryClient, RegistryError
from launch_agent.adapters.registry_identity import (
    ACR_SCOPE,
    ACR_USER,
    GAR_USER,
    AzureIdentity,
    AzureLogin,
    IdentityError,
)
from launch_agent.model.build import parse_destination
from launch_agent.sandbox.registry import RegistryServer

GAR = parse_destination("us-docker.pkg.dev/proj/repo/train")
ACR = parse_destination("myreg.azurecr.io/ml/train")


@dataclass
class Peer:
    """A loopback aiohttp app and the forms it was sent."""

    url: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)
    refuse: bool = False


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


# --- Artifact Registry -------------------------------------------------------------------------


def service_account_key(token_uri: str) -> tuple[dict[str, str], bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    info = {
        "type": "service_account",
        "project_id": "proj",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "builder@proj.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    return info, public


@pytest.fixture
async def google_token_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Peer]:
    """An OAuth2 token endpoint for a service-account key file named by
    GOOGLE_APPLICATION_CREDENTIALS; it answers a correctly signed assertion only."""
    peer = Peer()
    public: list[bytes] = []

    async def token(request: web.Request) -> web.Response:
        form = dict(await request.post())
        peer.calls.append({k: str(v) for k, v in form.items()})
        if peer.refuse:
            return web.json_response({"error": "invalid_grant"}, status=400)
        try:
            # google-auth addresses the assertion to Google's token service, wherever it posts it.
            claims = jwt.decode(str(form.get("assertion")), certs=public[0], verify=True,  # type: ignore[no-untyped-call]
                                audience="https://oauth2.googleapis.com/token")  # fmt: skip
        except ValueError as exc:
            return web.json_response({"error": "invalid_grant", "detail": str(exc)}, status=400)
        if "cloud-platform" not in claims.get("scope", ""):
            return web.json_response({"error": "invalid_scope"}, status=400)
        return web.json_response(
            {"access_token": "ya29.sandbox", "expires_in": 3600, "token_type": "Bearer"}
        )

    app = web.Application()
    app.router.add_post("/token", token)
    runner, peer.url = await serve(app)
    info, pub = await asyncio.to_thread(service_account_key, f"{peer.url}/token")
    public.append(pub)
    path = tmp_path / "key.json"
    await asyncio.to_thread(path.write_text, json.dumps(info))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    try:
        yield peer
    finally:
        await runner.cleanup()


async def test_artifact_registry_logs_in_with_application_default_credentials(
    google_token_service: Peer,
) -> None:
    async with RegistryServer(users={GAR_USER: "ya29.sandbox"}) as registry:
        registry.put_image(GAR.repository, "v1")
        async with RegistryClient(endpoints={GAR.host: registry.url}) as client:
            assert await client.exists(GAR, "v1") is True
            assert await client.exists(GAR, "v2") is False
        # One access token for both checks (the credentials are kept while valid), and the
        # registry issued one pull token for the repository.
        assert len(google_token_service.calls) == 1
        assert registry.tokens_issued == 1


async def test_configured_credentials_win_over_the_identity(
    google_token_service: Peer,
) -> None:
    async with RegistryServer(users={"ci": "pw"}) as registry:
        registry.put_image(GAR.repository, "v1")
        async with RegistryClient(
            {GAR.host: ("ci", "pw")}, endpoints={GAR.host: registry.url}
        ) as client:
            assert await client.exists(GAR, "v1") is True
    assert google_token_service.calls == []


async def test_a_refused_google_identity_is_a_registry_error(
    google_token_service: Peer,
) -> None:
    google_token_service.refuse = True  # e.g. a disabled service account
    async with (
        RegistryServer(users={GAR_USER: "ya29.sandbox"}) as registry,
        RegistryClient(endpoints={GAR.host: registry.url}) as client,
    ):
        with pytest.raises(
            RegistryError, match=r"us-docker.pkg.dev/proj/repo/train:v1: no Google credentials"
        ):
            await client.exists(GAR, "v1")
    assert len(google_token_service.calls) == 1


async def test_no_google_credentials_file_is_a_registry_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    async with (
        RegistryServer(users={GAR_USER: "x"}) as registry,
        RegistryClient(endpoints={GAR.host: registry.url}) as client,
    ):
        with pytest.raises(RegistryError, match=r"GOOGLE_APPLICATION_CREDENTIALS.*missing"):
            await client.exists(GAR, "v1")


# --- ACR ---------------------------------------------------------------------------------------


@dataclass
class AzureRig:
    registry: RegistryServer
    front: Peer
    entra: Peer
    login: AzureLogin


@pytest.fixture
async def azure(tmp_path: Path) -> AsyncIterator[AzureRig]:
    token_file = tmp_path / "azure-identity-token"
    await asyncio.to_thread(token_file.write_text, "federated-jwt\n")
    entra, front = Peer(), Peer()

    async def entra_token(request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        entra.calls.append({"path": request.path, **form})
        if form.get("client_assertion") != "federated-jwt" or form.get("client_id") != "cid":
            return web.json_response({"error": "invalid_client"}, status=401)
        return web.json_response({"access_token": "aad-token", "expires_in": 3600})

    async with RegistryServer(users={ACR_USER: "acr-refresh"}) as registry:
        session = aiohttp.ClientSession()

        async def exchange(request: web.Request) -> web.Response:
            form = {k: str(v) for k, v in (await request.post()).items()}
            front.calls.append(form)
            if form.get("access_token") != "aad-token" or form.get("service") != ACR.host:
                return web.json_response({"errors": [{"code": "UNAUTHORIZED"}]}, status=401)
            return web.json_response({"refresh_token": "acr-refresh"})

        async def v2(request: web.Request) -> web.Response:
            # The rest of the registry API is the sandbox registry's.
            headers = {k: v for k, v in request.headers.items() if k in ("Authorization", "Accept")}
            async with session.request(
                request.method, registry.url + request.path_qs, headers=headers
            ) as answer:
                body = await answer.read()
                passed = {
                    k: v
                    for k, v in answer.headers.items()
                    if k in ("WWW-Authenticate", "Docker-Content-Digest", "Content-Type")
                }
                return web.Response(status=answer.status, body=body, headers=passed)

        app = web.Application()
        app.router.add_post("/tenant-1/oauth2/v2.0/token", entra_token)
        app.router.add_post("/oauth2/exchange", exchange)
        app.router.add_route("*", "/v2/{tail:.*}", v2)
        runner, url = await serve(app)
        entra.url = front.url = url
        identity = AzureIdentity("cid", "tenant-1", token_file, f"{url}/")
        try:
            yield AzureRig(registry, front, entra, AzureLogin(identity))
        finally:
            await runner.cleanup()
            await session.close()


async def test_acr_logs_in_with_an_exchanged_refresh_token(azure: AzureRig) -> None:
    azure.registry.put_image(ACR.repository, "v1")
    other = parse_destination(f"{ACR.host}/ml/other")
    async with RegistryClient(endpoints={ACR.host: azure.front.url}, azure=azure.login) as client:
        assert await client.exists(ACR, "v1") is True
        assert await client.exists(other, "v1") is False
    assert azure.entra.calls == [
        {
            "path": "/tenant-1/oauth2/v2.0/token",
            "client_id": "cid",
            "grant_type": "client_credentials",
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": "federated-jwt",
            "scope": ACR_SCOPE,
        }
    ]
    assert azure.front.calls == [
        {
            "grant_type": "access_token",
            "service": ACR.host,
            "tenant": "tenant-1",
            "access_token": "aad-token",
        }
    ]
    # Two repositories, two pull tokens, one exchange: the refresh token is kept.
    assert azure.registry.tokens_issued == 2


async def test_a_refused_azure_identity_is_a_registry_error(
    azure: AzureRig, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-token"
    await asyncio.to_thread(wrong.write_text, "someone-else")
    login = AzureLogin(AzureIdentity("cid", "tenant-1", wrong, f"{azure.entra.url}/"))
    async with RegistryClient(endpoints={ACR.host: azure.front.url}, azure=login) as client:
        with pytest.raises(RegistryError, match=r"Entra ID token request .* answered 401"):
            await client.exists(ACR, "v1")
    assert azure.front.calls == []


@pytest.mark.parametrize(
    ("environ", "missing"),
    [
        ({}, "AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE"),
        ({"AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t"}, "AZURE_FEDERATED_TOKEN_FILE"),
        ({"AZURE_TENANT_ID": "t", "AZURE_FEDERATED_TOKEN_FILE": "/f"}, "AZURE_CLIENT_ID"),
    ],
)
def test_azure_identity_names_what_is_missing(environ: dict[str, str], missing: str) -> None:
    with pytest.raises(IdentityError, match=f"{missing} not set"):
        AzureIdentity.from_env(environ)


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        (None, "https://login.microsoftonline.com/"),
        ("https://login.microsoftonline.us", "https://login.microsoftonline.us/"),
        ("https://login.chinacloudapi.cn/", "https://login.chinacloudapi.cn/"),
    ],
)
def test_azure_identity_from_the_webhook_environment(authority: str | None, expected: str) -> None:
    environ = {"AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t", "AZURE_FEDERATED_TOKEN_FILE": "/f"}
    if authority is not None:
        environ["AZURE_AUTHORITY_HOST"] = authority
    identity = AzureIdentity.from_env(environ)
    assert identity == AzureIdentity("c", "t", Path("/f"), expected)
