"""Kubeconfig files for the cluster tier: one per identity, certificates or a token inline, so a
file can be copied elsewhere and still work."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(
    path: Path,
    *,
    server: str,
    ca_file: Path,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
    name: str = "launch-agent-cluster",
) -> Path:
    user: dict[str, str] = {}
    if cert_file is not None and key_file is not None:
        user = {"client-certificate-data": _b64(cert_file), "client-key-data": _b64(key_file)}
    if token is not None:
        user = {"token": token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_file)},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
