"""The proxy and netrc environment of the Kubernetes client, read once (`connect.environment`).

The same lookups aiohttp makes for every request with `trust_env=True`, so the answers are
compared with aiohttp's own functions for the same environment as well as with literals.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from yarl import URL

from launch_agent.adapters.kube.connect import Environment, environment

HOST = "https://api.cluster.example:6443"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (*PROXY_VARIABLES, "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))


def test_nothing_set_is_nothing() -> None:
    assert environment(HOST) == Environment()
    assert environment("") == Environment()


def test_the_proxy_of_the_scheme_with_its_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.corp:3128")
    env = environment(HOST)
    assert env.proxy == URL("http://proxy.corp:3128")
    assert env.proxy_auth is not None
    assert (env.proxy_auth.login, env.proxy_auth.password) == ("user", "secret")
    assert env.auth is None
    # An http:// server uses HTTP_PROXY, which is not set.
    assert environment("http://api.cluster.example:8080") == Environment()


def test_no_proxy_covers_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", ".cluster.example")
    assert environment(HOST) == Environment()


def test_a_netrc_entry_for_the_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.cluster.example login admin password pw\n", encoding="utf-8")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    auth = environment(HOST).auth
    assert auth is not None
    assert (auth.login, auth.password) == ("admin", "pw")
    assert environment("https://other.example").auth is None
