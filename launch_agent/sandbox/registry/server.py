"""`RegistryServer`: the parts of the Docker Registry HTTP API v2 an image-exists check uses.

Follows the distribution spec and Docker's token authentication spec:

- `GET /v2/` answers 401 with `WWW-Authenticate: Bearer realm="<url>/token",service="<svc>"`
  unless the request carries a valid token (or auth is off);
- `GET /token?service=..&scope=repository:<name>:pull[,push]` with HTTP Basic credentials (or
  none, for anonymous pull when `anonymous_pull`) returns `{"token": ..., "access_token": ...}`;
- `HEAD|GET /v2/<name>/manifests/<ref>` answers 200 with `Docker-Content-Digest` and the
  manifest's media type, 404 `MANIFEST_UNKNOWN`, or 401 with a challenge naming the scope;
- `PUT /v2/<name>/manifests/<ref>` stores a manifest (what Kaniko's push ends with).

A manifest is returned only if its media type is in the request's `Accept` header (a client
that forgets the OCI index type does not see multi-arch images), as real registries do.

Tokens are opaque random strings tied to their granted scopes. `requests` records each
(method, path, status) so tests can assert on the protocol exchange.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

from aiohttp import web

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


@dataclass
class _Manifest:
    media_type: str
    body: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.body).hexdigest()


@dataclass
class _Token:
    user: str | None
    scopes: set[tuple[str, str]] = field(default_factory=set)  # (repository, action)


class RegistryServer:
    """`async with RegistryServer(users={"ci": "pw"}) as reg: reg.url` (loopback, free port)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        users: dict[str, str] | None = None,
        auth: bool = True,
        anonymous_pull: bool = False,
        service: str = "sandbox-registry",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.ssl_context = ssl_context  # HTTPS, for registries behind a private CA
        self.host = host
        self.port = port
        self.users = dict(users or {})
        self.auth = auth
        self.anonymous_pull = anonymous_pull
        self.service = service
        self.manifests: dict[tuple[str, str], _Manifest] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.tokens_issued = 0
        self._tokens: dict[str, _Token] = {}
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def hostport(self) -> str:
        return f"{self.host}:{self.port}"

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> RegistryServer:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/v2/", self._base)
        app.router.add_get("/token", self._token)
        app.router.add_route("*", "/v2/{name:.+}/manifests/{ref}", self._manifest)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context
        )
        await site.start()
        server = site._server
        if self.port == 0 and server is not None:
            sockets = getattr(server, "sockets", None) or []
            self.port = int(sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None

    # --- test helpers -------------------------------------------------------------------------

    def put_image(
        self, repository: str, tag: str, media_type: str = DOCKER_MANIFEST, *, build: str = ""
    ) -> str:
        """Store a minimal manifest under `repository:tag` (and its digest); return the digest.

        `build` goes into the manifest, so two builds of one tag (or an attacker's image under
        someone else's tag) have different digests, as real ones do."""
        manifest = _minimal(tag, media_type, build)
        self.manifests[(repository, tag)] = manifest
        self.manifests[(repository, manifest.digest)] = manifest
        return manifest.digest

    @staticmethod
    def digest_of(tag: str, media_type: str = DOCKER_MANIFEST, *, build: str = "") -> str:
        """The digest `put_image` with the same arguments stores (nothing is stored)."""
        return _minimal(tag, media_type, build).digest

    def digest(self, repository: str, tag: str) -> str | None:
        """The digest `repository:tag` points at now, if any."""
        found = self.manifests.get((repository, tag))
        return found.digest if found is not None else None

    # --- handlers -----------------------------------------------------------------------------

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        self.requests.append((request.method, request.path, response.status))
        return response

    def _challenge(self, scope: str | None, error: str = "UNAUTHORIZED") -> web.Response:
        params = f'Bearer realm="{self.url}/token",service="{self.service}"'
        if scope:
            params += f',scope="{scope}"'
        body = {"errors": [{"code": error, "message": "authentication required"}]}
        return web.json_response(body, status=401, headers={"WWW-Authenticate": params})

    def _bearer(self, request: web.Request) -> _Token | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return None
        return self._tokens.get(header[len("Bearer ") :])

    async def _base(self, request: web.Request) -> web.Response:
        if self.auth and self._bearer(request) is None:
            return self._challenge(None)
        return web.json_response({})

    async def _token(self, request: web.Request) -> web.Response:
        if request.query.get("service") != self.service:
            return web.json_response({"errors": [{"code": "DENIED"}]}, status=400)
        user: str | None = None
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            try:
                name, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return web.json_response({"errors": [{"code": "UNAUTHORIZED"}]}, status=401)
            if self.users.get(name) != password:
                return web.json_response({"errors": [{"code": "UNAUTHORIZED"}]}, status=401)
            user = name
        elif not self.anonymous_pull:
            return web.json_response({"errors": [{"code": "UNAUTHORIZED"}]}, status=401)
        granted = _Token(user)
        for scope in request.query.getall("scope", []):
            kind, _, rest = scope.partition(":")
            repo, _, actions = rest.rpartition(":")
            if kind != "repository" or not repo:
                continue
            for action in actions.split(","):
                # Anonymous users may pull; pushing needs an account.
                if action == "pull" or (action == "push" and user is not None):
                    granted.scopes.add((repo, action))
        token = secrets.token_urlsafe(24)
        self._tokens[token] = granted
        self.tokens_issued += 1
        return web.json_response({"token": token, "access_token": token, "expires_in": 300})

    async def _manifest(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        ref = request.match_info["ref"]
        action = "push" if request.method in ("PUT", "DELETE") else "pull"
        if request.method not in ("GET", "HEAD", "PUT"):
            return web.json_response({"errors": [{"code": "UNSUPPORTED"}]}, status=405)
        if self.auth:
            token = self._bearer(request)
            if token is None or (name, action) not in token.scopes:
                return self._challenge(f"repository:{name}:{action}")
        if request.method == "PUT":
            media_type = request.headers.get("Content-Type", DOCKER_MANIFEST)
            pushed = _Manifest(media_type, await request.read())
            self.manifests[(name, ref)] = pushed
            self.manifests[(name, pushed.digest)] = pushed
            return web.Response(status=201, headers={"Docker-Content-Digest": pushed.digest})
        manifest = self.manifests.get((name, ref))
        if manifest is None:
            return _unknown(name, ref)
        accepted = {
            part.split(";")[0].strip()
            for value in request.headers.getall("Accept", [])
            for part in value.split(",")
        }
        if manifest.media_type not in accepted:
            # What registries do for a client that cannot take this manifest type.
            return _unknown(name, ref)
        headers = {
            "Docker-Content-Digest": manifest.digest,
            "Content-Type": manifest.media_type,
        }
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(manifest.body))
            return web.Response(status=200, headers=headers)
        return web.Response(status=200, body=manifest.body, headers=headers)


def _minimal(tag: str, media_type: str, build: str) -> _Manifest:
    fields: dict[str, object] = {"schemaVersion": 2, "mediaType": media_type, "layers": []}
    fields["tag"] = tag
    if build:
        fields["build"] = build
    return _Manifest(media_type, json.dumps(fields, sort_keys=True).encode())


def _unknown(name: str, ref: str) -> web.Response:
    body = {"errors": [{"code": "MANIFEST_UNKNOWN", "message": f"{name}:{ref} not found"}]}
    return web.json_response(body, status=404)
