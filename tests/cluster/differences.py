"""What still differs between the sandbox and the real cluster, and why it stays.

`test_compare.py` fails on any difference no entry here explains; docs/sandbox.md's section
"What still differs from the real cluster" is `render()` of this list (a unit test keeps them
equal). An entry names the scenarios and the compared paths it covers (`*` matching anything, over
the paths `compare.normalise` writes) and the reason the sandbox is not changed to match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.compare import NOISE, Difference


@dataclass(frozen=True)
class Known:
    scenarios: str  # a pattern over scenario names
    paths: tuple[str, ...]  # patterns over compared paths
    what: str  # the difference, for the docs
    why: str  # why it stays

    def explains(self, difference: Difference) -> bool:
        return _matches(self.scenarios, difference.scenario) and any(
            _matches(p, difference.path) for p in self.paths
        )


def _matches(pattern: str, text: str) -> bool:
    """`*` matches anything; every other character itself (paths hold `[` and `]`)."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), text) is not None


KNOWN: list[Known] = [
    Known(
        "*",
        (
            "pod/*.spec.volumes[kube-api-access-GENERATED]*",
            "pod/*.spec.containers[*].volumeMounts[kube-api-access-GENERATED]*",
        ),
        "No service-account token volume in pods",
        "kube-apiserver's ServiceAccount admission plugin adds a projected volume"
        " `kube-api-access-<random>` (a bound token, the `kube-root-ca.crt` ConfigMap and the"
        " namespace) and mounts it at `/var/run/secrets/kubernetes.io/serviceaccount` in every"
        " container (`plugin/pkg/admission/serviceaccount/admission.go`"
        " `mountServiceAccountToken`). The sandbox issues no tokens and publishes no"
        " `kube-root-ca.crt` (the root-CA publisher), and its kubelet keeps a pod in"
        " `ContainerCreating` while a projected ConfigMap is missing, so adding the volume"
        " alone would hold every pod. The agent renders `automountServiceAccountToken:"
        " false` unless a queue spec grants it (`render/security.py`), so its own pods get no"
        " such volume on a real cluster either; the scenarios here create theirs without it.",
    ),
]


def unexplained(found: list[Difference]) -> list[Difference]:
    return [d for d in found if not any(k.explains(d) for k in KNOWN)]


def stale(scenarios: list[str], found: list[Difference]) -> list[Known]:
    """Entries that name one of `scenarios` and explained none of their differences: the
    sandbox was fixed (or the entry's patterns are wrong), so the entry must go. An entry for
    every scenario (`*`) must hold in every group of them."""
    return [
        k
        for k in KNOWN
        if any(_matches(k.scenarios, name) for name in scenarios)
        and not any(k.explains(d) for d in found)
    ]


DOC = Path(__file__).resolve().parents[2] / "docs" / "sandbox.md"
HEADER = "<!-- generated from tests/cluster/differences.py; keep them equal -->"
FOOTER = "<!-- end of the generated list -->"


def render() -> str:
    """The docs' list: one bullet per entry, then the Events left out of the comparison."""
    lines = [HEADER, ""]
    for known in KNOWN:
        lines.append(f"- **{known.what}** ({_where(known)}). {known.why}")
    lines += ["", "Left out of the comparison, as noise of the real cluster:", ""]
    for pattern, why in NOISE:
        lines.append(f"- Events matching `{pattern.pattern}`: {why}")
    return "\n".join([*lines, "", FOOTER]) + "\n"


def _where(known: Known) -> str:
    scenarios = "every scenario" if known.scenarios == "*" else f"`{known.scenarios}`"
    return f"{scenarios}; " + ", ".join(f"`{p}`" for p in known.paths)


def write_docs(doc: Path = DOC) -> None:
    """Rewrite docs/sandbox.md's list from `KNOWN` and `NOISE`."""
    text = doc.read_text()
    start, end = text.index(HEADER), text.index(FOOTER) + len(FOOTER) + 1
    doc.write_text(text[:start] + render() + text[end:])


if __name__ == "__main__":
    write_docs()
