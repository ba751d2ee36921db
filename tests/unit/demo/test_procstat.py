"""`/proc` parsing for the benchmarks' CPU and memory figures, and the tree walk on real pids."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launch_agent.demo.procstat import (
    CLOCK_TICKS,
    ProcSample,
    TreeSampler,
    TreeStats,
    parse_stat,
    parse_status,
    read_tree,
)

# Fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
# utime stime ...
STAT_TAIL = "S 41 42 42 0 -1 4194560 1 0 0 0 {u} {s} 0 0 20 0 1 0 5 1000 10 0"


@pytest.mark.parametrize(
    ("name", "utime", "stime"),
    [
        ("python3", 100, 50),
        ("wandb-core", 0, 0),
        ("tricky) name (x", 7, 3),  # the name may hold spaces and parentheses
    ],
)
def test_parse_stat(name: str, utime: int, stime: int) -> None:
    text = f"1234 ({name}) " + STAT_TAIL.format(u=utime, s=stime)
    assert parse_stat(text) == (41, name, (utime + stime) / CLOCK_TICKS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n", (1024, 2048)),
        ("Name:\tzombie\nState:\tZ (zombie)\n", (0, 0)),
    ],
)
def test_parse_status(text: str, expected: tuple[int, int]) -> None:
    assert parse_status(text) == expected


def test_tree_stats_keep_the_last_sample_and_the_peak_of_the_sum() -> None:
    stats = TreeStats()
    stats.add([ProcSample(1, 0, "agent", 1.0, 100_000, 150_000), ProcSample(2, 1, "core", 0.5, 50)])
    stats.add([ProcSample(1, 0, "agent", 2.0, 60_000, 150_000)])  # the child exited
    assert stats.cpu_seconds() == 2.5
    assert stats.peak_tree_rss_kb == 100_050
    assert stats.peak_rss_mb(1) == round(150_000 / 1024, 1)
    assert stats.peak_rss_mb(99) == 0.0
    assert stats.by_name()["core"]["cpu_seconds"] == 0.5


def test_read_tree_finds_a_child_of_a_real_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = read_tree(os.getpid())
        pids = {s.pid for s in tree}
        assert os.getpid() in pids
        assert child.pid in pids
        me = next(s for s in tree if s.pid == os.getpid())
        assert me.rss_kb > 0 and me.hwm_kb >= me.rss_kb
        sampler = TreeSampler(child.pid, interval=0.01).start()
        stats = sampler.sample()
        sampler.stop()
        assert stats.samples >= 1
        assert stats.peak_rss_mb(child.pid) > 0
    finally:
        child.kill()
        child.wait()
    assert read_tree(child.pid) == []
