"""`make demo` works: the `launch-agent demo` command, as a user runs it, and its verdict.

The first test runs the installed command in a subprocess exactly as `make demo` does, with the
CRDs built from the schemas the package ships (what an installed package without `tests/fixtures/crds` gets),
and checks the exit status and the closing table. The second runs the demo's driver in-process
with a deliberately wrong expectation and checks that the demo then fails and says why, so the
exit status of the first test means something.
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

from launch_agent.demo.runner import Demo, table
from launch_agent.demo.scenario import RUNS, DemoRun

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_AGENT = Path(sys.executable).parent / "launch-agent"


async def test_launch_agent_demo_passes_on_a_fresh_clone() -> None:
    process = await asyncio.create_subprocess_exec(
        str(LAUNCH_AGENT),
        "demo",
        "--crds",
        "packaged",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    out = stdout.decode()
    assert process.returncode == 0, out + stderr.decode()
    assert "every run ended as expected" in out
    assert "launch_agent/render/schemas/crds" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["run", "queue", "kind"])
    rows = {line.split()[0]: line for line in lines[header + 2 : header + 2 + len(RUNS)]}
    assert set(rows) == {r.name for r in RUNS}
    for run in RUNS:
        assert f" {run.expect} " in rows[run.name]
    assert "OOMKilled" in rows["oom"]
    assert "Stop pressed in the W&B UI" in out
    assert "allocating 80GiB on the GPU" in out  # the log tail W&B received


async def test_demo_fails_and_says_why_when_an_outcome_is_not_the_expected_one() -> None:
    wrong = DemoRun("wrong", "gpu-job", "Job", "succeeded", outcome="oomkilled after=1s")
    right = DemoRun("right", "gpu-job", "Job", "succeeded", outcome="succeed after=1s")
    out = io.StringIO()
    result = await Demo(ROOT / "queue-specs", out, runs=[wrong, right], timeout=30).run()
    assert not result.timed_out
    assert not result.ok
    problems = {run.name: problem for run, _, problem in result.rows}
    assert problems["right"] is None
    assert problems["wrong"] == "expected the item to be claimed, it is FAILED"
    lines = table(result)
    assert any(line.startswith("wrong ") and " NO " in line for line in lines)
    assert lines[-1] == "wrong: expected the item to be claimed, it is FAILED"
