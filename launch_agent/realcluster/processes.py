"""The cluster's binaries as child processes: started with their logs in the cluster's directory,
waited for until their health endpoint answers, stopped with SIGTERM and, past a grace period,
SIGKILL.

Each child is put in a process group of its own, so a stop reaches what it started too, and a
Ctrl-C in the terminal reaches only `cluster up` (which then stops its children in the reverse
order of their start: the controllers before the API server, the API server before etcd).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

Probe = Callable[[], Awaitable[bool]]


class StartError(RuntimeError):
    """A child did not come up; the message names it, says why and where its log is."""


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_bytes()[-8192:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def http_probe(url: str, ssl_context: ssl.SSLContext | bool = False) -> Probe:
    """Ready when `url` answers 200 (any TLS trust the caller gives)."""

    async def probe() -> bool:
        timeout = aiohttp.ClientTimeout(total=2)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, ssl=ssl_context) as resp,
            ):
                return resp.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    return probe


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0

    async def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.log.parent)}
        env.update(self.env)
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def wait_ready(self, probe: Probe, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            if not self.running:
                code = self.process.returncode if self.process else None
                raise StartError(
                    f"{self.name} exited with status {code} while starting; the end of its log "
                    f"({self.log}):\n{tail(self.log)}"
                )
            if await probe():
                return
            if time.monotonic() > deadline:
                raise StartError(
                    f"{self.name} was not ready within {within:.0f} s; the end of its log "
                    f"({self.log}):\n{tail(self.log)}"
                )
            await asyncio.sleep(0.2)

    async def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM to the child's group, SIGKILL after `grace`; the exit status."""
        process = self.process
        if process is None:
            return None
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        return process.returncode

    def kill(self) -> None:
        """SIGKILL at once (a crash, for fault tests); `stop` still reaps it."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
