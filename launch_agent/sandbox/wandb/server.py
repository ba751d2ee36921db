"""The sandbox's W&B Launch server: GraphQL over aiohttp, plus the REST endpoints of a run.

Endpoints (what `wandb launch-agent` 0.31.0 and wandb-core call):

- `POST /graphql`: parsed and validated with graphql-core against the partial schema
  (`schema.py`), executed against `LaunchState`. Several root fields and aliases in one
  document work, variables are coerced by their declared types, and the operation name is read
  from the document when the body has no `operationName` (the launch API's hand-written
  documents never send one).
- `POST /files/{entity}/{project}/{run}/file_stream`: wandb-core's heartbeat and console.
- `PUT /upload/{token}/{entity}/{project}/{run}/{name}`: the upload URLs `createRunFiles`
  hands out. Like a presigned URL, the token in the path is the credential.

Everything else answers 404. Requests carry `Authorization: Basic base64("api:" + KEY)`; a
wrong or missing key gets 401, as W&B answers.

Faults and accounting (`faults.py`): the route key of a GraphQL request is its operation name
(or its first root field when anonymous), REST routes are `REST file_stream`, `REST upload`
and `REST other`. A request also counts under `field:<root field>` for every root field it
selects, so tests can count pops even when a client batches them into one aliased document.

Timing fidelity: aiohttp sets TCP_NODELAY and coalesces the headers with a body that is known
in advance, so every answer leaves in one write. A stand-in that let Nagle's algorithm hold
back the body made the reference agent look 3-4x slower than it is
(docs/benchmarks.md, "Method").
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import secrets
import socket
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web
from graphql import (
    FieldNode,
    GraphQLError,
    GraphQLFormattedError,
    GraphQLSchema,
    OperationDefinitionNode,
    execute_sync,
    parse,
    validate,
)
from graphql.language import DocumentNode

from launch_agent.sandbox.faults import FaultRule, Faults, RequestLog
from launch_agent.sandbox.wandb import artifact_resolvers, artifacts, resolvers, schema, wire_json
from launch_agent.sandbox.wandb.ratelimit import RateLimit
from launch_agent.sandbox.wandb.state import LaunchState, WandbError

DEFAULT_API_KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 hex characters, like W&B's
MAX_BODY_BYTES = 64 * 1024 * 1024
DOCUMENTS_CACHED = 512


@dataclass(frozen=True)
class ParsedDocument:
    """A validated document and, per operation, its name and root field names."""

    document: DocumentNode | None
    errors: tuple[GraphQLFormattedError, ...]
    operations: tuple[tuple[str | None, tuple[str, ...]], ...]

    def key(self, operation_name: str | None) -> tuple[str, tuple[str, ...]]:
        for name, fields in self.operations:
            if operation_name is None or name == operation_name:
                return (name or (fields[0] if fields else "anonymous"), fields)
        return (operation_name or "unknown", ())


def parse_document(graphql_schema: GraphQLSchema, query: str) -> ParsedDocument:
    """Parse and validate one document: pure CPU work, milliseconds for a large one."""
    try:
        document = parse(query)
    except GraphQLError as exc:
        return ParsedDocument(None, (exc.formatted,), ())
    operations = tuple(
        (
            op.name.value if op.name else None,
            tuple(s.name.value for s in op.selection_set.selections if isinstance(s, FieldNode)),
        )
        for op in document.definitions
        if isinstance(op, OperationDefinitionNode)
    )
    errors = tuple(e.formatted for e in validate(graphql_schema, document))
    return ParsedDocument(None if errors else document, errors, operations)


class DocumentCache:
    """Validated documents by text: clients repeat a handful of them, so each is parsed once.

    Only the event loop's thread touches the cache; a miss is parsed in an executor thread
    (`WandbServer._parsed`) so that a new, large document never stalls other requests.
    """

    def __init__(self, size: int = DOCUMENTS_CACHED) -> None:
        self._size = size
        self._cache: OrderedDict[str, ParsedDocument] = OrderedDict()

    def lookup(self, query: str) -> ParsedDocument | None:
        found = self._cache.get(query)
        if found is not None:
            self._cache.move_to_end(query)
        return found

    def store(self, query: str, parsed: ParsedDocument) -> None:
        self._cache[query] = parsed
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)


@functools.cache
def shared_schema() -> tuple[GraphQLSchema, DocumentCache]:
    """The schema with its resolvers and the cache of validated documents, one per process.

    Both are stateless (the state travels in the execution context), so every server shares
    them and a document is validated once, not once per server a test starts.
    """
    table = {**resolvers.RESOLVERS, **artifact_resolvers.RESOLVERS}
    return resolvers.bind(schema.build(), table), DocumentCache()


def _json_response(status: int, payload: Any) -> web.Response:
    body = wire_json.dumps(payload).encode()
    return web.Response(status=status, body=body, content_type="application/json")


async def _read_json(request: web.Request) -> Any:
    """The body as W&B's Go server reads it (`wire_json`): up to 10,000 levels deep."""
    text = wire_json.decode_body(await request.read())
    if len(text) < 256 * 1024:
        return wire_json.loads(text)
    return await asyncio.get_running_loop().run_in_executor(None, wire_json.loads, text)


