"""Profiling the benchmarked agent: `bench dispatch --profile DIR`.

The agent subprocess runs as `python -m launch_agent.demo.profiling OUT run ...`, the same
command as `launch-agent run` under `cProfile`. Start-up is profiled too: the agent's imports
happen under the profiler. The statistics are written to OUT (`pstats` format) when the agent
exits. cProfile's clock is the wall clock (a CPU-time clock, `time.process_time`, made the
agent ten times slower and distorted the shares); the event loop's waits in `epoll` are
therefore left out of the tables (`IDLE`), and the machine should be otherwise quiet.

`stage_table` and `top_table` turn such a file into the tables of docs/benchmarks.md: own CPU
time grouped by stage (C functions are charged to the stage of the Python function that called
them: `json.dumps`'s encoder to JSON, `epoll.poll` to the event loop), and the top functions by
own and by cumulative time, in milliseconds per run. cProfile's own overhead inflates every
figure (more for many small calls): compare profiles with each other, not with the benchmark's
CPU figures.
"""

from __future__ import annotations

import cProfile
import pstats
import runpy
import sys
from collections import defaultdict
from pathlib import Path

# (stage, path fragments of the function's file), first match wins; C functions are charged
# to their caller's stage.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("imports and module bodies", ("<frozen importlib", "importlib/", "<frozen zipimport")),
    ("render and policy", ("launch_agent/render/",)),
    ("queue specs, config (model, YAML, pydantic)", ("launch_agent/model/", "/yaml/", "pydantic")),
    ("Kubernetes client", ("launch_agent/adapters/kube/", "kubernetes_asyncio/")),
    ("W&B client, GraphQL", ("launch_agent/adapters/wandb", "graphql/")),
    ("HTTP (aiohttp, yarl, multidict)", ("aiohttp", "/yarl/", "/multidict/", "/propcache/")),
    ("JSON", ("/json/",)),
    ("logging", ("/logging/", "launch_agent/runtime/logs.py")),
    ("metrics", ("prometheus_client", "launch_agent/runtime/metrics.py")),
    ("tracking (informers, assess)", ("launch_agent/tracking/", "launch_agent/runtime/tracker")),
    ("agent runtime (dispatcher, poller, reporter, ...)", ("launch_agent/",)),
    ("event loop, sockets, TLS", ("/asyncio/", "selectors.py", "/ssl.py", "socket.py")),
)
OTHER = "other (stdlib and libraries)"
# The event loop waiting for I/O: wall-clock time, not CPU.
IDLE = ("<method 'poll' of 'select.epoll' objects>", "<built-in method time.sleep>")


def stage_of(filename: str, function: str) -> str:
    """The stage of a Python function (a module body counts as an import)."""
    if function == "<module>":
        return STAGES[0][0]
    for stage, fragments in STAGES:
        if any(fragment in filename for fragment in fragments):
            return stage
    return OTHER


Key = tuple[str, int, str]
# pstats' row: primitive calls, calls, own seconds, cumulative seconds, callers (the same
# four figures per calling function).
Edge = tuple[int, int, float, float]
Row = tuple[int, int, float, float, dict[Key, Edge]]


def _raw(stats: pstats.Stats) -> dict[Key, Row]:
    return stats.stats  # type: ignore[attr-defined,no-any-return]


def own_by_stage(stats: pstats.Stats) -> dict[str, float]:
    """Own CPU seconds per stage; a C function's time goes to its callers' stages, per edge."""
    raw = _raw(stats)
    out: dict[str, float] = defaultdict(float)
    for (filename, _line, function), (_cc, _nc, own, _cum, callers) in raw.items():
        if filename != "~":
            out[stage_of(filename, function)] += own
            continue
        if function in IDLE:
            continue
        charged = 0.0
        for (c_file, _c_line, c_function), edge in callers.items():
            if c_file != "~":
                out[stage_of(c_file, c_function)] += edge[2]
                charged += edge[2]
        # Called only from other C functions (or the profiler's entry): its own line.
        if own - charged > 1e-9:
            out[_builtin_stage(function)] += own - charged
    return dict(out)


def _builtin_stage(function: str) -> str:
    if "exec" in function or "marshal" in function or "_imp." in function:
        return STAGES[0][0]
    return OTHER


def _ms(seconds: float, runs: int) -> str:
    return f"{seconds * 1000 / max(runs, 1):.3f}"


def stage_table(stats: pstats.Stats, runs: int) -> str:
    """Own CPU ms per run by stage, largest first, as a Markdown table."""
    stages = sorted(own_by_stage(stats).items(), key=lambda kv: -kv[1])
    total = sum(seconds for _, seconds in stages)
    lines = [
        f"| stage | own CPU ms per run ({runs} runs) | share |",
        "| --- | ---: | ---: |",
    ]
    for stage, seconds in stages:
        share = 100 * seconds / total if total else 0.0
        lines.append(f"| {stage} | {_ms(seconds, runs)} | {share:.1f}% |")
    lines.append(f"| **total (profiled)** | **{_ms(total, runs)}** | 100% |")
    return "\n".join(lines)


def _label(key: Key) -> str:
    filename, line, function = key
    if filename == "~":
        return function
    for marker in ("site-packages/", "launch_agent/", "lib/python3"):
        at = filename.rfind(marker)
        if at >= 0:
            filename = filename[at + len(marker) if marker != "launch_agent/" else at :]
            break
    return f"{filename}:{line}({function})"


def top_table(stats: pstats.Stats, runs: int, *, by: str = "own", count: int = 25) -> str:
    """The `count` functions with the most own (`by="own"`) or cumulative CPU, per run."""
    raw = _raw(stats)
    cumulative = by != "own"
    busy = [kv for kv in raw.items() if kv[0][2] not in IDLE]
    ordered = sorted(busy, key=lambda kv: -(kv[1][3] if cumulative else kv[1][2]))[:count]
    lines = [
        "| function | calls per run | own ms per run | cumulative ms per run |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, (_cc, calls, own, cum, _callers) in ordered:
        per_run = calls / max(runs, 1)
        lines.append(f"| `{_label(key)}` | {per_run:.2f} | {_ms(own, runs)} | {_ms(cum, runs)} |")
    return "\n".join(lines)


def report(path: Path, runs: int) -> str:
    """The three tables of one profile, for `bench dispatch --profile`'s `.md` file."""
    stats = pstats.Stats(str(path))
    return (
        f"# {path.name}: {runs} runs\n\n## Own CPU by stage\n\n{stage_table(stats, runs)}\n\n"
        f"## Top functions by own CPU\n\n{top_table(stats, runs, by='own')}\n\n"
        f"## Top functions by cumulative CPU\n\n{top_table(stats, runs, by='cumulative')}\n"
    )


def main(argv: list[str]) -> int:
    """`python -m launch_agent.demo.profiling OUT ARGS...`: `launch-agent ARGS...` profiled."""
    out, args = Path(argv[0]), argv[1:]
    profiler = cProfile.Profile()
    sys.argv = ["launch-agent", *args]
    code = 0
    profiler.enable()
    try:
        # As `python -m launch_agent` would: by name, so no layer imports the CLI above it.
        runpy.run_module("launch_agent", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        profiler.disable()
        profiler.dump_stats(out)
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
