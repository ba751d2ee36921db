"""The agent's one Kubernetes client: kubernetes_asyncio's `ApiClient`, used as a transport.

One `KubeClient` per process, opened with `async with` and closed on exit (the reference agent
builds a new `ApiClient` per run and never closes it). Requests use the real client's auth
(`update_params_for_auth`: the bearer token, refreshed by the configuration's hook), its TLS
settings and its connection pool, and are sent on its aiohttp session as its REST client
sends them (`_send`): the generic `call_api` path walked every body and header through
`sanitize_for_serialization` first, a tenth of the agent's CPU per create, for dicts that are
JSON already. This module sees the status, headers and raw body of every answer: it maps
errors to typed exceptions (`errors.py`), honours `Retry-After`, and keeps objects as the
plain dicts the API returned, which is what the pure tracking layer reads. No generated model
classes are built.

Operations are what the dispatcher and tracker need, and each has one policy:

- `create`: POST with `fieldValidation=Strict` (an unknown field is an error naming the field,
  not silently pruned); 409 AlreadyExists means "adopt": the existing object is returned, never
  a second one created. With deterministic names this makes create idempotent, so it is retried
  like any other request.
- `delete`: `propagationPolicy: Background` (dependents are garbage-collected: no pod keeps
  running after a stop); 404 means already gone.
- `list` by label selector (paged), `get`, `patch` (merge patch, for suspend/unsuspend),
  `pod_log_tail`.
- `watch_stream`: one watch request, yielding raw events; `informer.py` owns reconnects.

Every request has a timeout and is retried on 429/5xx/network errors with jittered backoff
(`adapters/retry.py`, the engine shared with the W&B client); when retries run out the caller
gets `KubeUnavailable`.

Rate limits, both sides: every request sent (each attempt, each watch opened) first takes a
token from this client's bucket (`kubernetes.qps`, `kubernetes.burst`: client-go's QPS and
Burst), so one client never sends faster than configured. The API server's own limit is
priority and fairness (APF): a 429 with `Retry-After`, which the retry engine waits at least,
and the `X-Kubernetes-PF-PriorityLevel-UID` / `-FlowSchema-UID` headers naming what refused it,
which `throttled` hears (the agent counts them by priority level).

Credentials expire. In a pod the projected service-account token is re-read every minute. With
a kubeconfig, a credential from an exec plugin (`aws eks get-token` tokens last 15 minutes) is
renewed when the API server answers 401 Unauthorized: the kubeconfig is loaded again (running
the plugin) and the request is sent once more with the new token. Concurrent requests that
got the 401 share one renewal, and the kubeconfig is loaded at most every
`RENEW_INTERVAL` seconds, so a credential that is simply wrong costs one reload, not a loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import json
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

import aiohttp

from launch_agent.adapters.bounded import (
    MAX_TOKEN_FILE,
    MIB,
    BodyTooLarge,
    read_body,
    read_text_file,
)
from launch_agent.adapters.kube.connect import (
    SERVICE_ACCOUNT_TOKEN,
    build_api_client,
    load_configuration,
    use_in_cluster,
)
from launch_agent.adapters.kube.errors import (
    KubeApiError,
    KubeConflict,
    KubeError,
    KubeNotFound,
    KubeUnavailable,
    error_from_response,
)
from launch_agent.adapters.kube.kinds import KindRegistry, Resource
from launch_agent.adapters.kube.library import ApiClient, ConfigException, Configuration
from launch_agent.adapters.rate_limit import RateLimiter
from launch_agent.adapters.retry import (
    NETWORK_ERRORS,
    GaveUp,
    Retryable,
    RetryPolicy,
    call_with_retries,
    kube_retryable,
    parse_retry_after,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Query = Sequence[tuple[str, str]]
FIELD_MANAGER = "launch-agent"
# A list page is at most 500 objects (`list(page_size=...)`): tens of MiB for big objects.
# The API server is the cluster admin's; the bound is against a proxy or a broken server.
MAX_RESPONSE_BYTES = 256 * MIB
RENEW_INTERVAL = 10.0  # seconds between two reloads of the kubeconfig after a 401
# kube-apiserver's priority and fairness names the classification of every request it
# answers in these headers, a 429 included (k8s.io/api/flowcontrol/v1 ResponseHeader*).
PF_PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
PF_FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"


@dataclass(frozen=True, slots=True)
class Created:
    obj: Obj
    # True when the object already existed (409) and was adopted instead of created.
    adopted: bool


@dataclass(frozen=True, slots=True)
class Listed:
    items: list[Obj]
    resource_version: str


class KubeClient:
    """`async with KubeClient(configuration) as kube: ...`; see the module docstring."""

    def __init__(
        self,
        configuration: Configuration,
        *,
        policy: RetryPolicy | None = None,
        rng: random.Random | None = None,
        token_file: str | None = None,
        token_refresh: float = 60.0,
        reload: Callable[[], Awaitable[Configuration]] | None = None,
        renew_interval: float = RENEW_INTERVAL,
        observer: Callable[[str, int | None, float], None] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        qps: float | None = None,
        burst: int | None = None,
        stop: asyncio.Event | None = None,
        throttled: Callable[[str, str], None] | None = None,
    ) -> None:
        """`observer(operation, status, seconds)` hears every attempt (status None: no answer),
        as `WandbClient(observer=...)` does; `operation` is bounded (`operation_of`).
        `max_response_bytes` bounds every answer read (`request(max_bytes=...)` per call).
        `qps` and `burst` (`kubernetes.qps`, `.burst`): this client's own token bucket, taken
        by every request sent (None: no limit); `stop` ends a wait for a token at once.
        `throttled(priority_level_uid, flow_schema_uid)` hears every 429 (module docstring)."""
        self._observer = observer
        self._throttled = throttled
        self.limiter = (
            RateLimiter(qps, burst if burst is not None else max(1, int(qps)), stop=stop)
            if qps is not None
            else None
        )
        self.max_response_bytes = max_response_bytes
        self._configuration = configuration
        # Loads the configuration again for a new credential after a 401 (kubeconfig mode).
        self._reload = reload
        self._renewing = asyncio.Lock()
        self._renewed_at: float | None = None
        self._renew_interval = renew_interval
        self.renewals = 0
        # A projected service-account token rotates (about hourly); re-read it every minute.
        self._token_file = token_file
        self._token_refresh = token_refresh
        self._token_read_at: float | None = None
        self.policy = policy or RetryPolicy()
        self._rng = rng or random.Random()
        self._api: ApiClient | None = None
        self.kinds = KindRegistry(self._discover)
        self.requests = 0
        self.retries = 0
        self.throttles = 0  # 429s answered (each retried after its Retry-After)

    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool | None = None,
        **kwargs: Any,
    ) -> KubeClient:
        configuration = await load_configuration(kubeconfig, context, in_cluster)
        for key, value in cls.renewal(kubeconfig, context, in_cluster).items():
            kwargs.setdefault(key, value)
        return cls(configuration, **kwargs)

    @staticmethod
    def renewal(
        kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
    ) -> dict[str, Any]:
        """The constructor options that keep a configuration loaded this way authenticated:
        the service-account token file to re-read in a pod, or how to load the kubeconfig
        again after a 401."""
        if use_in_cluster(kubeconfig, in_cluster):
            return {"token_file": SERVICE_ACCOUNT_TOKEN}
        return {"reload": functools.partial(load_configuration, kubeconfig, context, False)}

    async def __aenter__(self) -> KubeClient:
        self._api = await build_api_client(self._configuration)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        api, self._api = self._api, None
        if api is not None:
            await api.close()

    @property
    def host(self) -> str:
        return str(self._configuration.host)

    # --- transport -------------------------------------------------------------------------

    async def _open(
        self,
        method: str,
        path: str,
        query: Query,
        body: object,
        *,
        content_type: str | None,
        limits: aiohttp.ClientTimeout,
        extra_headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        if self._api is None:
            raise RuntimeError("KubeClient used outside `async with`")
        await self._fresh_token()
        headers = {"Accept": "application/json", **(extra_headers or {})}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if self.limiter is not None:
            # Stopping, the request goes out anyway: see `adapters/rate_limit.py`.
            await self.limiter.acquire()
        self.requests += 1
        return await _send(
            self._api, method, path, query=list(query), headers=headers, body=body, limits=limits
        )

    async def _fresh_token(self) -> None:
        if self._token_file is None:
            return
        now = asyncio.get_running_loop().time()
        if self._token_read_at is not None and now - self._token_read_at < self._token_refresh:
            return
        path = self._token_file
        try:
            read = functools.partial(read_text_file, path, MAX_TOKEN_FILE, what="a token file")
            token = (await asyncio.to_thread(read)).strip()
        except OSError as exc:
            raise KubeError(f"cannot read the service account token {path}: {exc}") from None
        if not token:
            raise KubeError(f"service account token file {path} is empty")
        self._configuration.api_key["BearerToken"] = f"Bearer {token}"
        self._token_read_at = now

    async def _renew(self, sent: str | None) -> bool:
        """After a 401 to a request sent with credential `sent`: whether a new credential is
        in use now (renewed here, or by a concurrent request meanwhile)."""
        if self._reload is None:
            return False
        async with self._renewing:
            current = self._credential()
            if current != sent:
                return True
            now = asyncio.get_running_loop().time()
            if self._renewed_at is not None and now - self._renewed_at < self._renew_interval:
                return False
            self._renewed_at = now
            try:
                fresh = await self._reload()
            except (ConfigException, OSError, ValueError, RuntimeError) as exc:
                log.warning("401 Unauthorized, and loading the kubeconfig again failed: %s", exc)
                return False
            token = fresh.api_key.get("BearerToken")
            if not token or token == current:
                log.warning(
                    "401 Unauthorized: the API server refuses the kubeconfig's credential, and"
                    " loading the kubeconfig again gave the same one"
                )
                return False
            self._configuration.api_key["BearerToken"] = token
            self.renewals += 1
            log.info("401 Unauthorized: using a new credential from the kubeconfig")
            return True

    def _credential(self) -> str | None:
        token: str | None = self._configuration.api_key.get("BearerToken")
        return token

    async def _authorized(
        self, open_request: Callable[[], Awaitable[aiohttp.ClientResponse]]
    ) -> aiohttp.ClientResponse:
        """`open_request()`, and once more with a renewed credential when the API server
        answered 401 and there is one (module docstring); the caller reads and closes the
        answer it gets."""
        sent = self._credential()
        response = await open_request()
        if response.status != 401:
            return response
        try:
            renewed = await self._renew(sent)
        except BaseException:
            response.close()
            raise
        if not renewed:
            return response
        response.close()
        return await open_request()

    async def _once(
        self,
        method: str,
        path: str,
        query: Query,
        body: object,
        content_type: str | None,
        *,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        limits = aiohttp.ClientTimeout(total=self.policy.timeout)
        response = await self._authorized(
            functools.partial(
                self._open,
                method,
                path,
                query,
                body,
                content_type=content_type,
                limits=limits,
                extra_headers=headers,
            )
        )
        try:
            async with asyncio.timeout(self.policy.timeout):
                data = await self._read(response, method, path, max_bytes)
        finally:
            response.release()
        return response.status, data, response.headers

    async def _read(
        self, response: aiohttp.ClientResponse, method: str, path: str, max_bytes: int | None
    ) -> bytes:
        limit = self.max_response_bytes if max_bytes is None else max_bytes
        try:
            return await read_body(
                response,
                limit,
                what=f"the API server's answer to {method} {path}",
                setting="of the Kubernetes client" if max_bytes is None else "of this call",
            )
        except BodyTooLarge as exc:
            raise KubeError(str(exc)) from None  # the same request would get the same answer

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: object = None,
        content_type: str | None = None,
        retry: bool = True,
        raw: bool = False,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Any:
        """One API call with retries; the parsed JSON answer (the text if `raw`), or a typed
        `KubeError`. `max_bytes` bounds this answer (default: the client's bound)."""
        policy = self.policy if retry else dataclasses.replace(self.policy, attempts=1)

        async def attempt() -> Any:
            started = time.monotonic()
            try:
                status, data, answer_headers = await self._once(
                    method, path, query, body, content_type, headers=headers, max_bytes=max_bytes
                )
            except NETWORK_ERRORS as exc:
                self._observe(method, path, None, started)
                raise Retryable(exc) from exc
            self._observe(method, path, status, started)
            if 200 <= status < 300:
                return data.decode("utf-8", "replace") if raw else _parse(data, method, path)
            if status == 429:
                self._note_throttled(answer_headers)
            retry_after = parse_retry_after(answer_headers.get("Retry-After"))
            error = error_from_response(
                status, data, method=method, path=path, retry_after=retry_after
            )
            if not kube_retryable(status):
                raise error
            raise Retryable(error, retry_after)

        def on_retry(_: int, failure: Retryable, delay: float) -> None:
            self.retries += 1
            log.debug(
                "kubernetes %s %s failed (%s); retry in %.2fs", method, path, failure.cause, delay
            )

        try:
            return await call_with_retries(attempt, policy, rng=self._rng, on_retry=on_retry)
        except GaveUp as gave_up:
            last = gave_up.last.cause
            assert isinstance(last, BaseException)
            if isinstance(last, KubeApiError) and not retry:
                raise last from None
            # The message counts the attempts the policy allows, as it always has.
            raise KubeUnavailable(method, path, policy.attempts or gave_up.attempts, last) from last

    def _note_throttled(self, headers: Mapping[str, str]) -> None:
        """A 429: which APF priority level and flow schema refused it, by UID, as
        kube-apiserver names them in its answer ("" without APF: max-inflight's 429)."""
        self.throttles += 1
        if self._throttled is not None:
            self._throttled(
                headers.get(PF_PRIORITY_LEVEL_HEADER, "")[:64],
                headers.get(PF_FLOW_SCHEMA_HEADER, "")[:64],
            )

    def _observe(self, method: str, path: str, status: int | None, started: float) -> None:
        if self._observer is not None:
            self._observer(operation_of(method, path), status, time.monotonic() - started)

    async def _discover(self, path: str) -> Mapping[str, Any] | None:
        try:
            document = await self.request("GET", path)
        except KubeNotFound:
            return None
        return document if isinstance(document, Mapping) else None

    # --- operations ------------------------------------------------------------------------

    async def resolve(self, api_version: str, kind: str) -> Resource:
        """The REST resource of a kind; `KindNotInstalled` if the cluster does not serve it."""
        return await self.kinds.resolve(api_version, kind)

    async def create(self, body: Mapping[str, Any], namespace: str) -> Created:
        """Create an object, or adopt the existing one of the same name (409)."""
        resource = await self.resolve(str(body.get("apiVersion", "")), str(body.get("kind", "")))
        name = str(body.get("metadata", {}).get("name", ""))
        query = [("fieldValidation", "Strict"), ("fieldManager", FIELD_MANAGER)]
        # A 409 whose object vanished before the GET (deleted meanwhile) is created again, once.
        for _ in range(2):
            try:
                obj = await self.request("POST", resource.path(namespace), query=query, body=body)
                return Created(obj, adopted=False)
            except KubeConflict as exc:
                if not exc.already_exists or not name:
                    raise
            try:
                existing = await self.request("GET", resource.path(namespace, name))
            except KubeNotFound:
                continue
            return Created(existing, adopted=True)
        raise KubeError(f"{resource} {namespace}/{name} keeps being deleted while created")

    async def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj: Obj = await self.request("GET", resource.path(namespace, name))
        return obj

    async def delete(
        self, resource: Resource, namespace: str, name: str, propagation: str = "Background"
    ) -> bool:
        """Delete with dependents garbage-collected; False if it was already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            await self.request("DELETE", resource.path(namespace, name), body=body)
        except KubeNotFound:
            return False
        return True

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str | None = None,
        page_size: int = 500,
        transform: Callable[[Obj], Obj] | None = None,
        *,
        field_selector: str | None = None,
    ) -> Listed:
        """Every object matching the selector, paged; with the list's resourceVersion.

        `transform` is applied to each item as its page arrives, so a slimmed list of 10,000
        objects never holds 10,000 full ones at once.
        """
        items: list[Obj] = []
        token: str | None = None
        version = ""
        while True:
            query = [("limit", str(page_size)), *_selectors(label_selector, field_selector)]
            if token:
                query.append(("continue", token))
            page = await self.request("GET", resource.path(namespace), query=query)
            for item in page.get("items") or ():
                # List items omit kind/apiVersion; put them back so each object stands alone.
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(transform(item) if transform else item)
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue") or None
            if not token:
                return Listed(items, version)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        patch_type: str = "merge",
    ) -> Obj:
        """A merge (RFC 7386) or strategic merge patch; e.g. `{"spec": {"suspend": False}}`."""
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        obj: Obj = await self.request(
            "PATCH",
            resource.path(namespace, name),
            query=[("fieldManager", FIELD_MANAGER)],
            body=dict(patch),
            content_type=content_type,
        )
        return obj

    async def pod_log_tail(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        lines: int = 50,
        limit_bytes: int = 64 * 1024,
    ) -> str:
        """The last `lines` lines of a container's log (bounded in bytes), for failure reports."""
        query = [("tailLines", str(lines)), ("limitBytes", str(limit_bytes))]
        if container:
            query.append(("container", container))
        path = Resource("", "v1", "Pod", "pods").path(namespace, pod, "log")
        text: str = await self.request("GET", path, query=query, raw=True)
        return text

    async def watch_stream(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        silence_timeout: float | None = None,
        field_selector: str | None = None,
    ) -> AsyncGenerator[Obj, None]:
        """One watch request from `resource_version`, with bookmarks; raw event dicts.

        Ends when the server closes the stream (its `timeoutSeconds`). Errors are raised typed;
        an `ERROR` event is yielded as is (the informer turns a 410 in it into a relist).
        """
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            *_selectors(label_selector, field_selector),
        ]
        # No total timeout: a watch is long by design. A stream silent (no event, no bookmark)
        # for `silence_timeout` (default: the server's own timeout plus a margin) is a dead
        # connection, e.g. half-open TCP after a node or load balancer went away.
        silence = silence_timeout if silence_timeout is not None else timeout_seconds + 30
        limits = aiohttp.ClientTimeout(total=None, connect=self.policy.timeout, sock_read=silence)
        path = resource.path(namespace)
        response = await self._authorized(
            functools.partial(
                self._open, "GET", path, query, None, content_type=None, limits=limits
            )
        )
        try:
            if response.status != 200:
                if response.status == 429:
                    self._note_throttled(response.headers)
                data = await self._read(response, "WATCH", path, None)
                raise error_from_response(
                    response.status,
                    data,
                    method="WATCH",
                    path=path,
                    retry_after=parse_retry_after(response.headers.get("Retry-After")),
                )
            async for line in response.content:
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
        finally:
            response.close()


