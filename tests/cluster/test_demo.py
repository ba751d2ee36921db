"""`launch-agent demo --cluster real` and `--cluster real --workers 2`, as a user runs them
(real tier only: the demo starts its own cluster, as `cluster up` does, in its own process).

Each checks the exit status and the closing table: every scenario the real tier can play ended
as the real components decide (kube-scheduler's words for `no-gpu`, Kueue's for `kueue`), the
rest were left out with a reason, and with MultiKueue the WORKER column (what the agent's run
table recorded) names both workers. `tests/e2e/test_demo.py` shows the demo fails when an
outcome differs; `tests/unit/demo/test_scenario.py` that it fails when a worker took no run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch_agent.demo.scenario import REAL_KUEUE_QUEUES, WORKER_RUNS, real_runs
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.setup import built_addons

ROOT = Path(__file__).resolve().parents[2]
# Well inside pytest-timeout's 300 s: the cluster's start, then the runs' own limit.
RUNS_WITHIN = "120"
PROCESS_WITHIN = 270.0

pytestmark = pytest.mark.real_only


def demo(tmp_path: Path, *extra: str) -> tuple[int, str]:
    command = [
        sys.executable,
        "-m",
        "launch_agent.cli",
        "demo",
        "--cluster",
        "real",
        "--dir",
        str(tmp_path / "cluster"),
        "--timeout",
        RUNS_WITHIN,
        *extra,
    ]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=PROCESS_WITHIN,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def rows_of(out: str) -> dict[str, list[str]]:
    """The closing table's rows by run name (its columns, split on runs of spaces)."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["run", "queue", "kind"])
    rows = {}
    for line in lines[header + 2 :]:
        if not line.strip() or ":" in line.split()[0]:
            break
        cells = [c for c in line.split("  ") if c.strip()]
        rows[cells[0].strip()] = [c.strip() for c in cells]
    return rows


def test_the_demo_on_the_real_cluster_ends_with_every_run_as_expected(tmp_path: Path) -> None:
    status, out = demo(tmp_path)
    assert status == 0, out
    assert "every run ended as expected" in out, out
    runs, left = real_runs(built_addons(Binaries.find()))
    rows = rows_of(out)
    assert set(rows) == {r.name for r in runs}, out
    for run in runs:
        assert rows[run.name][3:6] == [run.expect, run.expect, "yes"], rows[run.name]
    for entry in left:
        assert f"left out: {entry.name} ({entry.kind}): {entry.reason}" in out
    # What the real components said, as W&B received it.
    assert (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are"
        " available: 2 Preemption is not helpful for scheduling."
    ) in out
    if "kueue" in rows:
        queue = REAL_KUEUE_QUEUES[0]
        assert f"waiting for Kueue: LocalQueue {queue.namespace}/{queue.name}:" in out
        assert "insufficient quota for cpu in flavor default-flavor" in out
    assert "allocating 80GiB on the GPU" in out  # the log tail, read through the API server


def test_the_demo_on_two_workers_runs_on_both_and_names_each_runs_worker(tmp_path: Path) -> None:
    status, out = demo(tmp_path, "--workers", "2")
    assert status == 0, out
    assert "every run ended as expected; runs landed on worker-1, worker-2" in out, out
    rows = rows_of(out)
    assert set(rows) == {r.name for r in WORKER_RUNS}, out
    workers = {name: cells[6] for name, cells in rows.items()}
    assert set(workers.values()) == {"worker-1", "worker-2"}, workers
    for run in WORKER_RUNS:
        # The progress line the agent's placement printed agrees with the table.
        assert f"{run.name:<11} agent: MultiKueue placed it on worker cluster" in out
        line = next(
            line
            for line in out.splitlines()
            if f"{run.name:<11} agent: MultiKueue placed it on" in line
        )
        assert line.endswith(workers[run.name]), (line, workers[run.name])
    assert "failed on worker cluster worker-" in out  # multi-oom, read on its worker
