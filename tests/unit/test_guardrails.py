"""The test guardrails in tests/conftest.py catch what they promise to catch.

Each case runs a small test file in a fresh pytest process with this project's conftest and
checks that the bad test fails for the right reason while the good one passes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()

INNER = """
import argparse
import asyncio
import gc
import time

from launch_agent.commands.config_cmd import load_config


async def test_clean():
    task = asyncio.create_task(asyncio.sleep(0.01), name="short")
    await task


async def test_leaks_a_task():
    asyncio.create_task(asyncio.sleep(30), name="forgotten-watch")


async def test_blocks_the_loop():
    end = time.thread_time() + 0.25
    while time.thread_time() < end:
        pass


async def test_stalls_the_loop():
    time.sleep(1.2)


async def test_blocking_call_in_product_code(tmp_path):
    (tmp_path / "c.yaml").write_text("queues: [a]\\n")
    load_config(argparse.Namespace(config=str(tmp_path / "c.yaml")), environ={})


def _heap():
    # Cycles the collector must walk: about 200-400 ms of CPU per full collection here.
    nodes = [{"n": i} for i in range(1_500_000)]
    for a, b in zip(nodes, nodes[1:]):
        a["next"] = b
    return nodes


async def test_a_collection_is_not_charged_to_the_callback_it_lands_in():
    heap = await asyncio.to_thread(_heap)
    start = time.thread_time()
    gc.collect()
    assert time.thread_time() - start > 0.1, "the heap was too small to test anything"
    del heap


async def test_blocks_the_loop_around_a_collection():
    heap = await asyncio.to_thread(_heap)
    gc.collect()
    end = time.thread_time() + 0.25
    while time.thread_time() < end:
        pass
    del heap


def test_sync_tests_are_untouched():
    time.sleep(0.2)
"""


def test_guardrails_fail_the_right_tests(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    # A guardrail fails a test at teardown: pytest counts its call as passed plus an error.
    result.assert_outcomes(passed=7, failed=1, errors=4)
    result.stdout.re_match_lines_random(
        [
            r"PASSED test_inner.py::test_clean",
            r"PASSED test_inner.py::test_sync_tests_are_untouched",
            r"PASSED test_inner.py::test_a_collection_is_not_charged_to_the_callback_it_lands_in",
            r"ERROR test_inner.py::test_blocks_the_loop_around_a_collection",
            r"ERROR test_inner.py::test_leaks_a_task",
            r"ERROR test_inner.py::test_blocks_the_loop",
            r"ERROR test_inner.py::test_stalls_the_loop",
            r"FAILED test_inner.py::test_blocking_call_in_product_code",
        ]
    )
    out = result.stdout.str()
    assert "test leaked running asyncio tasks: forgotten-watch" in out
    assert "a callback blocked the event loop for more than 100 ms of CPU or 1000 ms" in out
    assert re.search(
        r"\b(2[5-9]\d|[3-9]\d\d) ms CPU \(\d+ ms wall\) in task .* running test_blocks_the_loop",
        out,
    )
    assert re.search(
        r"\b\d{1,2} ms CPU \(1[2-9]\d\d ms wall\) in task .* running test_stalls_the_loop", out
    )
    # The busy loop is charged, the collection before it is not.
    assert re.search(
        r"\b(2[5-9]\d|3[0-4]\d) ms CPU \(\d+ ms wall\) in task .* running"
        r" test_blocks_the_loop_around_a_collection",
        out,
    )
    # load_config's first blocking call: the bounded reader's stat of ~/.netrc, or a read.
    assert re.search(r"BlockingError: Blocking call to (os\.stat|io\.\w+\.read)", out), out[-3000:]
