"""Pods that really run: the simulated kubelet runs an opted-in pod's main container as a
local process.

Opt-in, per workload: the container's image starts with `sandbox.local/` (any name after it:
the image is not pulled, the command runs on this machine), or the pod carries the annotation
`sandbox.launch-agent.io/process: "true"`. Everything else keeps its scripted outcome.

What the process gets, as the kubelet would give it:
- `command` + `args`, with the kubelet's `$(VAR)` expansion (`$$` is a literal `$`; an unknown
  reference stays as written) over the container's env;
- the container's `env`: plain values, and `valueFrom.secretKeyRef` resolved from the
  sandbox's Secrets (a missing Secret or key fails the container with
  `CreateContainerConfigError`'s words, as the kubelet does). Nothing of the test process's own
  environment leaks in but `PATH` (so `python` and `wandb` resolve to this interpreter's);
- a working directory of its own under `root`, also its `HOME`.

Its output (stdout and stderr, merged) becomes the container's log, line by line as it is
printed; its exit code the container's terminated state (`Completed` / `Error`). Bounded: a
process still running after `time_limit` seconds is killed (exit 137, with a log line saying
so), a pod that is deleted has its process killed, and `close()` kills every process this
runner started, with its whole process group.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster.outcomes import Outcome
from launch_agent.sandbox.kube.store import Obj, Store

IMAGE_PREFIX = "sandbox.local/"
ANNOTATION = "sandbox.launch-agent.io/process"
KILLED = 137
_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def wants_process(pod: Obj) -> bool:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    if annotations.get(ANNOTATION) == "true":
        return True
    containers = pod.get("spec", {}).get("containers") or []
    return bool(containers) and str(containers[0].get("image", "")).startswith(IMAGE_PREFIX)


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REF.sub(one, text)


class ConfigError(ValueError):
    """The container cannot be started (kubelet: CreateContainerConfigError)."""


def container_env(store: Store, namespace: str, container: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        if "value" in entry:
            env[name] = expand(str(entry["value"]), env)
            continue
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
        if ref is None:
            continue  # fieldRef and others: not modelled, the variable stays unset
        secret = store.find(store.rt("secrets"), namespace, str(ref.get("name")))
        data = (secret or {}).get("data") or {}
        if secret is None or ref.get("key") not in data:
            if ref.get("optional"):
                continue
            what = f'secret "{ref.get("name")}"'
            raise ConfigError(
                f"{what} not found"
                if secret is None
                else f"couldn't find key {ref.get('key')} in Secret {namespace}/{ref.get('name')}"
            )
        env[name] = base64.b64decode(data[ref["key"]]).decode()
    return env


@dataclass
class _Proc:
    started: float  # simulated seconds
    popen: subprocess.Popen[bytes] | None = None
    lines: list[str] = field(default_factory=list)
    code: int | None = None
    ended: float | None = None  # simulated seconds
    config_error: str | None = None
    killed: bool = False
    thread: threading.Thread | None = None


class ProcessRunner:
    """Runs opted-in pods as local processes; `outcome` tells the kubelet what each is doing.

    The kubelet calls it from the cluster's event loop, so nothing here blocks: a thread per
    process starts it, reads its output and waits for it (with the time limit)."""

    def __init__(
        self,
        store: Store,
        root: Path,
        *,
        time_limit: float = 120.0,
        on_change: Callable[[], None] = lambda: None,
        sim_seconds: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.root = root
        self.time_limit = time_limit
        # Called from the process threads when a process printed or exited: the cluster
        # loop's thread-safe wake-up.
        self.on_change = on_change
        self.sim_seconds = sim_seconds
        self._procs: dict[str, _Proc] = {}
        self._all: list[_Proc] = []
        self._lock = threading.Lock()
        self.started: list[int] = []  # pids, for tests that prove nothing is left

    def outcome(self, pod: Obj, bound_at: float) -> Outcome:
        """The pod's outcome so far: running (with what it printed), or ended."""
        uid = pod["metadata"]["uid"]
        proc = self._procs.get(uid)
        if proc is None:
            proc = self._start(pod)
            self._procs[uid] = proc
        if proc.config_error is not None:
            return Outcome("createcontainerconfigerror", start=0, message=proc.config_error)
        with self._lock:
            lines, code, ended = tuple(proc.lines), proc.code, proc.ended
        if code is None or ended is None:
            return Outcome("run", start=0, logs=lines)
        after = max(0.0, ended - bound_at)
        kind = "succeed" if code == 0 else "exit"
        return Outcome(kind, after=after, start=0, code=code, logs=lines)

    def _start(self, pod: Obj) -> _Proc:
        meta, spec = pod["metadata"], pod["spec"]
        container = spec["containers"][0]
        proc = _Proc(self.sim_seconds())
        try:
            env = container_env(self.store, meta.get("namespace", ""), container)
        except ConfigError as exc:
            proc.config_error = str(exc)
            return proc
        words = [expand(str(w), env) for w in container.get("command") or []]
        words += [expand(str(w), env) for w in container.get("args") or []]
        if not words:
            proc.config_error = "the container has no command"
            return proc
        workdir = self.root / meta["uid"]
        bindir = str(Path(sys.executable).parent)
        env = {
            **env,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(workdir),
        }
        proc.thread = threading.Thread(
            target=self._run, args=(proc, words, env, workdir), name="sandbox-process", daemon=True
        )
        self._all.append(proc)
        proc.thread.start()
        return proc

    def _run(self, proc: _Proc, words: list[str], env: dict[str, str], workdir: Path) -> None:
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            popen = subprocess.Popen(
                words,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: its children go with it
            )
        except OSError as exc:
            with self._lock:
                proc.lines.append(f"sandbox: cannot start {words[0]!r}: {exc}")
                proc.code, proc.ended = 127, self.sim_seconds()
            self.on_change()
            return
        with self._lock:
            proc.popen = popen
            self.started.append(popen.pid)
            killed = proc.killed
        if killed:
            self._signal(popen)
        reader = threading.Thread(target=self._read, args=(proc, popen), daemon=True)
        reader.start()
        try:
            popen.wait(timeout=self.time_limit)
        except subprocess.TimeoutExpired:
            with self._lock:
                proc.lines.append(f"sandbox: killed after the time limit of {self.time_limit}s")
            self._signal(popen)
            popen.wait()
        # What the main process left behind in its group goes too, as a container's
        # processes go with it.
        self._signal(popen)
        reader.join()
        with self._lock:
            code = popen.returncode
            proc.code = KILLED if code < 0 else code
            proc.ended = self.sim_seconds()
        self.on_change()

    def _read(self, proc: _Proc, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdout is not None
        for raw in popen.stdout:
            with self._lock:
                proc.lines.append(raw.decode(errors="replace").rstrip("\n"))
            self.on_change()

    @staticmethod
    def _signal(popen: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)

    def _kill(self, proc: _Proc) -> None:
        """Signal only (no waiting: the kubelet calls this from the loop); the process's
        thread reaps it."""
        with self._lock:
            proc.killed = True
            popen = proc.popen if proc.code is None else None
        if popen is not None:
            self._signal(popen)

    def forget(self, live_uids: set[str]) -> None:
        """Kill the processes of pods that are gone (deleted) and drop them."""
        for uid in [u for u in self._procs if u not in live_uids]:
            self._kill(self._procs.pop(uid))

    def deleting(self, uid: str) -> None:
        proc = self._procs.get(uid)
        if proc is not None:
            self._kill(proc)

    def close(self) -> None:
        """Kill every process this runner started and wait until each is gone (blocking:
        call it from a thread)."""
        for proc in self._all:
            self._kill(proc)
        for proc in self._all:
            if proc.thread is not None:
                proc.thread.join()
        self._procs.clear()
