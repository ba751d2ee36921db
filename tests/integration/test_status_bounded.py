"""`launch-agent status` reads `/api/status` bounded, by URL and through the API server proxy.

The real CLI in a child process against a loopback server whose answer is 200 MiB, or
endless: exit status 1, one `error:` line naming the limit, and the child's peak memory
(`wait4`) under the limit plus the interpreter's baseline. Before, it read the whole answer and
then checked its size (688 MB for a 688 MB answer).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from launch_agent.sandbox.kube import write_kubeconfig
from tests.floods import Flood, flood_server
from tests.peak_rss import measured, peak

MIB = 1024 * 1024
BASELINE = 160 * MIB
LIMIT = 16_000_000
ADDRESS_SPACE = 3 * 1024 * MIB


def _run(argv: list[str], cwd: Path) -> tuple[int, str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    env["HOME"] = str(cwd)
    rss = cwd / ".peak-rss"
    child = measured(
        [sys.executable, "-m", "launch_agent", "status", *argv],
        rss,
        ADDRESS_SPACE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    assert child.stderr is not None
    err = child.stderr.read().decode()
    child.wait()
    return child.returncode, err, peak(rss)


async def _status(*argv: str, cwd: Path) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in bytes) of `launch-agent status ARGV`; the child is
    waited for in a thread (`wait4` gives its own peak), the flood server runs on the loop."""
    async with asyncio.timeout(120):
        return await asyncio.to_thread(_run, list(argv), cwd)


@pytest.fixture
async def flood() -> AsyncIterator[Flood]:
    async with flood_server() as server:
        yield server


@pytest.mark.parametrize("mode", ["length", "chunked", "endless"])
async def test_status_by_url_stops_at_the_limit(flood: Flood, tmp_path: Path, mode: str) -> None:
    flood.mode, flood.size = mode, 200 * MIB
    code, err, peak = await _status("--url", flood.url, cwd=tmp_path)
    lines = err.strip().splitlines()
    assert code == 1, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    assert lines[0].startswith(f"error: {flood.url}/api/status: ")
    assert "is over 16,000,000 bytes" in lines[0], lines[0]
    assert peak < LIMIT + BASELINE, f"peak RSS {peak / MIB:.0f} MiB"


@pytest.mark.parametrize("mode", ["length", "endless"])
async def test_status_through_the_proxy_stops_at_the_limit(
    flood: Flood, tmp_path: Path, mode: str
) -> None:
    flood.mode, flood.size = mode, 200 * MIB
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", flood.url)
    code, err, peak = await _status(
        "--kubeconfig", str(kubeconfig), "-n", "ns1", "--release", "rel", cwd=tmp_path
    )
    lines = err.strip().splitlines()
    assert code == 1, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    assert "/services/http:rel-metrics:http/proxy/api/status" in lines[0], lines[0]
    assert "is over 16,000,000 bytes" in lines[0], lines[0]
    assert peak < LIMIT + BASELINE, f"peak RSS {peak / MIB:.0f} MiB"
    assert flood.paths == ["/api/v1/namespaces/ns1/services/http:rel-metrics:http/proxy/api/status"]
