"""Guardrails for every async test.

- A test fails if it leaves an asyncio task running: every task must be owned and stopped.
- A test fails if one callback (a task step, a timer, an I/O callback) holds the event loop for
  more than 100 ms of CPU time: that is the latency every other watch, poll and health probe
  would see. CPU time of the loop's thread, not wall time: on a loaded 2-core machine (other
  test processes, the sandbox's and the object stores' threads holding the GIL) a cheap
  callback can take 200 ms of wall time without doing anything wrong, and a guardrail that
  measures the machine instead of the code fails at random. A callback that *waits* (sleeps,
  blocks on a socket) costs no CPU: blockbuster catches such calls in the product's frames,
  and any callback that holds the loop for more than 1 s of wall time fails the test anyway.
  The garbage collector's own CPU is not charged to the callback it lands in: a collection
  walks the whole test process's heap (the sandbox's servers and cluster, fixtures, earlier
  tests' leftovers), not the code under test, and which callback allocates the object that
  triggers it is chance. Its wall time still counts towards the 1 s stall.
- A test fails if it makes a blocking call (sleep, file or socket I/O) on the event loop's
  thread, detected by blockbuster, like aiohttp's own test suite.

The thresholds can be raised for a slow machine with LAUNCH_AGENT_SLOW_CALLBACK_MS (CPU) and
LAUNCH_AGENT_STALL_MS (wall); they are never disabled.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import gc
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from blockbuster import BlockBuster, blockbuster_ctx
from hypothesis import settings

# CI (`.ci/run` sets CI=true) replays each property on the same examples every run: a property
# that finds a new counterexample fails the developer's run that found it, where it is turned
# into a plain regression test (tests/unit/quota has some), not a later CI run at random.
# Developers' runs keep exploring (random examples, the local example database).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

SLOW_CALLBACK_SECONDS = float(os.environ.get("LAUNCH_AGENT_SLOW_CALLBACK_MS", "100")) / 1000
STALL_SECONDS = float(os.environ.get("LAUNCH_AGENT_STALL_MS", "1000")) / 1000

_slow_callbacks: list[tuple[float, float, str]] = []  # (CPU seconds, wall seconds, what)
_watching = [False]  # a cell, so the fixture can flip it without `global`
_original_run: Callable[[asyncio.Handle], None] = asyncio.events.Handle._run
# CPU seconds the collector has spent on each thread so far, and when its current pass there
# began. Per thread: collections run on the thread that allocated, and the object stores' and
# the sandbox's threads collect too (some run event loops of their own).
_gc_cpu: dict[int, float] = {}
_gc_started: dict[int, float] = {}


def _gc_clock(phase: str, info: dict[str, int]) -> None:
    thread = threading.get_ident()
    if phase == "start":
        _gc_started[thread] = time.thread_time()
    elif (began := _gc_started.pop(thread, None)) is not None:
        _gc_cpu[thread] = _gc_cpu.get(thread, 0.0) + time.thread_time() - began


gc.callbacks.append(_gc_clock)


def _timed_run(self: asyncio.Handle) -> None:
    if not _watching[0]:
        _original_run(self)
        return
    thread = threading.get_ident()
    start, cpu_start, gc_start = time.perf_counter(), time.thread_time(), _gc_cpu.get(thread, 0.0)
    try:
        _original_run(self)
    finally:
        cpu = time.thread_time() - cpu_start - (_gc_cpu.get(thread, 0.0) - gc_start)
        wall = time.perf_counter() - start
        if cpu > SLOW_CALLBACK_SECONDS or wall > STALL_SECONDS:
            _slow_callbacks.append((cpu, wall, _describe(self)))


def _describe(handle: asyncio.Handle) -> str:
    # A task's step method; `_callback` is private to asyncio, so typeshed does not declare it.
    owner = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {owner.get_name()!r} running {getattr(coro, '__qualname__', coro)}"
    return repr(handle)[:300]


# Patched once for the session: this is the standard library's Handle, not our code.
asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster",
        choices=("sandbox", "real"),
        default="sandbox",
        help="the tier tests/cluster/ runs on: the loopback sandbox (default) or the real"
        " control plane that `launch-agent cluster up` starts (make test-cluster)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # `make test-compiled` runs the engine's tests again on the mypyc build: a stale or missing
    # build must not quietly test the interpreted sources a second time.
    if os.environ.get("LAUNCH_AGENT_EXPECT_COMPILED") == "1":
        from launch_agent.quota import engine_build

        if engine_build() != "compiled":
            raise pytest.UsageError(
                "LAUNCH_AGENT_EXPECT_COMPILED=1 but the interpreted quota engine was imported:"
                " build it with `make compiled` and put build/compiled first on PYTHONPATH"
            )


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported so far (libraries, schemas, test modules) lives for the whole run:
    # moving it out of the collector's reach keeps full collections, which run inside whatever
    # callback happens to allocate, from growing with the size of the suite.
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and asyncio.iscoroutinefunction(item.obj):
            # First in the list: set up before, torn down after every other fixture.
            item.fixturenames.insert(0, "_async_guardrails")


@pytest.fixture
def _blockbuster() -> Iterator[BlockBuster]:
    # Only calls made from the product's own frames count: a test may read a fixture file.
    with blockbuster_ctx("launch_agent") as bb:
        yield bb


@pytest.fixture
async def _async_guardrails(_blockbuster: BlockBuster) -> AsyncIterator[None]:
    # What earlier tests left alive (fixtures' caches, hypothesis' examples, sandboxes' logs)
    # is moved out of the collector's reach, as after collection: otherwise a full collection
    # over the whole suite's heap lands in whichever callback allocates at that moment and is
    # charged to code that did nothing slow. Collections of what this test allocates still
    # run, and still count.
    gc.collect()
    gc.freeze()
    _slow_callbacks.clear()
    _watching[0] = True
    before = asyncio.all_tasks()
    try:
        yield
    finally:
        _watching[0] = False
    # Teardown runs in a task of its own, not the one that ran the setup.
    me = asyncio.current_task()
    # Give cancelled tasks one turn to finish unwinding before judging them.
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() if t is not me and t not in before and not t.done()]
    for task in leaked:
        task.cancel()
    if leaked:
        await asyncio.gather(*leaked, return_exceptions=True)
    problems: list[str] = []
    if leaked:
        problems.append(
            "test leaked running asyncio tasks: "
            + ", ".join(f"{t.get_name()} ({t.get_coro()!r})" for t in leaked)
        )
    if _slow_callbacks:
        worst = sorted(_slow_callbacks, reverse=True)[:3]
        budget = f"{SLOW_CALLBACK_SECONDS * 1000:.0f} ms of CPU or {STALL_SECONDS * 1000:.0f} ms"
        problems.append(
            f"a callback blocked the event loop for more than {budget}: "
            + "; ".join(
                f"{cpu * 1000:.0f} ms CPU ({wall * 1000:.0f} ms wall) in {what}"
                for cpu, wall, what in worst
            )
        )
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
