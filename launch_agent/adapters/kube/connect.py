"""Connecting to a cluster: configuration from a kubeconfig or the pod, and the API client.

Both steps do blocking work that must stay off the agent's event loop: reading the kubeconfig
(and running an exec credential plugin, if it names one), and building the TLS context, which
parses the system CA bundle (40-250 ms of CPU on the development machine). The kubeconfig is
loaded in a worker thread; the TLS context is built there too and handed to an `ApiClient`
created on the loop.

kubernetes_asyncio's session trusts the environment (`trust_env=True`): aiohttp then reads the
proxy variables and `~/.netrc` again for every request, in two worker-thread round trips (a
third of the client's CPU per create). Every request goes to the one API server, so both are
read once, in the same worker thread, for its URL, and given to the session as its defaults
(`Environment`), as client-go reads the proxy environment once per process: the same proxy,
proxy credentials and netrc credentials as before, without the per-request lookups.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from contextlib import suppress
from dataclasses import dataclass

import aiohttp
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from yarl import URL

from launch_agent.adapters.kube.library import (
    ApiClient,
    Configuration,
    load_incluster_config,
    load_kube_config,
    rest,
)

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def use_in_cluster(kubeconfig: str | None, in_cluster: bool | None) -> bool:
    """`in_cluster=None`: in-cluster when no kubeconfig is named and the pod environment is set."""
    if in_cluster is not None:
        return in_cluster
    return kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ


async def load_configuration(
    kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
) -> Configuration:
    """A client configuration from a kubeconfig file or the pod's service account.

    Loading reads files and may run an exec credential plugin (`aws eks get-token`,
    `gke-gcloud-auth-plugin`, `kubelogin`) as a subprocess, so it runs in a worker thread,
    never on the agent's loop. The kubeconfig loader is a coroutine that needs an event loop
    for the plugin's subprocess: it gets a private one in that thread. A credential that
    expires is renewed by `KubeClient`, which calls this again after a 401; in a pod the
    service-account token is re-read by `KubeClient`.
    """
    if use_in_cluster(kubeconfig, in_cluster):

        def load() -> Configuration:
            cfg = Configuration()
            # The client's own token refresh reads the token file on the loop; KubeClient
            # re-reads it in a worker thread instead (`token_file`).
            load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg, try_refresh_token=False
            )
            return cfg

        return await asyncio.to_thread(load)
    cfg = Configuration()
    await asyncio.to_thread(
        asyncio.run,
        load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=cfg,
            persist_config=False,
        ),
    )
    return cfg


def _ssl_context(configuration: Configuration) -> ssl.SSLContext:
    """The TLS settings of `RESTClientObject.__init__` (kubernetes_asyncio 36.1.0, pinned)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


@dataclass(frozen=True, slots=True)
class Environment:
    """What `trust_env=True` made aiohttp look up per request, for the API server's URL."""

    proxy: URL | None = None
    proxy_auth: aiohttp.BasicAuth | None = None
    auth: aiohttp.BasicAuth | None = None  # ~/.netrc's (or $NETRC's) entry for the host


def environment(host: str) -> Environment:
    """aiohttp's per-request lookups (`ClientSession._request` with `trust_env`: the netrc
    entry of the host, the proxy of its scheme unless `NO_PROXY` covers it), done once."""
    url = URL(host)
    if not url.host:
        return Environment()
    proxy = proxy_auth = auth = None
    with suppress(LookupError):
        auth = basicauth_from_netrc(netrc_from_env(), url.host)
    with suppress(LookupError):
        proxy, proxy_auth = get_env_proxy_for_url(url)
    return Environment(proxy, proxy_auth, auth)


class _RestClient(rest.RESTClientObject):
    """kubernetes_asyncio's REST client with its SSL context built beforehand, off the loop.

    `RESTClientObject()` parses the system CA bundle: 40-250 ms of CPU on this machine, long
    enough to stall every other task. Everything else mirrors its `__init__`.
    """

    def __init__(
        self, configuration: Configuration, context: ssl.SSLContext, env: Environment
    ) -> None:
        # mypy infers the attribute types from the library's unannotated code, where these
        # start as strings; the same values are assigned here as there.
        self.server_hostname = configuration.tls_server_name  # type: ignore[assignment]
        self.proxy = configuration.proxy  # type: ignore[assignment]
        self.proxy_headers = configuration.proxy_headers  # type: ignore[assignment]
        self.pool_manager = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=configuration.connection_pool_maxsize, ssl=context
            ),
            # The environment as `trust_env=True` would read it, read once (module docstring).
            trust_env=False,
            auth=env.auth,
            proxy=env.proxy,
            proxy_auth=env.proxy_auth,
            read_bufsize=2**21,
        )


class _ApiClient(ApiClient):
    """`ApiClient` around a `_RestClient`; the rest mirrors `ApiClient.__init__`."""

    def __init__(
        self, configuration: Configuration, context: ssl.SSLContext, env: Environment
    ) -> None:
        self.configuration = configuration
        self.pool_threads = 1
        self.rest_client = _RestClient(configuration, context, env)
        self.default_headers: dict[str, str] = {}
        self.cookie = None  # type: ignore[assignment]
        self.user_agent = "launch-agent"
        self.client_side_validation = configuration.client_side_validation


def _prepare(configuration: Configuration) -> tuple[ssl.SSLContext, Environment]:
    return _ssl_context(configuration), environment(str(configuration.host))


async def build_api_client(configuration: Configuration) -> ApiClient:
    context, env = await asyncio.to_thread(_prepare, configuration)
    return _ApiClient(configuration, context, env)
