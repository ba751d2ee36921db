#!/usr/bin/env python3
"""Build the real-cluster tier's upstream binaries from the Go modules pinned in `cluster/`.

`make cluster-bins` runs this. Each folder of `cluster/` is a Go module of the project's own
whose `go.mod` names the upstream commands as `tool` dependencies at exact versions and whose
`go.sum` pins every module's hash, so the same source is built on every machine, from the Go
module proxy alone. The binaries go into a git-ignored cache (`.cluster-bins/` unless
`--dest` or `LAUNCH_AGENT_CLUSTER_BINS` says otherwise) with `versions.json`, which records
each binary's main module and version as its own Go build information states them
(`go version -m`), the Go version and how long the build took. A second run with nothing
changed (the same go.mod, go.sum, Go version and flags) does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "cluster"


@dataclass(frozen=True)
class Binary:
    name: str
    package: str


@dataclass(frozen=True)
class Module:
    folder: str
    binaries: tuple[Binary, ...]
    ldflags: str = "-s -w"


KUBE_VERSION = "v1.37.2"
# What `hack/lib/version.sh` stamps into a release build, so `--version` and /version say
# v1.37.2 (a plain `go build` would say v0.0.0-master, which Kueue's version checks refuse).
KUBE_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion={KUBE_VERSION}",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=37",
        "-X k8s.io/component-base/version.gitTreeState=clean",
        f"-X k8s.io/client-go/pkg/version.gitVersion={KUBE_VERSION}",
    ]
)

BUILD: tuple[Module, ...] = (
    Module(
        "etcd",
        (Binary("etcd", "go.etcd.io/etcd/server/v3"),),
    ),
    Module(
        "kube",
        (
            Binary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
            Binary("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
            Binary("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
        ),
        KUBE_LDFLAGS,
    ),
    # Kueue and Kubeflow Trainer share controller-runtime v0.23 and Kubernetes 0.35.
    Module(
        "kueue",
        (
            Binary("kueue", "sigs.k8s.io/kueue/cmd/kueue"),
            Binary("trainer", "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"),
        ),
        "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0",
    ),
    # controller-runtime v0.22: its webhook builder changed in v0.23, so these three cannot
    # share Kueue's module.
    Module(
        "operators",
        (
            Binary("jobset", "sigs.k8s.io/jobset"),
            Binary("lws", "sigs.k8s.io/lws/cmd"),
            Binary("kuberay-operator", "github.com/ray-project/kuberay/ray-operator"),
        ),
    ),
    # Kubeflow's training-operator (PyTorchJob, kubeflow.org/v1): controller-runtime v0.19.
    Module(
        "training-operator",
        (
            Binary(
                "training-operator",
                "github.com/kubeflow/training-operator/cmd/training-operator.v1",
            ),
        ),
    ),
)


@dataclass(frozen=True)
class Install:
    """An add-on's upstream install, rendered with `kubectl kustomize` from the module source.

    `parts` are folders of the module; one part is rendered as it is, several are combined in
    an overlay of their own in `namespace` (Trainer's own overlay also pulls JobSet's release
    manifest from GitHub, which this machine cannot reach; JobSet is installed from its module).
    """

    name: str
    folder: str  # the cluster/ module that requires it
    module: str
    parts: tuple[str, ...]
    namespace: str = ""


INSTALLS: tuple[Install, ...] = (
    Install("kueue", "kueue", "sigs.k8s.io/kueue", ("config/default",)),
    Install(
        "trainer",
        "kueue",
        "github.com/kubeflow/trainer/v2",
        (
            "manifests/overlays/manager/namespace.yaml",
            "manifests/base/crds",
            "manifests/base/rbac",
            "manifests/base/webhook",
            "manifests/base/runtimes",
        ),
        "kubeflow-system",
    ),
    Install("jobset", "operators", "sigs.k8s.io/jobset", ("config/default",)),
    Install("lws", "operators", "sigs.k8s.io/lws", ("config/default",)),
    Install(
        "kuberay", "operators", "github.com/ray-project/kuberay/ray-operator", ("config/default",)
    ),
    Install(
        "training-operator",
        "training-operator",
        "github.com/kubeflow/training-operator",
        ("manifests/overlays/standalone",),
    ),
)


def module_dir(folder: str, module: str, env: dict[str, str]) -> Path:
    out = subprocess.run(
        ["go", "list", "-m", "-json", module],
        check=True,
        capture_output=True,
        text=True,
        cwd=MODULES / folder,
        env=env,
    ).stdout
    info = json.loads(out)
    return Path(info["Dir"])


def render(install: Install, dest: Path, env: dict[str, str], kubectl: str) -> None:
    source = module_dir(install.folder, install.module, env)
    target = dest / "manifests" / f"{install.name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = source / install.parts[0]
        if len(install.parts) > 1:
            root = Path(scratch)
            # Kustomize takes folders only as relative paths.
            resources = "".join(
                f"  - {os.path.relpath(source / part, root)}\n" for part in install.parts
            )
            (root / "kustomization.yaml").write_text(
                f"namespace: {install.namespace}\nresources:\n{resources}"
            )
        rendered = subprocess.run(
            [kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(root)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    header = f"# {install.module} {install.parts} rendered by kubectl kustomize\n"
    target.write_text(header + rendered)
    print(f"cluster-bins: rendered {target.name} from {install.module}", flush=True)


def default_dest() -> Path:
    return Path(os.environ.get("LAUNCH_AGENT_CLUSTER_BINS") or ROOT / ".cluster-bins")


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    # go.mod and go.sum are the record: a build that would change them fails instead.
    env["GOFLAGS"] = "-mod=readonly -trimpath -buildvcs=false"
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def go_version(env: dict[str, str]) -> str:
    return subprocess.run(
        ["go", "env", "GOVERSION"], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def stamp(module: Module, go: str) -> str:
    folder = MODULES / module.folder
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((folder / name).read_bytes())
    digest.update(go.encode())
    digest.update(module.ldflags.encode())
    for binary in module.binaries:
        digest.update(f"{binary.name}={binary.package}".encode())
    return digest.hexdigest()


def build_info(path: Path, env: dict[str, str]) -> dict[str, str]:
    """The main package, its module and version and the Go version, from the binary itself."""
    out = subprocess.run(
        ["go", "version", "-m", str(path)], check=True, capture_output=True, text=True, env=env
    ).stdout
    info: dict[str, str] = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) >= 2 and fields[0] == "" and fields[1] == "path":
            info["package"] = fields[2]
        elif len(fields) >= 4 and fields[1] == "mod":
            info["module"], info["version"] = fields[2], fields[3]
        elif line.startswith(str(path)):
            info["go"] = line.split(": ", 1)[1]
    return info


def build(
    module: Module, dest: Path, env: dict[str, str], go: str, versions: dict[str, Any]
) -> bool:
    """Build the module's binaries unless they are up to date; whether it built them."""
    key = stamp(module, go)
    stamps = versions.setdefault("stamps", {})
    present = all((dest / "bin" / b.name).exists() for b in module.binaries)
    if stamps.get(module.folder) == key and present:
        print(f"cluster-bins: {module.folder}: up to date", flush=True)
        return False
    folder = MODULES / module.folder
    started = time.monotonic()
    for binary in module.binaries:
        target = dest / "bin" / binary.name
        print(f"cluster-bins: building {binary.name} ({binary.package})", flush=True)
        part = time.monotonic()
        subprocess.run(
            ["go", "build", "-ldflags", module.ldflags, "-o", str(target), binary.package],
            check=True,
            cwd=folder,
            env=env,
        )
        info = build_info(target, env)
        info["seconds"] = f"{time.monotonic() - part:.0f}"
        versions.setdefault("binaries", {})[binary.name] = info
    stamps[module.folder] = key
    versions.setdefault("build_seconds", {})[module.folder] = round(time.monotonic() - started)
    versions["go"] = go
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None, help="the cache (default .cluster-bins)")
    parser.add_argument(
        "--kubectl", default="kubectl", help="the kubectl that renders the installs (kustomize)"
    )
    parser.add_argument(
        "--only", action="append", default=[], help="build only this module folder (repeatable)"
    )
    args = parser.parse_args(argv)
    dest: Path = (args.dest or default_dest()).resolve()
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    record = dest / "versions.json"
    versions = json.loads(record.read_text()) if record.exists() else {}
    env = go_env()
    go = go_version(env)
    for module in BUILD:
        if args.only and module.folder not in args.only:
            continue
        try:
            built = build(module, dest, env, go, versions)
        finally:
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n")
            tmp.replace(record)
        for install in INSTALLS:
            rendered = dest / "manifests" / f"{install.name}.yaml"
            if install.folder == module.folder and (built or not rendered.exists()):
                render(install, dest, env, args.kubectl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
