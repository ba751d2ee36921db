"""Hostile queue spec files through `launch-agent validate` (`launch_agent.cli.main`): refused
with the file, the line and column, the key path and the reason; the agent loads specs with
the same loader (`render.spec_load`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.corpus._input_limits import Case, check_error, isolate, params, run_cli


@params("queue_specs")
def test_queue_spec(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    isolate(monkeypatch, tmp_path)
    spec = case.input_path(tmp_path, lambda value: yaml.safe_dump(value, sort_keys=False))
    code, out, err = run_cli(["validate", str(spec)], capsys)
    if "error" in case.expect:
        check_error(case, code, 1, err, f"{spec}: ")
        return
    assert code == 0, err
    assert out.startswith(f"ok: {spec}: "), out
