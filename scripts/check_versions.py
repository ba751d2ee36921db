"""Check that every place that states the release version agrees with the package's.

    python scripts/check_versions.py [--root DIR] [--dist DIR]

The one source is `__version__` in `launch_agent/__init__.py`. It must equal the chart's
`version` and `appVersion` (the image tag the chart runs by default), and CHANGELOG.md must have
a section for it. With `--dist`, the built artefacts must carry it too: the wheel, the sdist and
the packaged chart (`make release` builds them there). Exit status 1 lists every disagreement,
each with the file that states the other number.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)
# Keep a Changelog: `## [0.1.0] - 2026-12-01`.
CHANGELOG_HEADING = re.compile(r"^## \[([^\]]+)\]", re.MULTILINE)


def package_version(root: Path) -> str:
    text = (root / "launch_agent" / "__init__.py").read_text(encoding="utf-8")
    found = VERSION_LINE.search(text)
    if found is None:
        raise SystemExit('launch_agent/__init__.py: no `__version__ = "..."` line')
    return found.group(1)


def problems(root: Path, dist: Path | None = None) -> list[str]:
    version = package_version(root)
    out = []
    chart = yaml.safe_load((root / "charts" / "launch-agent" / "Chart.yaml").read_text())
    for key in ("version", "appVersion"):
        if str(chart.get(key)) != version:
            out.append(
                f"charts/launch-agent/Chart.yaml: {key} is {chart.get(key)!r}, not {version!r}"
            )
    changelog = root / "CHANGELOG.md"
    released = CHANGELOG_HEADING.findall(changelog.read_text()) if changelog.is_file() else []
    if version not in released:
        out.append(f"CHANGELOG.md: no `## [{version}]` section (sections: {released})")
    if dist is not None:
        expected = {
            "wheel": f"launch_agent-{version}-py3-none-any.whl",
            "sdist": f"launch_agent-{version}.tar.gz",
            "chart": f"launch-agent-{version}.tgz",
        }
        present = {p.name for p in dist.iterdir()} if dist.is_dir() else set()
        for what, name in expected.items():
            if name not in present:
                out.append(f"{dist}: no {what} {name} (found: {sorted(present)})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--dist", type=Path)
    args = parser.parse_args(argv)
    found = problems(args.root, args.dist)
    for problem in found:
        print(f"version mismatch: {problem}", file=sys.stderr)
    if not found:
        print(f"launch-agent {package_version(args.root)}: package, chart and changelog agree")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
