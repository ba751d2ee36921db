"""Does `repository:tag` exist? ECR through boto3, every other registry through the v2 API.

W&B's agent checks existence only for its three clouds (and lists every image of an Artifact
Registry repository to do it); for any other registry it runs `docker image inspect`, absent in
a pod, so it rebuilds every time. Here any registry speaking the Docker Registry HTTP API v2
(Artifact Registry, ACR, Harbor, GHCR, Docker Hub, `registry:2`) is asked one question:

    HEAD /v2/<repository>/manifests/<tag>     (Accept: Docker v2, manifest list, OCI, OCI index)

A 401 carries a `WWW-Authenticate` challenge; for `Bearer` the client fetches a token from the
realm (with HTTP Basic credentials when it has some for that host, anonymously otherwise) for
`repository:<name>:pull`, caches it per (host, scope) and repeats the HEAD once. 200 means yes,
404 means no, anything else is a `RegistryError` that says what the registry answered.

ECR is asked with `describe_images` (its IAM-authenticated API; IRSA in a pod) in the executor,
with one boto3 client per region for the life of the process.

Artifact Registry and ACR hosts without configured credentials log in with the pod's cloud
identity (`registry_identity.py`): Google's application default credentials as the
`oauth2accesstoken` user, or an ACR refresh token exchanged for an Azure Workload Identity
token. `endpoints` maps a registry host to the base URL to speak to (a pull-through mirror, or
a loopback test server standing in for a cloud registry).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import ssl
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp

from launch_agent.adapters.registry_identity import AzureLogin, GoogleLogin, IdentityError
from launch_agent.adapters.tls import client_ssl_context
from launch_agent.model.build import Destination, RegistryKind

ACCEPT = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)
_PARAM = re.compile(r'(\w+)="([^"]*)"')
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class RegistryError(RuntimeError):
    """The registry could not answer "does it exist"; the message says what happened."""


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="..",service=".."` → ("bearer", {"realm": .., "service": ..})."""
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_PARAM.findall(rest))


