"""`launch-agent migrate` against a compromised W&B: the sandbox serves queue configs and template
variables with hostile names in every value migrate copies, over HTTP, to the real client. The
written spec grants nothing (issue 23); two queues that would share a file are refused."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch_agent.cli import main
from launch_agent.model.queue_spec import InvalidInput, SecurityExceptions
from launch_agent.model.safe_load import load_yaml
from launch_agent.render.spec_load import load_queue_spec
from launch_agent.sandbox.wandb import LaunchState, WandbServer
from tests.migrate_configs import ISSUE_NAME, config_with, variables_with
from tests.terminal import hostile_text, unsafe_characters

PLACES = (
    "volume",
    "container",
    "host_path",
    "secret",
    "secret_volume",
    "pull_secret",
    "service_account",
    "capability",
)


class Sandbox:
    """The W&B sandbox on its own thread and event loop, so a synchronous hypothesis test can
    run the CLI (which runs its own loop) against it."""

    def __init__(self) -> None:
        self.state = LaunchState(entity="ent")
        self.url = ""
        self.api_key = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with WandbServer(self.state) as server:
            self.url, self.api_key = server.url, server.api_key
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> Sandbox:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def add_queue(self, name: str, config: Any, variables: Any) -> None:
        assert self._loop is not None

        async def add() -> None:
            self.state.add_queue(name, config=config, template_variables=variables)

        asyncio.run_coroutine_threadsafe(add(), self._loop).result(10)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as running:
        yield running


def migrate_cli(sandbox: Sandbox, tmp: Path, *argv: str) -> tuple[int, str, str]:
    (tmp / "none.yaml").write_text("queues: []\n")
    env = {
        "WANDB_BASE_URL": sandbox.url,
        "WANDB_API_KEY": sandbox.api_key,
        "WANDB_ENTITY": "ent",
        "LAUNCH_AGENT_CONFIG": str(tmp / "none.yaml"),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["migrate", *argv])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def assert_grants_nothing(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "security" not in load_yaml(text)["spec"]
    try:
        spec, _ = load_queue_spec(text)
    except InvalidInput:
        return
    assert spec.security == SecurityExceptions()


_names = itertools.count()


def test_the_issues_config_served_by_wandb_grants_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    queue = f"issue-{next(_names)}"
    sandbox.add_queue(queue, config_with("ok", volume=ISSUE_NAME), variables_with(ISSUE_NAME))
    code, _, err = migrate_cli(sandbox, tmp_path, "--queue", queue, "--out", str(tmp_path / "o"))
    assert code == 1, err  # needs decisions: nothing granted
    written = tmp_path / "o" / f"{queue}.yaml"
    assert_grants_nothing(written)
    assert "NOT LOADABLE until decided" in err and unsafe_characters(err) == []
    validate = io.StringIO()
    with contextlib.redirect_stderr(validate), contextlib.redirect_stdout(io.StringIO()):
        assert main(["validate", str(written)]) == 1
    assert "privileged" in validate.getvalue()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    names=st.fixed_dictionaries({k: hostile_text(min_size=1) for k in PLACES}),
    unused=hostile_text(min_size=1),
    default=hostile_text(),
    output=st.sampled_from(["text", "table", "json", "yaml"]),
)
def test_any_served_config_gives_a_spec_that_grants_nothing(
    sandbox: Sandbox,
    tmp_path_factory: pytest.TempPathFactory,
    names: dict[str, str],
    unused: str,
    default: str,
    output: str,
) -> None:
    tmp = tmp_path_factory.mktemp("migrate")
    queue = f"hostile-{next(_names)}"
    sandbox.add_queue(queue, config_with(**names), variables_with(unused, used_default=default))
    code, out, err = migrate_cli(
        sandbox, tmp, "--queue", queue, "--out", str(tmp / "o"), "-o", output
    )
    assert code in (0, 1), err
    assert_grants_nothing(tmp / "o" / f"{queue}.yaml")
    if output in ("text", "table"):
        assert unsafe_characters(out + err) == []


@pytest.mark.parametrize(
    ("a", "b"), [("gpu", "GPU"), ("gpu queue", "gpu-queue"), ("\u212a8s", "k8s")]
)
def test_two_queues_for_one_file_are_refused_naming_both(
    sandbox: Sandbox, tmp_path: Path, a: str, b: str
) -> None:
    suffix = next(_names)
    a, b = f"{a}{suffix}", f"{b}{suffix}"
    for queue in (a, b):
        sandbox.add_queue(queue, config_with("ok"), {})
    out = tmp_path / "o"
    code, _, err = migrate_cli(sandbox, tmp_path, "--queue", a, "--queue", b, "--out", str(out))
    assert code == 2
    assert f"queues {a!r} and {b!r} would be written to one file" in err
    assert not out.exists() or not list(out.iterdir())  # nothing written
    # One at a time, each is written.
    code, _, err = migrate_cli(sandbox, tmp_path, "--queue", a, "--out", str(out))
    assert code == 1, err
    assert yaml.safe_load(next(out.iterdir()).read_text())["spec"]["queues"] == [a]
