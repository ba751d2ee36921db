"""`bench dispatch --profile`'s tables: own CPU by stage, C functions charged to their caller."""

from __future__ import annotations

import cProfile
import json
import pstats
from pathlib import Path

from launch_agent.demo.profiling import OTHER, STAGES, own_by_stage, report, stage_of


def test_stage_of_a_function_by_its_file() -> None:
    assert stage_of("/x/launch_agent/render/pipeline.py", "render") == "render and policy"
    assert stage_of("/x/site-packages/aiohttp/client.py", "_request").startswith("HTTP")
    assert stage_of("/x/lib/python3.11/json/encoder.py", "iterencode") == "JSON"
    assert stage_of("/x/launch_agent/runtime/poller.py", "run").startswith("agent runtime")
    # A module body is an import, wherever it is.
    assert stage_of("/x/launch_agent/render/paths.py", "<module>") == STAGES[0][0]
    assert stage_of("/x/lib/python3.11/heapq.py", "heappush") == OTHER


def _encode() -> None:
    for _ in range(200):
        json.dumps({"a": [1, 2, 3] * 50}, sort_keys=True)


def test_own_time_sums_to_the_profile_and_c_calls_go_to_their_callers(tmp_path: Path) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(_encode)
    out = tmp_path / "p.pstats"
    profiler.dump_stats(out)
    stats = pstats.Stats(str(out))
    stages = own_by_stage(stats)
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    assert abs(sum(stages.values()) - total) < 1e-6
    # The C encoder's time is JSON's (its caller is json/encoder.py), not "other".
    assert stages["JSON"] > stages.get(OTHER, 0.0)
    text = report(out, runs=200)
    assert "| JSON |" in text
    assert "Top functions by own CPU" in text
    assert "Top functions by cumulative CPU" in text