def _errors(status: int, message: str) -> web.Response:
    return _json_response(status, {"errors": [{"message": message}]})


_FLOOD = web.RequestKey("sandbox.flood", FaultRule)
_FLOOD_HEAD = b'{"data": {"flood": "'
_FLOOD_CHUNK = b"x" * 65536


async def _flood(request: web.Request, rule: FaultRule) -> web.StreamResponse:
    """The filler answer of a flood rule (see `FaultRule.body_bytes`)."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    total = None if rule.endless else rule.body_bytes or 0
    if rule.chunked or total is None:
        response.enable_chunked_encoding()
    else:
        response.content_length = total
    await response.prepare(request)
    left = total
    chunk = _FLOOD_HEAD
    try:
        while left is None or left > 0:
            piece = chunk if left is None else chunk[:left]
            await response.write(piece)
            rule.sent += len(piece)
            if left is not None:
                left -= len(piece)
            chunk = _FLOOD_CHUNK
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        raise _Dropped from None  # the client hung up: the point of the exercise
    return response


class _Dropped(Exception):
    """The connection was cut on purpose; no response is written."""


class WandbServer:
    """`async with WandbServer() as wb:` serves `wb.state` on `wb.url` until the block ends."""

    def __init__(
        self,
        state: LaunchState | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str = DEFAULT_API_KEY,
        faults: Faults | None = None,
        log: RequestLog | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context` (a server context, `sandbox.tls`) serves HTTPS, as a self-hosted W&B
        behind a private CA does."""
        self.state = state if state is not None else LaunchState()
        self.ssl_context = ssl_context
        self.host = host
        self.port = port
        self.api_key = api_key
        self.faults = faults if faults is not None else Faults()
        self.log = log if log is not None else RequestLog()
        self.schema: GraphQLSchema | None = None
        self._documents: DocumentCache | None = None
        self._upload_token = secrets.token_urlsafe(16)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.rate_limit: RateLimit | None = None  # `limit_rate`

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/graphql", self._graphql)
        app.router.add_post("/files/{entity}/{project}/{run}/file_stream", self._file_stream)
        app.router.add_put("/upload/{token}/{entity}/{project}/{run}/{name:.+}", self._upload)
        app.router.add_get("/artifact-manifests/{token}/{version}", self._artifact_manifest)
        app.router.add_get("/artifact-files/{token}/{version}/{name:.+}", self._artifact_file)
        app.router.add_route("*", "/{tail:.*}", self._other)
        return app

    async def start(self) -> None:
        # Building the schema is CPU work (~10 ms, far more on a loaded machine): done once per
        # process, off the event loop.
        self.schema, self._documents = await asyncio.get_running_loop().run_in_executor(
            None, shared_schema
        )
        self._runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(
            self._runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context
        )
        await self._site.start()
        server = self._site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._site = None

    async def __aenter__(self) -> WandbServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def refuse_connections(self) -> None:
        """Stop listening: new connections are refused (ECONNREFUSED) until `accept_connections`.

        Requests on connections a client kept alive are cut as well (`Faults.refuse`).
        """
        self.faults.refuse = True
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def accept_connections(self) -> None:
        self.faults.refuse = False
        if self._site is None and self._runner is not None:
            await self._listen()

    # -- request plumbing -------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        _, _, key = decoded.partition(":")
        return secrets.compare_digest(key, self.api_key)

    async def _apply_faults(self, request: web.Request, key: str) -> web.Response | None:
        rule: FaultRule | None = self.faults.pick(key, request.path)
        if rule is None:
            return None
        if rule.floods:
            request[_FLOOD] = rule  # answered by `_flood` once the operation ran
            return None
        await self.faults.delay_for(rule)
        if rule.drop:
            raise _Dropped
        if rule.graphql_error:
            return _json_response(200, {"data": None, "errors": [{"message": rule.message}]})
        if rule.status is not None:
            return _errors(rule.status, rule.message)
        return None  # a pure delay

    async def _serve(
        self,
        request: web.Request,
        key: str,
        handle: Any,
        *,
        auth: bool = True,
    ) -> web.StreamResponse:
        """Faults, auth and accounting around one handler; `handle` returns (key, response)."""
        started = time.perf_counter()
        status = 0
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.faults.refuse:
                raise _Dropped
            if auth and not self._authorized(request):
                response: web.StreamResponse = _errors(401, "invalid API key")
            else:
                key, response = await handle(request, key)
            status = response.status
            return response
        except _Dropped:
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable from None  # never written: the socket is gone
        finally:
            self.log.record(
                request.method, request.path, key, status, time.perf_counter() - started
            )

    # -- handlers ---------------------------------------------------------------------------

    def limit_rate(self, limit: int, window: float = 60.0) -> RateLimit:
        """Serve at most `limit` GraphQL requests per `window` seconds, answering as W&B does
        (`ratelimit.py`); `unlimit_rate()` ends it."""
        self.rate_limit = RateLimit(limit, window)
        return self.rate_limit

    def unlimit_rate(self) -> None:
        self.rate_limit = None

    async def _graphql(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "graphql", self._graphql_limited)

    async def _graphql_limited(
        self, request: web.Request, key: str
    ) -> tuple[str, web.StreamResponse]:
        limit = self.rate_limit
        if limit is None:
            return await self._graphql_inner(request, key)
        allowed, headers = limit.take()
        response: web.StreamResponse
        if allowed:
            key, response = await self._graphql_inner(request, key)
        else:
            response = _errors(429, "rate limit exceeded: too many requests for this API key")
        if not response.prepared:  # a flood's headers are already sent
            response.headers.update(headers)
        return key, response

    async def _graphql_inner(
        self, request: web.Request, key: str
    ) -> tuple[str, web.StreamResponse]:
        try:
            payload = await _read_json(request)
        except ValueError as exc:
            return key, _errors(400, f"request body is not JSON: {exc}")
        if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
            return key, _errors(400, "request body must be an object with a string `query`")
        variables = payload.get("variables")
        variables = {} if variables is None else variables
        operation_name = payload.get("operationName")
        if not isinstance(variables, dict) or not isinstance(operation_name, str | None):
            return key, _errors(400, "`variables` must be an object, `operationName` a string")
        # The launch API's hand-written documents arrive with `"operationName": ""`; like
        # W&B, treat that as "no name given" and take the document's only operation.
        operation_name = operation_name or None
        assert self.schema is not None, "server not started"
        parsed = await self._parsed(payload["query"])
        key, fields = parsed.key(operation_name)
        for name in fields:
            self.log.counts[f"field:{name}"] += 1
        injected = await self._apply_faults(request, key)
        if injected is None:
            for name in fields:
                injected = await self._apply_faults(request, f"field:{name}")
                if injected is not None:
                    break
        if injected is not None:
            return key, injected
        if parsed.document is None:
            return key, _json_response(200, {"errors": list(parsed.errors)})
        context = resolvers.Context(self.state, self._base_url(request), self._upload_token)
        result = execute_sync(
            self.schema,
            parsed.document,
            context_value=context,
            variable_values=variables,
            operation_name=operation_name,
        )
        flood: FaultRule | None = request.get(_FLOOD)
        if flood is not None:
            return key, await _flood(request, flood)
        answer: dict[str, Any] = {"data": result.data}
        if result.errors:
            answer["errors"] = [e.formatted for e in result.errors]
        return key, _json_response(200, answer)

    async def _parsed(self, query: str) -> ParsedDocument:
        assert self._documents is not None, "server not started"
        assert self.schema is not None, "server not started"
        found = self._documents.lookup(query)
        if found is None:
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(None, parse_document, self.schema, query)
            self._documents.store(query, found)
        return found

    def _base_url(self, request: web.Request) -> str:
        host = request.headers.get("Host") or f"{self.host}:{self.port}"
        return f"http://{host}"

    async def _file_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "REST file_stream", self._file_stream_inner)

    async def _file_stream_inner(self, request: web.Request, key: str) -> tuple[str, web.Response]:
        injected = await self._apply_faults(request, key)
        if injected is not None:
            return key, injected
        try:
            payload = await _read_json(request)
        except ValueError as exc:
            return key, _errors(400, f"file_stream body is not JSON: {exc}")
        if not isinstance(payload, dict):
            return key, _errors(400, "file_stream body must be a JSON object")
        info = request.match_info
        self.state.file_stream(info["entity"], info["project"], info["run"], payload)
        return key, _json_response(200, {"exitcode": None, "limits": {}})

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "REST upload", self._upload_inner, auth=False)

    async def _upload_inner(self, request: web.Request, key: str) -> tuple[str, web.Response]:
        info = request.match_info
        if not secrets.compare_digest(info["token"], self._upload_token):
            return key, _errors(403, "upload URL signature does not match")
        injected = await self._apply_faults(request, key)
        if injected is not None:
            return key, injected
        data = await request.read()
        try:
            self.state.store_file(info["entity"], info["project"], info["run"], info["name"], data)
        except WandbError as exc:
            return key, _errors(404, str(exc))
        return key, web.Response(status=200)

    async def _artifact_manifest(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, "REST artifact manifest", self._artifact_inner, auth=False
        )

    async def _artifact_file(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "REST artifact file", self._artifact_inner, auth=False)

    async def _artifact_inner(self, request: web.Request, key: str) -> tuple[str, web.Response]:
        """Presigned downloads: the manifest of a version, or one of its files."""
        info = request.match_info
        if not secrets.compare_digest(info["token"], self._upload_token):
            return key, _errors(403, "download URL signature does not match")
        injected = await self._apply_faults(request, key)
        if injected is not None:
            return key, injected
        version = self.state.artifacts.versions.get(info["version"])
        if version is None:
            return key, _errors(404, f"artifact {info['version']} not found")
        if "name" not in info:
            return key, _json_response(200, artifacts.manifest(version))
        data = version.files.get(info["name"])
        if data is None:
            return key, _errors(
                404, f"artifact {version.qualified_name} has no file {info['name']}"
            )
        return key, web.Response(body=data, content_type="application/octet-stream")

    async def _other(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "REST other", self._other_inner, auth=False)

    async def _other_inner(self, request: web.Request, key: str) -> tuple[str, web.Response]:
        return key, _errors(404, f"no route {request.method} {request.path}")
