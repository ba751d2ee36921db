"""The queue spec store: which spec serves which W&B queue, reloaded when admins edit files.

Specs live in `queue_specs_dir`, usually a mounted ConfigMap. Kubernetes updates a ConfigMap
volume by writing a new timestamped directory and swapping the `..data` symlink, so the file
names never change and inotify on them sees nothing useful. The store therefore polls the
directory's *content hash* every `specs_reload_seconds`, in an executor (reading files blocks),
and reparses only the files whose bytes changed.

Per file, an edit is all-or-nothing:

- valid: the new version serves its queues from the next item on, no restart;
- invalid (YAML, schema, render checks, or a queue already served by another file): refused with
  one log line naming the file and every problem, `launch_agent_queue_spec_invalid{file}` is 1,
  and the previous version of that file (if any) stays in force;
- deleted: its queues are no longer served (items for them fail with "no queue spec serves").

Loading is split into `read_dir` (blocking, run in a thread) and `SpecTable.apply` (pure
bookkeeping on the loop), so parsing happens off the loop too: `load_queue_spec` runs
jsonschema, which costs milliseconds per file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from launch_agent.adapters.bounded import read_file
from launch_agent.model.queue_spec import InvalidInput, Problem, QueueSpec
from launch_agent.render.spec_load import MAX_SPEC_BYTES, load_queue_spec
from launch_agent.runtime.metrics import Metrics

log = logging.getLogger(__name__)

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class Loaded:
    """One file's parse result: a spec, or the problems that refused it."""

    file: str
    digest: str
    spec: QueueSpec | None
    problems: tuple[Problem, ...] = ()
    warnings: tuple[Problem, ...] = ()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_dir(directory: Path, known: Mapping[str, str]) -> tuple[dict[str, str], list[Loaded]]:
    """Blocking: every spec file's digest, and parse results for the files that changed.

    `known` maps file name → digest of what is already loaded; unchanged files are not parsed.
    Hidden entries (`..data`, `..2024_...`) are the ConfigMap's machinery, not specs.
    """
    digests: dict[str, str] = {}
    changed: list[Loaded] = []
    if not directory.is_dir():
        return digests, changed
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or path.suffix not in SPEC_SUFFIXES or not path.is_file():
            continue
        try:
            data = read_file(path, MAX_SPEC_BYTES, what="a queue spec")
        except OSError as exc:
            changed.append(
                Loaded(path.name, "", None, (Problem("", f"cannot read: {exc.strerror}"),))
            )
            continue
        digest = _digest(data)
        digests[path.name] = digest
        if known.get(path.name) == digest:
            continue
        try:
            spec, warnings = load_queue_spec(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            changed.append(Loaded(path.name, digest, None, (Problem("", f"not UTF-8: {exc}"),)))
        except InvalidInput as exc:
            changed.append(Loaded(path.name, digest, None, exc.problems))
        else:
            changed.append(Loaded(path.name, digest, spec, (), tuple(warnings)))
    return digests, changed


@dataclass
class SpecTable:
    """The specs in force, by file and by queue. Pure bookkeeping; no I/O."""

    by_file: dict[str, QueueSpec] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    # Files whose latest version was refused: file → digest of that version (not reparsed).
    refused: dict[str, str] = field(default_factory=dict)
    by_queue: dict[str, tuple[str, QueueSpec]] = field(default_factory=dict)

    def known(self) -> dict[str, str]:
        return {**self.digests, **self.refused}

    def apply(
        self, digests: Mapping[str, str], changed: list[Loaded]
    ) -> tuple[list[Loaded], list[Loaded], list[str]]:
        """Take a directory scan in; returns (accepted, refused, removed files)."""
        accepted: list[Loaded] = []
        refused: list[Loaded] = []
        removed = [f for f in list(self.by_file) + list(self.refused) if f not in digests]
        for name in removed:
            self.by_file.pop(name, None)
            self.digests.pop(name, None)
            self.refused.pop(name, None)
        for loaded in changed:
            problems = list(loaded.problems)
            if loaded.spec is not None:
                problems += self._clashes(loaded.file, loaded.spec)
            if problems or loaded.spec is None:
                self.refused[loaded.file] = loaded.digest
                refused.append(Loaded(loaded.file, loaded.digest, None, tuple(problems)))
                continue
            self.refused.pop(loaded.file, None)
            self.by_file[loaded.file] = loaded.spec
            self.digests[loaded.file] = loaded.digest
            accepted.append(loaded)
        self.by_queue = {
            queue: (name, spec)
            for name, spec in sorted(self.by_file.items())
            for queue in spec.queues
        }
        return accepted, refused, removed

    def _clashes(self, file: str, spec: QueueSpec) -> list[Problem]:
        out = []
        for queue in spec.queues:
            for other, other_spec in self.by_file.items():
                if other != file and queue in other_spec.queues:
                    out.append(
                        Problem("spec.queues", f"queue {queue!r} is already served by {other}")
                    )
        return out

    def for_queue(self, queue: str) -> QueueSpec | None:
        found = self.by_queue.get(queue)
        return None if found is None else found[1]


class SpecStore:
    """`SpecTable` plus the directory it mirrors, the reload loop and the metrics."""

    def __init__(self, directory: str | Path, metrics: Metrics) -> None:
        self.directory = Path(directory)
        self.metrics = metrics
        self.table = SpecTable()
        self.reloads = 0

    def for_queue(self, queue: str) -> QueueSpec | None:
        return self.table.for_queue(queue)

    @property
    def specs(self) -> list[QueueSpec]:
        return list(self.table.by_file.values())

    async def reload(self) -> bool:
        """Scan the directory once (off the loop); True when anything changed."""
        known = self.table.known()
        digests, changed = await asyncio.to_thread(read_dir, self.directory, known)
        if not changed and set(digests) == set(known):
            return False
        accepted, refused, removed = self.table.apply(digests, changed)
        self.reloads += 1
        for loaded in accepted:
            self.metrics.spec_errors.labels(file=loaded.file).set(0)
            self.metrics.spec_reloads.labels(result="ok").inc()
            log.info(
                "queue spec %s loaded: %s serves %s",
                loaded.file,
                loaded.spec.name if loaded.spec else "?",
                ", ".join(loaded.spec.queues) if loaded.spec else "",
            )
            for warning in loaded.warnings:
                log.warning("queue spec %s: %s", loaded.file, warning)
        for loaded in refused:
            self.metrics.spec_errors.labels(file=loaded.file).set(1)
            self.metrics.spec_reloads.labels(result="invalid").inc()
            kept = (
                "the previous version stays in force"
                if loaded.file in self.table.by_file
                else ("its queues are not served")
            )
            log.error(
                "queue spec %s refused (%s): %s",
                loaded.file,
                kept,
                "; ".join(str(p) for p in loaded.problems),
            )
        for name in removed:
            if _has_label(self.metrics, name):
                self.metrics.spec_errors.remove(name)
            log.info("queue spec %s removed", name)
        return True

    async def watch(self, interval: float, stopping: asyncio.Event) -> None:
        """Reload every `interval` seconds until `stopping` is set."""
        while not stopping.is_set():
            try:
                async with asyncio.timeout(interval):
                    await stopping.wait()
            except TimeoutError:
                pass
            if stopping.is_set():
                return
            try:
                await self.reload()
            except OSError as exc:
                log.error("queue specs directory %s: %s", self.directory, exc)


def _has_label(metrics: Metrics, file: str) -> bool:
    return any(
        sample.labels.get("file") == file
        for family in metrics.spec_errors.collect()
        for sample in family.samples
    )
