"""Which digest does `repository:tag` have (if any)? ECR through boto3, others through v2.

W&B's agent checks existence only for its three clouds (and lists every image of an Artifact
Registry repository to do it); for any other registry it runs `docker image inspect`, absent in
a pod, so it rebuilds every time. Here any registry speaking the Docker Registry HTTP API v2
(Artifact Registry, ACR, Harbor, GHCR, Docker Hub, `registry:2`) is asked one question:

    HEAD /v2/<repository>/manifests/<tag>     (Accept: Docker v2, manifest list, OCI, OCI index)

and answers with the manifest's `Docker-Content-Digest` (the builder trusts a tag only when
that digest is one it built, `adapters/digest_record.py`). A registry that leaves the header
out is asked `GET` and the manifest is hashed, as the distribution spec defines the digest.

A 401 carries a `WWW-Authenticate` challenge; for `Bearer` the client fetches a token from the
realm (with HTTP Basic credentials when it has some for that host, anonymously otherwise) for
`repository:<name>:pull`, caches it per (host, scope) and repeats the HEAD once. 200 means yes,
404 means no, anything else is a `RegistryError` that says what the registry answered.

ECR is asked with `describe_images` (its IAM-authenticated API; IRSA in a pod) in the executor,
with one boto3 client per region for the life of the process; its `imageDigest` is the digest.

Every body read (a manifest, a token) is bounded by `max_response_bytes` while it streams
(`builder.max_response_bytes`, default 4 MiB, registries' own cap on a manifest).

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
import hashlib
import re
import ssl
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp

from launch_agent.adapters.bounded import BodyTooLarge, read_body
from launch_agent.adapters.registry_identity import AzureLogin, GoogleLogin, IdentityError
from launch_agent.adapters.tls import client_ssl_context
from launch_agent.model.build import Destination, RegistryKind
from launch_agent.model.config import BuilderConfig
from launch_agent.model.safe_load import InputError, Limits, load_json

ACCEPT = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)
_PARAM = re.compile(r'(\w+)="([^"]*)"')
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
SETTING = "builder.max_response_bytes"
MAX_RESPONSE_BYTES = BuilderConfig().max_response_bytes
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
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.credentials = dict(credentials or {})
        self.max_response_bytes = max_response_bytes
        # A registry behind the same private CA as a self-hosted W&B (`tls.client_ssl_context`).
        self._ssl = ssl_context if ssl_context is not None else client_ssl_context()
        self.insecure_hosts = insecure_hosts
        self.timeout = timeout
        self.endpoints = {host: url.rstrip("/") for host, url in (endpoints or {}).items()}
        self.google = google or GoogleLogin(timeout)
        self.azure = azure or AzureLogin(max_response_bytes=max_response_bytes)
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
        return await self.digest(dest, tag) is not None

    async def digest(self, dest: Destination, tag: str) -> str | None:
        """The digest (`sha256:...`) `dest:tag` points at now; None if there is no such tag;
        `RegistryError` if it cannot be told."""
        if dest.kind is RegistryKind.ECR:
            return await self._ecr_digest(dest, tag)
        return await self._v2_digest(dest, tag)

    # --- Docker Registry HTTP API v2 ------------------------------------------------------------

    def _base(self, host: str) -> str:
        if host in self.endpoints:
            return self.endpoints[host]
        plain = host.split(":", maxsplit=1)[0] in LOOPBACK or host in self.insecure_hosts
        return f"{'http' if plain else 'https'}://{host}"

    async def _v2_digest(self, dest: Destination, tag: str) -> str | None:
        url = f"{self._base(dest.host)}/v2/{dest.repository}/manifests/{tag}"
        scope = f"repository:{dest.repository}:pull"
        where = f"{dest.uri}:{tag}"
        token = self._tokens.get((dest.host, scope))
        status, challenge, digest = await self._head(url, token, where)
        if status == 401:
            token = await self._authenticate(dest, scope, challenge, where)
            status, challenge, digest = await self._head(url, token, where)
        if status == 200:
            return digest if digest is not None else await self._hashed(url, token, where)
        if status == 404:
            return None
        if status in (401, 403):
            raise RegistryError(
                f"{where}: the registry refused access ({status}) even with a token; check the"
                f" pull credentials for {dest.host}"
            )
        raise RegistryError(f"{where}: unexpected answer {status} from {url}")

    async def _head(self, url: str, auth: str | None, where: str) -> tuple[int, str, str | None]:
        """(status, the challenge, the digest the registry names, when it is a digest)."""
        headers = {"Accept": ACCEPT}
        if auth:
            headers["Authorization"] = auth
        try:
            async with self._http().head(url, headers=headers, allow_redirects=True) as response:
                digest = response.headers.get("Docker-Content-Digest", "").strip().lower()
                return (
                    response.status,
                    response.headers.get("WWW-Authenticate", ""),
                    digest if _DIGEST.match(digest) else None,
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RegistryError(
                f"{where}: cannot reach {url}: {str(exc) or type(exc).__name__}"
            ) from exc

    async def _hashed(self, url: str, auth: str | None, where: str) -> str:
        """The digest of the manifest as served: sha256 of its bytes (the spec's definition)."""
        headers = {"Accept": ACCEPT}
        if auth:
            headers["Authorization"] = auth
        try:
            async with self._http().get(url, headers=headers, allow_redirects=True) as response:
                body = await read_body(
                    response,
                    self.max_response_bytes,
                    what=f"the manifest of {where}",
                    setting=SETTING,
                )
                if response.status != 200:
                    raise RegistryError(f"{where}: GET answered {response.status} after HEAD 200")
        except BodyTooLarge as exc:
            raise RegistryError(str(exc)) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RegistryError(
                f"{where}: cannot reach {url}: {str(exc) or type(exc).__name__}"
            ) from exc
        return "sha256:" + hashlib.sha256(body).hexdigest()

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
                raw = await read_body(
                    response,
                    self.max_response_bytes,
                    what=f"the token service {params['realm']}'s answer",
                    setting=SETTING,
                )
            body = load_json(raw, source="the token", limits=Limits(max_bytes=len(raw) + 1))
        except BodyTooLarge as exc:
            raise RegistryError(f"{where}: {exc}") from None
        except (aiohttp.ClientError, TimeoutError, InputError) as exc:
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

    def _describe(self, dest: Destination, tag: str) -> str | None:
        from botocore.exceptions import ClientError

        client = self._ecr_client(dest.region)
        try:
            answer = client.describe_images(
                registryId=dest.account,
                repositoryName=dest.repository,
                imageIds=[{"imageTag": tag}],
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "ImageNotFoundException":
                return None
            if code == "RepositoryNotFoundException":
                raise RegistryError(
                    f"{dest.uri}: the ECR repository does not exist; create it (Kaniko cannot)"
                ) from exc
            raise RegistryError(f"{dest.uri}:{tag}: ECR describe_images failed: {exc}") from exc
        details = answer.get("imageDetails") or [{}]
        digest = str(details[0].get("imageDigest") or "").lower()
        if not _DIGEST.match(digest):
            raise RegistryError(f"{dest.uri}:{tag}: ECR describe_images named no sha256 digest")
        return digest

    async def _ecr_digest(self, dest: Destination, tag: str) -> str | None:
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
