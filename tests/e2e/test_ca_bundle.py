"""A CA bundle the agent cannot load (a `customCABundle` ConfigMap key that is not PEM) stops
the start with the variable and the path, instead of a TLS error at the first request."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch_agent.runtime.startup import StartupError
from tests.e2e.conftest import Env


async def test_an_unusable_ca_bundle_refuses_the_start(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text("not a certificate\n")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("LAUNCH_AGENT_CA_BUNDLE", raising=False)
    with pytest.raises(
        StartupError, match=r"REQUESTS_CA_BUNDLE=.*ca-certificates\.crt: cannot load"
    ):
        async with env.running(env.agent()):
            pass
