"""`launch-agent bench build` runs end to end on a small tree and reports one build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch_agent.cli import main


def test_bench_build_reports_one_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "build", "--mb", "2", "--runs", "4", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["packing"]["identical"] is True
    assert result["packing"]["mb_per_second"] > 0
    flight = result["single_flight"]
    assert (flight["build_jobs"], flight["distinct_images"], flight["rerun_build_jobs"]) == (
        1,
        1,
        0,
    )
    assert flight["stats"] == {"requests": 5, "builds": 1, "shared": 3, "skipped": 1}
    assert "MB/s" in capsys.readouterr().out


def test_bench_build_rejects_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "build", "--mb", "0"]) == 2
    assert "error: --mb and --runs must be at least 1" in capsys.readouterr().err
