"""The kubelet's `$(VAR)` expansion, as seen from the values the agent writes into pods.

The kubelet expands `$(NAME)` in `env[].value` (against the variables defined *earlier* in the
list) and in `command` and `args` (against all of them); `$$` is the escape for a literal `$`
(kubernetes/kubernetes `third_party/forked/golang/expansion/expand.go`). Every value the agent
copies from a run-queue item into one of those fields (the run name into `WANDB_NAME`, the run
config, overrides.args ...) is data, not a reference: a run named `$(WANDB_API_KEY)` must show
up in W&B as that text, not as the key.

`escape` doubles every `$` of a string that expand.go would change (one holding `$(` or `$$`).
Replacing only `$(` by `$$(` is not enough: the literal `$$(X)` would become `$$$(X)`, which
expands `$(X)`. Doubling every `$` is exact, because expand.go turns each `$$` back into `$`
and a doubled string holds no other `$`.
"""

from __future__ import annotations

import re

from launch_agent.render.paths import Path

# Strings the kubelet expands: container `command` and `args` items, `env[].value`,
# `volumeMounts[].subPathExpr`; and RayJob's fields KubeRay turns into the submitter's command
# line (`ray job submit --runtime-env-json ... --entrypoint-resources ... -- <entrypoint>`).
# The keys are matched wherever they occur (the trainer of a TrainJob, KubeRay's
# autoscalerOptions, custom kinds' containers), except `exec.command` of probes and hooks,
# which the kubelet runs as written.
KUBELET_LISTS = frozenset({"command", "args"})
KUBELET_SCALARS = frozenset({"subPathExpr", "entrypoint", "runtimeEnvYAML", "entrypointResources"})

# expand.go: `$(` up to the first `)` is a reference (an empty or odd name is still looked up).
_REFERENCE = re.compile(r"\$\(([^)]*)\)")


def escape(value: str) -> str:
    """`value` such that the kubelet's expansion gives back exactly `value`."""
    if "$" not in value or ("$(" not in value and "$$" not in value):
        return value  # expand.go leaves it unchanged: keep manifests readable
    return value.replace("$", "$$")


def references(value: str) -> list[str]:
    """The variable names the kubelet would try to expand in `value` (`$$` skipped)."""
    out = []
    i = 0
    while i < len(value) - 1:
        if value[i] == "$":
            if value[i + 1] == "$":
                i += 2
                continue
            m = _REFERENCE.match(value, i)
            if m:
                out.append(m.group(1))
                i = m.end()
                continue
        i += 1
    return out


def expanded_field(path: Path) -> bool:
    """Whether the string at concrete `path` is one the kubelet expands (see the sets above)."""
    last = path[-1] if path else None
    if isinstance(last, str):
        if last in KUBELET_SCALARS:
            return True
        return last == "value" and len(path) >= 3 and path[-3] == "env"
    return (
        last is not None
        and len(path) >= 2
        and path[-2] in KUBELET_LISTS
        and not (len(path) >= 3 and path[-3] == "exec")
    )