def docker_config_auths(config: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Credentials per host from a docker `config.json` (`auths.<host>.auth` = b64 user:pw)."""
    out: dict[str, tuple[str, str]] = {}
    for host, entry in (config.get("auths") or {}).items():
        if not isinstance(entry, Mapping):
            continue
        if "auth" in entry:
            user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
        else:
            user, password = str(entry.get("username", "")), str(entry.get("password", ""))
        name = re.sub(r"^https?://", "", str(host)).split("/")[0]
        out[name] = (user, password)
    return out


class RegistryClient:
    """`async with RegistryClient(credentials) as reg: await reg.exists(dest, tag)`.

    `credentials` maps a registry host (`host[:port]`) to (user, password) for the token
    endpoint. Loopback hosts and `insecure_hosts` are spoken to over http, others over https.
    """

    def __init__(
        self,
        credentials: Mapping[str, tuple[str, str]] | None = None,
        *,
        insecure_hosts: frozenset[str] = frozenset(),
        timeout: float = 30.0,
        ecr_endpoint_url: str | None = None,
        endpoints: Mapping[str, str] | None = None,
        google: GoogleLogin | None = None,
        azure: AzureLogin | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.credentials = dict(credentials or {})
        # A registry behind the same private CA as a self-hosted W&B (`tls.client_ssl_context`).
        self._ssl = ssl_context if ssl_context is not None else client_ssl_context()
        self.insecure_hosts = insecure_hosts
        self.timeout = timeout
        self.endpoints = {host: url.rstrip("/") for host, url in (endpoints or {}).items()}
        self.google = google or GoogleLogin(timeout)
        self.azure = azure or AzureLogin()
        self._ecr_endpoint = ecr_endpoint_url
        self._session: aiohttp.ClientSession | None = None
        self._tokens: dict[tuple[str, str], str] = {}
        self._ecr: dict[str, Any] = {}
        self._ecr_lock = threading.Lock()

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(ssl=self._ssl),
            )
        return self._session

    async def exists(self, dest: Destination, tag: str) -> bool:
        """True if `dest:tag` is in the registry; `RegistryError` if it cannot be told."""
        if dest.kind is RegistryKind.ECR:
            return await self._ecr_exists(dest, tag)
        return await self._v2_exists(dest, tag)

    # --- Docker Registry HTTP API v2 ------------------------------------------------------------

    def _base(self, host: str) -> str:
        if host in self.endpoints:
            return self.endpoints[host]
        plain = host.split(":", maxsplit=1)[0] in LOOPBACK or host in self.insecure_hosts
        return f"{'http' if plain else 'https'}://{host}"

    async def _v2_exists(self, dest: Destination, tag: str) -> bool:
        url = f"{self._base(dest.host)}/v2/{dest.repository}/manifests/{tag}"
        scope = f"repository:{dest.repository}:pull"
        where = f"{dest.uri}:{tag}"
        token = self._tokens.get((dest.host, scope))
        status, challenge = await self._head(url, token, where)
        if status == 401:
            token = await self._authenticate(dest, scope, challenge, where)
            status, challenge = await self._head(url, token, where)
        if status == 200:
            return True
        if status == 404:
            return False
        if status in (401, 403):
            raise RegistryError(
                f"{where}: the registry refused access ({status}) even with a token; check the"
                f" pull credentials for {dest.host}"
            )
        raise RegistryError(f"{where}: unexpected answer {status} from {url}")

    async def _head(self, url: str, auth: str | None, where: str) -> tuple[int, str]:
        headers = {"Accept": ACCEPT}
        if auth:
            headers["Authorization"] = auth
        try:
            async with self._http().head(url, headers=headers, allow_redirects=True) as response:
                return response.status, response.headers.get("WWW-Authenticate", "")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RegistryError(
                f"{where}: cannot reach {url}: {str(exc) or type(exc).__name__}"
            ) from exc

    async def _login(self, dest: Destination, where: str) -> tuple[str, str] | None:
        """Configured credentials for the host, else the pod's cloud identity (GAR, ACR)."""
        creds = self.credentials.get(dest.host)
        if creds is not None or dest.kind not in (RegistryKind.GAR, RegistryKind.ACR):
            return creds
        try:
            if dest.kind is RegistryKind.GAR:
                return await self.google.login()
            return await self.azure.login(self._http(), dest.host, self._base(dest.host))
        except IdentityError as exc:
            raise RegistryError(f"{where}: {exc}") from exc

    async def _authenticate(self, dest: Destination, scope: str, challenge: str, where: str) -> str:
        host = dest.host
        scheme, params = parse_challenge(challenge)
        creds = await self._login(dest, where)
        if scheme == "basic":
            if creds is None:
                raise RegistryError(f"{where}: {host} wants a password and none is configured")
            return _basic(*creds)
        if scheme != "bearer" or "realm" not in params:
            raise RegistryError(f"{where}: {host} sent an unusable challenge {challenge!r}")
        query = {"scope": params.get("scope") or scope}
        if "service" in params:
            query["service"] = params["service"]
        headers = {"Authorization": _basic(*creds)} if creds else {}
        try:
            async with self._http().get(params["realm"], params=query, headers=headers) as response:
                if response.status in (401, 403):
                    who = "the configured credentials" if creds else "anonymous access"
                    raise RegistryError(
                        f"{where}: the token service {params['realm']} refused {who}"
                        f" ({response.status})"
                    )
                if response.status != 200:
                    raise RegistryError(
                        f"{where}: the token service {params['realm']} answered {response.status}"
                    )
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise RegistryError(
                f"{where}: token request to {params['realm']} failed: {exc}"
            ) from exc
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not token:
            raise RegistryError(f"{where}: the token service {params['realm']} sent no token")
        bearer = f"Bearer {token}"
        self._tokens[(host, scope)] = bearer
        return bearer

    # --- ECR --------------------------------------------------------------------------------------

    def _ecr_client(self, region: str) -> Any:
        with self._ecr_lock:
            if region not in self._ecr:
                import boto3

                self._ecr[region] = boto3.session.Session().client(
                    "ecr", region_name=region, endpoint_url=self._ecr_endpoint
                )
            return self._ecr[region]

    def _describe(self, dest: Destination, tag: str) -> bool:
        from botocore.exceptions import ClientError

        client = self._ecr_client(dest.region)
        try:
            client.describe_images(
                registryId=dest.account,
                repositoryName=dest.repository,
                imageIds=[{"imageTag": tag}],
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "ImageNotFoundException":
                return False
            if code == "RepositoryNotFoundException":
                raise RegistryError(
                    f"{dest.uri}: the ECR repository does not exist; create it (Kaniko cannot)"
                ) from exc
            raise RegistryError(f"{dest.uri}:{tag}: ECR describe_images failed: {exc}") from exc
        return True

    async def _ecr_exists(self, dest: Destination, tag: str) -> bool:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                return await loop.run_in_executor(
                    None, functools.partial(self._describe, dest, tag)
                )
        except TimeoutError:
            raise RegistryError(
                f"{dest.uri}:{tag}: ECR gave no answer in {self.timeout:g}s"
            ) from None
