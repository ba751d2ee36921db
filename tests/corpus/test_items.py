"""Hostile items through `launch-agent render --item` (`launch_agent.cli.main`), as an admin
would try one: refused with the item file, the line or runSpec path, and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.corpus._input_limits import Case, check_error, isolate, params, run_cli

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: corpus
spec:
  queues: [q1]
  namespace: default
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
  overridable:
    - overrides.args
    - overrides.run_config
"""


@params("items")
def test_item(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    isolate(monkeypatch, tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    config = tmp_path / "launch-config.yaml"
    config.write_text(yaml.safe_dump({"entity": "ent", **case.data.get("config", {})}))
    item = case.input_path(tmp_path, lambda value: json.dumps(value, indent=2))
    argv = ["render", "--spec", str(spec), "--item", str(item), "-c", str(config)]
    code, out, err = run_cli(argv, capsys)
    if "error" in case.expect:
        check_error(case, code, 2, err, f"{item}: ")
        return
    assert code == 0, err
    for fragment in case.expect["safe"]["contains"]:
        assert fragment in out, (fragment, out)
