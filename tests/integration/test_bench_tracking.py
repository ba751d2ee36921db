"""`launch-agent bench tracking` runs and measures what it says (small N; no timing asserted)."""

from __future__ import annotations

from pathlib import Path

from launch_agent.commands.bench_tracking import measure


async def test_bench_tracking_smoke(tmp_path: Path) -> None:
    result = await measure(runs=40, idle_seconds=0.1, tmp=tmp_path, view="tracking")
    assert result["objects_cached"] == 80  # 40 Jobs + 40 pods
    assert result["open_watches"] == 2  # one per (kind, namespace), not one per run
    assert result["sync_requests"] == 2  # one list page per informer (watches stay open)
    assert result["idle_requests"] == 0
    assert result["burst_seconds"] > 0
