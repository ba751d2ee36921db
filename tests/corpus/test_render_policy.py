"""Hostile corpus for the override policy: each case rendered through `launch-agent render`.

Every case is one file in `render_policy/` (see its README): a queue spec and a popped item,
and either the error substrings the refusal must contain (exit status 2) or checks of the
rendered workload (exit status 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from launch_agent.render.paths import parse_glob, resolve

CASES = sorted((Path(__file__).parent / "render_policy").glob("*.yaml"))


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_render_policy_case(
    case_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = yaml.safe_load(case_file.read_text())
    assert set(case) == {"description", "input", "expect"}, case_file.name
    spec_file, item_file = tmp_path / "spec.yaml", tmp_path / "item.json"
    spec_file.write_text(yaml.safe_dump(case["input"]["spec"], sort_keys=False))
    item_file.write_text(json.dumps(case["input"]["item"]))
    argv = ["render", "--spec", str(spec_file), "--item", str(item_file), "-o", "json"]
    status = main(argv)
    out, err = capsys.readouterr()
    expect = case["expect"]
    if "error" in expect:
        assert status == 2, (out, err)
        assert expect["error"], "an error case names at least the path"
        for needle in expect["error"]:
            assert needle in err, f"{needle!r} not in:\n{err}"
        return
    assert status == 0, err
    assert "error:" not in err
    workload: dict[str, Any] = json.loads(out)[0]
    safe = expect["safe"]
    assert workload["kind"] == safe["kind"]
    for path, want in safe.get("equals", {}).items():
        assert resolve(workload, parse_glob(path)) == want, path  # type: ignore[arg-type]
