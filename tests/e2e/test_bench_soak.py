"""`launch-agent bench soak` for one minute: our agent as a subprocess under a steady arrival.

The slopes are not asserted (a one-minute soak is mostly warm-up); what is checked is that every
metric was measured and printed, that runs arrived at the rate asked and the agent acked them,
and that the samples come from live sources (the agent's own gauges and the API server's
watch count), not defaults.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from launch_agent.demo.soak import METRICS

LAUNCH_AGENT = Path(sys.executable).parent / "launch-agent"


@pytest.mark.long
async def test_bench_soak_one_minute(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    process = await asyncio.create_subprocess_exec(
        str(LAUNCH_AGENT),
        *("bench", "soak", "--minutes", "1", "--rate", "30", "--ttl", "10", "--json", str(out)),
        env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=180)
    text = stdout.decode()
    assert process.returncode == 0, text + stderr.decode()
    table = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}
    for name in METRICS:
        assert name in table, f"{name} not printed:\n{text}"
        assert len(table[name]) == 4, table[name]  # first, last, slope, steady slope
    results = json.loads(await asyncio.to_thread(out.read_text))
    assert results["runs_pushed"] == 30
    assert results["runs_acked"] >= 25, "the agent kept up with the arrivals"
    assert set(results["slopes_per_minute"]) == set(METRICS)
    assert set(results["steady_slopes_per_minute"]) == set(METRICS)
    assert results["ttl_seconds"] == 10 and results["steady_from_minute"] == round(70 / 60, 3)
    samples = results["samples"]
    assert len(samples) == 7, "every 10 s for a short soak, both ends included"
    last = samples[-1]
    assert last["rss_mb"] > 10 and last["open_fds"] > 3
    assert last["asyncio_tasks"] > 5, "the agent's own gauge, read from /metrics"
    assert last["watch_connections"] >= 2, "Jobs and pods, as the API server counts them"
    assert max(s["run_table"] for s in samples) > 0, "runs tracked while they ran"
    # --ttl reached the Jobs: finished ones expired, so the cluster holds fewer than arrived
    # (each runs about 3 s, then stays 10 s), and their pods went with them.
    assert 0 < max(s["cluster_jobs"] for s in samples) < 25, samples
    assert last["cluster_pods"] <= last["cluster_jobs"] + 2, samples
