"""What still differs between the sandbox and the real cluster, and why it stays.

`test_compare.py` fails on any difference no entry here explains; docs/sandbox.md's section
"What still differs from the real cluster" is `render()` of this list (a unit test keeps them
equal). An entry names the scenarios and the compared paths it covers (shell patterns, as
`compare.normalise` writes paths) and the reason the sandbox is not changed to match.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from tests.cluster.compare import Difference


@dataclass(frozen=True)
class Known:
    scenarios: str  # a pattern over scenario names
    paths: tuple[str, ...]  # patterns over compared paths
    what: str  # the difference, for the docs
    why: str  # why it stays

    def explains(self, difference: Difference) -> bool:
        return fnmatchcase(difference.scenario, self.scenarios) and any(
            fnmatchcase(difference.path, p) for p in self.paths
        )


KNOWN: list[Known] = []


def unexplained(found: list[Difference]) -> list[Difference]:
    return [d for d in found if not any(k.explains(d) for k in KNOWN)]


HEADER = "<!-- generated from tests/cluster/differences.py; keep them equal -->"


def render() -> str:
    """The docs' list: one bullet per entry."""
    lines = [HEADER, ""]
    for known in KNOWN:
        lines.append(f"- **{known.what}** ({_where(known)}). {known.why}")
    return "\n".join(lines) + "\n"


def _where(known: Known) -> str:
    scenarios = "every scenario" if known.scenarios == "*" else f"`{known.scenarios}`"
    return f"{scenarios}; " + ", ".join(f"`{p}`" for p in known.paths)
