"""Shared by the items, queue_specs and launch_configs corpus runners (the input-limits cases).

A case is `NNN-name.yaml`: `description`, `input` (a value, written out by the runner) or
`input_file` (a sibling raw-text file, for what YAML cannot hold as a value: duplicate keys,
alias bombs, deep nesting), optional area keys, and `expect`: `{error: [substrings]}` or
`{safe: {...}}`. Cases are read with plain `yaml.safe_load`, independent of the loader they test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main

CASE_KEYS = {"description", "input", "input_file", "expect", "config"}


@dataclass(frozen=True)
class Case:
    path: Path
    data: dict[str, Any]

    @property
    def expect(self) -> dict[str, Any]:
        expect: dict[str, Any] = self.data["expect"]
        return expect

    def input_path(self, tmp: Path, dump: Any) -> Path:
        """The input as a file: the sibling raw file, or `input` written by `dump`."""
        if "input_file" in self.data:
            return self.path.parent / str(self.data["input_file"])
        target = tmp / f"{self.path.stem}.input"
        target.write_text(dump(self.data["input"]), encoding="utf-8")
        return target


def cases(area: str) -> list[Case]:
    folder = Path(__file__).parent / area
    found = []
    for path in sorted(folder.glob("[0-9][0-9][0-9]-*.yaml")):
        if ".input." in path.name:
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(data, dict) and set(data) <= CASE_KEYS, path
        assert isinstance(data.get("description"), str), path
        assert ("input" in data) != ("input_file" in data), path
        assert set(data["expect"]) in ({"error"}, {"safe"}), path
        found.append(Case(path, data))
    return found


def params(area: str) -> pytest.MarkDecorator:
    found = cases(area)
    return pytest.mark.parametrize("case", found, ids=[c.path.stem for c in found])


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """No configuration from the machine running the tests: only the case's own files."""
    for name in list(os.environ):
        if name.startswith(("WANDB_", "LAUNCH_AGENT_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / "no-netrc"))


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def check_error(case: Case, code: int, want_code: int, err: str, prefix: str) -> None:
    """Refused: the exit code, every substring in one `error:` line naming the file."""
    assert code == want_code, (code, err)
    lines = [line for line in err.splitlines() if line.startswith(f"error: {prefix}")]
    assert lines, err
    text = "\n".join(lines)
    for fragment in case.expect["error"]:
        assert fragment in text, (fragment, text)
