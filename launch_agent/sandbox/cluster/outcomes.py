"""What a simulated container does: the outcome grammar and its parser.

An outcome is written in the annotation `sandbox.launch-agent.io/outcome` (on a pod template,
a Job or a custom resource) or passed to `SimulatedCluster.script(selector, outcome)`:

    outcome  := attempt (";" attempt)*          the Nth pod of a workload uses the Nth attempt
                                                (the last one repeats)
    attempt  := KIND (KEY "=" VALUE)*           values may be quoted: message="no GPU left"
    KIND     := succeed | fail | exit | oomkilled | crashloop | imagepullbackoff | errimagepull
              | invalidimagename | createcontainerconfigerror | unschedulable | evicted
              | preempted | run | pullerror | drained | nodelost | podgc | nodeshutdown
              | outofresource | admissionerror
    KEY      := after (seconds the container runs, default 5; "30s", "2m", "500ms")
              | start (seconds in ContainerCreating, default 1)
              | code (exit code; fail/exit/crashloop default 1)
              | message (the reason's message; defaults are kube's wording)
              | container (which container the outcome applies to; default the first)
              | log (a line the container prints; repeatable)
              | pulls (pullerror: failed pulls before one succeeds, default 3)
              | resource (outofresource: the resource the node lacks, default nvidia.com/gpu)
              | stop (seconds the container takes to exit after SIGTERM, default 1; longer
                than the grace period: SIGKILL at its end, exit code 137)
              | termination (what the container wrote to its terminationMessagePath: its
                terminated state's `message`, as kubelet reports it; Kaniko's --digest-file)

Examples: `succeed after=30s`, `exit code=3 after=10s`, `oomkilled`, `fail; succeed` (first pod
fails, the retry succeeds), `unschedulable message="0/3 nodes are available: 3 Insufficient
nvidia.com/gpu."`, `imagepullbackoff`, `preempted after=20s`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

ANNOTATION = "sandbox.launch-agent.io/outcome"
KINDS = frozenset(
    {
        "succeed",
        "fail",
        "exit",
        "oomkilled",
        "crashloop",
        "imagepullbackoff",
        "errimagepull",
        "invalidimagename",
        "createcontainerconfigerror",
        "unschedulable",
        "evicted",
        "preempted",
        "run",
        "pullerror",
        "drained",
        "nodelost",
        "podgc",
        "nodeshutdown",
        "outofresource",
        "admissionerror",
    }
)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class OutcomeError(ValueError):
    """An outcome that does not parse; the message quotes the text and says why."""


@dataclass(frozen=True)
class Outcome:
    kind: str = "succeed"
    after: float = 5.0
    start: float = 1.0
    code: int = 0
    message: str = ""
    container: str | None = None
    logs: tuple[str, ...] = field(default=())
    stop: float = 1.0
    resource: str = "nvidia.com/gpu"
    pulls: int = 3
    termination: str = ""

    @property
    def exit_code(self) -> int:
        if self.kind in ("oomkilled", "evicted", "preempted", "podgc"):
            return 137
        if self.kind == "nodeshutdown":
            return 143
        return self.code


DEFAULT = Outcome()


def parse_duration(text: str, where: str) -> float:
    m = _DURATION.match(text.strip())
    if m is None:
        raise OutcomeError(f"{where}: {text!r} is not a duration (like 30s, 2m, 500ms, 1.5)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_attempt(text: str) -> Outcome:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise OutcomeError(f"outcome {text!r}: {exc}") from None
    if not words:
        raise OutcomeError("an outcome attempt is empty (two ';' in a row?)")
    kind = words[0].lower()
    if kind not in KINDS:
        raise OutcomeError(
            f"outcome {text!r}: unknown kind {kind!r} (one of {', '.join(sorted(KINDS))})"
        )
    values: dict[str, object] = {"kind": kind}
    if kind in ("fail", "exit", "crashloop"):
        values["code"] = 1
    logs: list[str] = []
    for word in words[1:]:
        key, eq, value = word.partition("=")
        where = f"outcome {text!r}, {key}"
        if not eq:
            raise OutcomeError(f"outcome {text!r}: expected KEY=VALUE, got {word!r}")
        if key in ("after", "start", "stop"):
            values[key] = parse_duration(value, where)
        elif key == "pulls":
            if not value.isdigit():
                raise OutcomeError(f"{where}: must be a whole number, got {value!r}")
            values["pulls"] = int(value)
        elif key == "code":
            if not value.isdigit() or not 0 <= int(value) <= 255:
                raise OutcomeError(f"{where}: exit code must be 0..255, got {value!r}")
            values["code"] = int(value)
        elif key in ("message", "container", "resource", "termination"):
            values[key] = value
        elif key == "log":
            logs.append(value)
        else:
            raise OutcomeError(
                f"outcome {text!r}: unknown key {key!r}"
                " (after, start, code, message, container, log, stop, resource, pulls,"
                " termination)"
            )
    if kind == "exit" and values.get("code") == 0:
        values["kind"] = "succeed"
    values["logs"] = tuple(logs)
    return Outcome(**values)  # type: ignore[arg-type]


def parse_outcome(text: str) -> tuple[Outcome, ...]:
    """Parse the annotation value (or script text) into one outcome per attempt."""
    if not text.strip():
        raise OutcomeError("an outcome is empty")
    return tuple(parse_attempt(part) for part in text.split(";"))


def pick(attempts: tuple[Outcome, ...], attempt: int) -> Outcome:
    return attempts[min(attempt, len(attempts) - 1)]
