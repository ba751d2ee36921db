"""The TLS trust of every HTTP client the agent opens itself (W&B, registries).

A self-hosted W&B behind a private CA: the chart joins the admin's CA to the system bundle
and points `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE` at it (docs/install.md, `customCABundle`).
OpenSSL reads `SSL_CERT_FILE` for the default context, but nothing reads `REQUESTS_CA_BUNDLE`
outside `requests`, and a bundle holding only the private CA should not *replace* the public
roots: so the context here is the default one (the system roots, or OpenSSL's `SSL_CERT_FILE`)
plus the bundle named by, in order, `LAUNCH_AGENT_CA_BUNDLE`, `SSL_CERT_FILE`,
`REQUESTS_CA_BUNDLE`.

The other clients trust the same file by their own rules: boto3 reads `AWS_CA_BUNDLE`,
google-cloud-storage (requests) `REQUESTS_CA_BUNDLE`, azure-storage-blob (requests)
`REQUESTS_CA_BUNDLE`, git `GIT_SSL_CAINFO` (passed through by `build_context`); the Kubernetes
client uses the CA of its kubeconfig or service account.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

CA_BUNDLE_VARIABLES = ("LAUNCH_AGENT_CA_BUNDLE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


class CABundleError(ValueError):
    """The CA bundle named by the environment cannot be used; the message names it."""


def ca_bundle(
    env: Mapping[str, str] | None = None, configured: str | None = None
) -> tuple[str, str] | None:
    """(where, path) of the CA bundle the configuration (`ca_bundle`) or the environment
    names, or None."""
    if configured:
        return "ca_bundle", configured
    env = os.environ if env is None else env
    for name in CA_BUNDLE_VARIABLES:
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def client_ssl_context(
    env: Mapping[str, str] | None = None, configured: str | None = None
) -> ssl.SSLContext:
    """The system roots plus the configured or the environment's CA bundle; `CABundleError`
    if it is unusable."""
    context = ssl.create_default_context()
    found = ca_bundle(env, configured)
    if found is not None:
        name, path = found
        try:
            context.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as exc:
            raise CABundleError(f"{name}={path}: cannot load the CA bundle: {exc}") from None
    return context
