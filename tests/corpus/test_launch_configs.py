"""Hostile launch-config.yaml files through `launch-agent config show -c` (`launch_agent.cli.
main`): refused with `file:line`, the key path and the reason, by the loader the agent uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.corpus._input_limits import Case, check_error, isolate, params, run_cli


@params("launch_configs")
def test_launch_config(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    isolate(monkeypatch, tmp_path)
    config = case.input_path(tmp_path, lambda value: yaml.safe_dump(value, sort_keys=False))
    code, out, err = run_cli(["config", "show", "-c", str(config)], capsys)
    if "error" in case.expect:
        check_error(case, code, 2, err, str(config))
        return
    assert code == 0, err
    for fragment in case.expect["safe"]["contains"]:
        assert fragment in out, (fragment, out)
