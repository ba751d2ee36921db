"""Where the built upstream binaries are, and what they are (`make cluster-bins` builds them)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[2]
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class MissingBinaries(RuntimeError):
    """The cache lacks a binary; the message says how to build it."""


@dataclass(frozen=True)
class Binaries:
    directory: Path
    versions: dict[str, Any]

    @classmethod
    def find(cls, directory: Path | None = None) -> Binaries:
        root = directory or Path(
            os.environ.get("LAUNCH_AGENT_CLUSTER_BINS") or CHECKOUT / ".cluster-bins"
        )
        record = root / "versions.json"
        versions = json.loads(record.read_text()) if record.exists() else {}
        found = cls(root, versions)
        missing = [name for name in CONTROL_PLANE if not found.has(name)]
        if missing:
            raise MissingBinaries(
                f"{', '.join(missing)} not found in {root / 'bin'}: run `make cluster-bins` in "
                "the checkout (it builds the upstream binaries from the Go modules in cluster/; "
                "about 25 minutes on two cores the first time), or point "
                "LAUNCH_AGENT_CLUSTER_BINS at a folder that has them"
            )
        return found

    def path(self, name: str) -> Path:
        return self.directory / "bin" / name

    def has(self, name: str) -> bool:
        return self.path(name).is_file() and os.access(self.path(name), os.X_OK)

    def describe(self, name: str) -> str:
        """`kube-apiserver: k8s.io/kubernetes v1.37.2 (go1.26.8)`, from its build information."""
        info = (self.versions.get("binaries") or {}).get(name) or {}
        return (
            f"{name}: {info.get('module', '?')} {info.get('version', '?')} ({info.get('go', '?')})"
        )
