"""moto's S3 server and the GCS emulator as child processes, for the build suites.

Both run in their own process rather than as threads of the test process: a server thread
competes with the test's event loop for the GIL, so a busy upload would show up as a slow
callback in the agent's loop (the guardrail in tests/conftest.py fails a test on that) for a
reason that has nothing to do with the code under test. A process is also what the agent sees
in production: an object store on the other end of a socket.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def _serve(argv: Sequence[str], port: int, name: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                assert proc.stderr is not None  # stderr=PIPE
                raise RuntimeError(f"{name} exited with {proc.returncode}: {proc.stderr.read()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within 30 s")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """moto in server mode (the `moto_server` entry point); yields its endpoint URL."""
    port = free_port()
    with _serve(["-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, "moto") as url:
        yield url


@contextlib.contextmanager
def gcs_emulator(default_bucket: str) -> Iterator[str]:
    """gcp-storage-emulator, in memory, with one bucket; yields its base URL."""
    port = free_port()
    argv = [
        "-m",
        "gcp_storage_emulator",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--in-memory",
        "--default-bucket",
        default_bucket,
        "--quiet",
    ]
    with _serve(argv, port, "gcp-storage-emulator") as url:
        yield url
