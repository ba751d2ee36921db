"""`launch-agent bench dispatch --cluster real`, as a user runs it (real tier only: the benchmark
starts its own etcd and kube-apiserver, in its own process).

Small numbers (50 runs, the reference agent when `.venv-reference` has it): exit 0, each
agent's Jobs counted in its own namespace, every one created once and counted once by
kube-apiserver's own metrics (one POST per Job, so a harness reading the wrong namespace, or
counting requests it made itself, fails here), and the plain client's row. No timing is
asserted. `tests/unit/demo/test_apimetrics.py` shows the created-once check fails on a lost,
a doubled and a foreign Job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launch_agent.demo.launchers import reference_wandb

ROOT = Path(__file__).resolve().parents[2]
RUNS = 50
PROCESS_WITHIN = 240.0

pytestmark = pytest.mark.real_only


def bench(tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "bench.json"
    command = [
        sys.executable,
        "-m",
        "launch_agent.cli",
        "bench",
        "dispatch",
        "--cluster",
        "real",
        "--runs",
        str(RUNS),
        "--client-in-flight",
        "4,16",
        "--json",
        str(out),
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
    text = done.stdout + done.stderr
    return done.returncode, text, json.loads(out.read_text()) if out.exists() else {}


def test_both_agents_and_a_plain_client_create_every_job_once_on_one_api_server(
    tmp_path: Path,
) -> None:
    with_reference = reference_wandb().exists()
    status, out, results = bench(tmp_path, *(() if with_reference else ("--skip-reference",)))
    assert status == 0, out
    assert results["cluster"]["processes"] == ["etcd", "kube-apiserver"], results["cluster"]
    rows = ["ours", "reference"] if with_reference else ["ours"]
    if not with_reference:
        assert results["reference"] == {"skipped": "--skip-reference"}
    namespaces = set()
    for key in rows:
        row = results[key]
        once = row["once"]
        assert once == dict.fromkeys(once, RUNS), (key, once)
        # One POST per Job, counted by kube-apiserver itself: no Job tried twice, none missed.
        assert row["kube_routes"]["POST jobs"] == RUNS, (key, row["kube_routes"])
        assert row["kube_requests_per_run"] >= 1.0
        assert row["runs_per_second"] > 0 and row["pop_to_create_ms"]["p99"] > 0
        namespaces.add(row["namespace"])
    client = results["client"]
    assert [t["in_flight"] for t in client["tries"]] == [4, 16]
    for attempt in client["tries"]:
        assert attempt["kube_routes"] == {"POST jobs": RUNS}, attempt
        assert attempt["request_ms"]["p50"] > 0
        namespaces.add(attempt["namespace"])
    assert client["runs_per_second"] == max(t["runs_per_second"] for t in client["tries"])
    assert len(namespaces) == len(rows) + 2, namespaces
    assert set(results["of_client_rate"]) == set(rows)
    assert "plain client" in out and "Kubernetes requests per run" in out, out


def test_a_missing_binary_is_an_error(tmp_path: Path) -> None:
    env = os.environ | {"LAUNCH_AGENT_CLUSTER_BINS": str(tmp_path / "nothing")}
    done = subprocess.run(
        [sys.executable, "-m", "launch_agent.cli", "bench", "dispatch", "--cluster", "real"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "make cluster-bins" in done.stderr, done.stderr