# The methods kubernetes_asyncio's REST client sends a body with (`RESTClientObject.request`).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "OPTIONS", "DELETE"})


async def _send(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]],
    headers: dict[str, str],
    body: object,
    limits: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    """One request as `ApiClient.call_api(..., auth_settings=["BearerToken"],
    _preload_content=False)` sends it (kubernetes_asyncio 36.1.0, pinned): the client's default
    headers (its User-Agent), the bearer token, `host + path`, the query urlencoded, the body
    as JSON (dates as ISO 8601, as its sanitizer writes them), the REST client's proxy and TLS
    server name."""
    headers.update(api.default_headers)
    await api.update_params_for_auth(headers, query, ["BearerToken"])
    rest = api.rest_client
    url = str(api.configuration.host) + path
    if query:
        url += "?" + urlencode(query)
    headers.setdefault("Content-Type", "application/json")
    options: dict[str, Any] = {"timeout": limits, "headers": headers}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    if method in BODY_METHODS:
        if isinstance(body, bytes) and "json" not in headers["Content-Type"].lower():
            options["data"] = body  # sent as it is, as the REST client sends bytes
        else:
            options["data"] = None if body is None else json.dumps(body, default=_json_default)
    response: aiohttp.ClientResponse = await rest.pool_manager.request(method, url, **options)
    return response


def _json_default(value: object) -> str:
    if isinstance(value, datetime.date):  # a datetime too
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    """The query parameters of a list or watch that selects by label or field."""
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _parse(data: bytes, method: str, path: str) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        head = " ".join(data[:200].decode("utf-8", "replace").split())
        raise KubeError(f"{method} {path}: the answer is not JSON: {head!r}") from None


def operation_of(method: str, path: str) -> str:
    """`get jobs`, `list pods`, `create jobsets`, `discovery`: a bounded label for a call
    (the resource's plural, never an object name or namespace, so one label per kind)."""
    parts = [p for p in path.split("?", maxsplit=1)[0].split("/") if p]
    # /api/v1/... or /apis/GROUP/VERSION/...
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return "other"
    if not rest:
        return "discovery"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    verbs = {"GET": "get" if named else "list", "POST": "create", "PUT": "replace"}
    verb = verbs.get(method.upper(), method.lower())
    if len(rest) > 2:  # a subresource: pods/NAME/log, jobs/NAME/status
        resource = f"{resource}/{rest[2]}"
    return f"{verb} {resource}"[:64]
