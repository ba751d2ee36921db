"""Registry logins from the pod's cloud identity, for the image-exists check.

With no password configured for the host, the v2 check logs in the way `docker login` does with
a cloud identity, so a pod with Workload Identity needs no registry Secret:

- **Artifact Registry** (`REGION-docker.pkg.dev`): an OAuth2 access token from Google's
  application default credentials (GKE Workload Identity, the metadata server, or
  `GOOGLE_APPLICATION_CREDENTIALS`) is the password of the user `oauth2accesstoken` at the
  registry's token endpoint. google-auth blocks (it uses `requests`), so it runs in the
  executor; the credentials object is kept and refreshed only when its token expires.
- **ACR** (`NAME.azurecr.io`): Azure Workload Identity puts a federated service-account token
  in `AZURE_FEDERATED_TOKEN_FILE`; it is exchanged at Entra ID
  (`{AZURE_AUTHORITY_HOST}{AZURE_TENANT_ID}/oauth2/v2.0/token`, client-credentials grant with a
  JWT client assertion) for an access token, which ACR's `/oauth2/exchange` turns into an ACR
  refresh token. That refresh token is the password of the user
  `00000000-0000-0000-0000-000000000000` at the registry's token endpoint (what
  `az acr login --expose-token` hands to docker). Refresh tokens are kept per registry until
  shortly before their stated expiry (ACR's are valid for 3 hours).

Both raise `IdentityError` saying which identity was missing or refused, so the caller can log
it and build anyway.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from launch_agent.adapters.bounded import (
    MAX_TOKEN_FILE,
    MIB,
    BodyTooLarge,
    read_body,
    read_text_file,
)
from launch_agent.model.safe_load import Limits, load_json

GAR_USER = "oauth2accesstoken"
ACR_USER = "00000000-0000-0000-0000-000000000000"
GOOGLE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ACR_SCOPE = "https://containerregistry.azure.net/.default"
ACR_REFRESH_SECONDS = 3 * 3600  # ACR's refresh token lifetime when it does not say
AZURE_AUTHORITY = "https://login.microsoftonline.com/"
EARLY = 300.0  # renew this long before a token expires


class IdentityError(RuntimeError):
    """No usable cloud identity for a registry login; says which and why."""


class GoogleLogin:
    """(`oauth2accesstoken`, access token) from application default credentials."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._credentials: Any = None
        self._lock = threading.Lock()

    def _token(self) -> str:
        import google.auth
        import google.auth.exceptions
        from google.auth.transport.requests import Request

        with self._lock:
            try:
                if self._credentials is None:
                    self._credentials, _ = google.auth.default(scopes=list(GOOGLE_SCOPES))
                if not self._credentials.valid:
                    self._credentials.refresh(Request())
            except google.auth.exceptions.GoogleAuthError as exc:
                raise IdentityError(
                    "no Google credentials for Artifact Registry (Workload Identity on the"
                    f" agent's service account, or GOOGLE_APPLICATION_CREDENTIALS): {exc}"
                ) from exc
            return str(self._credentials.token)

    async def login(self) -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                return GAR_USER, await loop.run_in_executor(None, self._token)
        except TimeoutError:
            raise IdentityError(f"no Google access token within {self.timeout:g}s") from None


@dataclass(frozen=True, slots=True)
class AzureIdentity:
    """Azure Workload Identity's environment (set on the pod by its mutating webhook)."""

    client_id: str
    tenant_id: str
    token_file: Path
    authority: str = AZURE_AUTHORITY

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AzureIdentity:
        env = os.environ if environ is None else environ
        names = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE")
        missing = [n for n in names if not env.get(n)]
        if missing:
            raise IdentityError(
                "no Azure Workload Identity for ACR: "
                + ", ".join(missing)
                + " not set (label the agent's pod azure.workload.identity/use: 'true' and"
                " annotate its service account with azure.workload.identity/client-id)"
            )
        authority = env.get("AZURE_AUTHORITY_HOST") or AZURE_AUTHORITY
        return cls(
            env["AZURE_CLIENT_ID"],
            env["AZURE_TENANT_ID"],
            Path(env["AZURE_FEDERATED_TOKEN_FILE"]),
            authority if authority.endswith("/") else authority + "/",
        )


class AzureLogin:
    """(`00000000-…`, ACR refresh token) per registry, from Azure Workload Identity."""

    def __init__(
        self, identity: AzureIdentity | None = None, *, max_response_bytes: int = 4 * MIB
    ) -> None:
        self._identity = identity
        self.max_response_bytes = max_response_bytes
        self._tokens: dict[str, tuple[str, float]] = {}  # registry → (refresh token, expiry)

    async def login(
        self, session: aiohttp.ClientSession, registry: str, base_url: str
    ) -> tuple[str, str]:
        """`registry` is the ACR host (the exchange's `service`), `base_url` where it answers."""
        cached = self._tokens.get(registry)
        if cached is not None and cached[1] - EARLY > time.monotonic():
            return ACR_USER, cached[0]
        identity = self._identity or AzureIdentity.from_env()
        assertion = await asyncio.to_thread(_read_token_file, identity.token_file)
        aad = await _post_json(
            session,
            f"{identity.authority}{identity.tenant_id}/oauth2/v2.0/token",
            {
                "client_id": identity.client_id,
                "grant_type": "client_credentials",
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": assertion,
                "scope": ACR_SCOPE,
            },
            "Entra ID token request",
            self.max_response_bytes,
        )
        access = aad.get("access_token")
        if not isinstance(access, str) or not access:
            raise IdentityError("Entra ID answered without an access_token")
        exchanged = await _post_json(
            session,
            f"{base_url}/oauth2/exchange",
            {
                "grant_type": "access_token",
                "service": registry,
                "tenant": identity.tenant_id,
                "access_token": access,
            },
            f"ACR token exchange at {registry}",
            self.max_response_bytes,
        )
        refresh = exchanged.get("refresh_token")
        if not isinstance(refresh, str) or not refresh:
            raise IdentityError(f"ACR token exchange at {registry} returned no refresh_token")
        lifetime = exchanged.get("expires_in")
        seconds = float(lifetime) if isinstance(lifetime, int | float) else ACR_REFRESH_SECONDS
        self._tokens[registry] = (refresh, time.monotonic() + seconds)
        return ACR_USER, refresh


def _read_token_file(path: Path) -> str:
    try:
        return read_text_file(path, MAX_TOKEN_FILE, what="a token file").strip()
    except OSError as exc:
        raise IdentityError(f"AZURE_FEDERATED_TOKEN_FILE {path}: {exc}") from exc


async def _post_json(
    session: aiohttp.ClientSession, url: str, form: Mapping[str, str], what: str, limit: int
) -> Mapping[str, Any]:
    try:
        async with session.post(url, data=dict(form)) as response:
            raw = await read_body(
                response,
                limit,
                what=f"{what} {url}: the answer",
                setting="builder.max_response_bytes",
            )
            if response.status != 200:
                detail = raw[:300].decode(errors="replace")
                raise IdentityError(f"{what} {url} answered {response.status}: {detail}")
        body = load_json(raw, source=what, limits=Limits(max_bytes=len(raw) + 1))
    except BodyTooLarge as exc:
        raise IdentityError(str(exc)) from None
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise IdentityError(f"{what} {url} failed: {str(exc) or type(exc).__name__}") from exc
    if not isinstance(body, Mapping):
        raise IdentityError(f"{what} {url} answered with something that is not a JSON object")
    return body
