"""CPU and memory of a process tree, read from `/proc` (Linux), for the benchmarks.

What the reference-agent note measured and how: CPU is `utime + stime` of every process in
the tree (the agent and its children, e.g. the reference agent's `wandb-core`), memory is
`VmRSS` (now) and `VmHWM` (the kernel's own peak RSS of each process). The tree is found by
`PPid`, sampled every `interval` seconds in a worker thread, because reading `/proc` is blocking
file I/O; a child that exits between samples keeps the last values seen.

Parsing is pure (`parse_stat`, `parse_status`) and tested with tables; `TreeSampler` does the
reading.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class ProcSample:
    pid: int
    ppid: int
    name: str
    cpu_seconds: float
    rss_kb: int = 0
    hwm_kb: int = 0


def parse_stat(text: str) -> tuple[int, str, float]:
    """(ppid, command name, utime+stime seconds) from `/proc/PID/stat`."""
    # The command name is in parentheses and may itself contain spaces and parentheses.
    open_at, close_at = text.index("("), text.rindex(")")
    name = text[open_at + 1 : close_at]
    fields = text[close_at + 2 :].split()
    # fields[0] is field 3 (state); ppid is field 4, utime 14, stime 15 (1-based, man proc).
    ppid = int(fields[1])
    ticks = int(fields[11]) + int(fields[12])
    return ppid, name, ticks / CLOCK_TICKS


def parse_status(text: str) -> tuple[int, int]:
    """(VmRSS kB, VmHWM kB) from `/proc/PID/status`; zeros for a zombie."""
    rss = hwm = 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return rss, hwm


def read_process(pid: int) -> ProcSample | None:
    try:
        ppid, name, cpu = parse_stat((PROC / str(pid) / "stat").read_text())
        rss, hwm = parse_status((PROC / str(pid) / "status").read_text())
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile
    return ProcSample(pid, ppid, name, cpu, rss, hwm)


def read_tree(root: int) -> list[ProcSample]:
    """The root and all its descendants, as they are now."""
    samples = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            sample = read_process(int(entry.name))
            if sample is not None:
                samples[sample.pid] = sample
    if root not in samples:
        return []
    tree, frontier = [samples[root]], [root]
    while frontier:
        parent = frontier.pop()
        for sample in samples.values():
            if sample.ppid == parent and sample.pid != root:
                tree.append(sample)
                frontier.append(sample.pid)
    return tree


@dataclass
class TreeStats:
    """The latest value per process, and peaks over the samples."""

    last: dict[int, ProcSample] = field(default_factory=dict)
    peak_tree_rss_kb: int = 0
    samples: int = 0

    def add(self, tree: list[ProcSample]) -> None:
        for sample in tree:
            self.last[sample.pid] = sample
        self.peak_tree_rss_kb = max(self.peak_tree_rss_kb, sum(s.rss_kb for s in tree))
        self.samples += 1

    def cpu_seconds(self) -> float:
        return sum(s.cpu_seconds for s in self.last.values())

    def peak_rss_mb(self, pid: int) -> float:
        sample = self.last.get(pid)
        return round(sample.hwm_kb / 1024, 1) if sample else 0.0

    def by_name(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for sample in self.last.values():
            entry = out.setdefault(sample.name, {"cpu_seconds": 0.0, "peak_rss_mb": 0.0})
            entry["cpu_seconds"] = round(entry["cpu_seconds"] + sample.cpu_seconds, 2)
            entry["peak_rss_mb"] = max(entry["peak_rss_mb"], round(sample.hwm_kb / 1024, 1))
        return out


class TreeSampler:
    """Samples a process tree in a thread until `stop()`; `stats` is safe to read after."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root = root
        self.interval = interval
        self.stats = TreeStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{root}", daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def sample(self) -> TreeStats:
        """Take one sample now (blocking: call it from a thread) and return the stats."""
        tree = read_tree(self.root)
        with self._lock:
            if tree:
                self.stats.add(tree)
            return self.stats

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop sampling and wait for the thread (blocking: call it from a thread)."""
        self._stop.set()
        self._thread.join()
