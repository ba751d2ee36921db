"""What the kubelet makes of a container's env, command and args: an independent model.

Written from kubernetes/kubernetes `third_party/forked/golang/expansion/expand.go` (`Expand`,
`tryReadVariableName`, `MappingFuncFor`) and the kubelet's use of it
(`pkg/kubelet/kubelet_pods.go` `makeEnvironmentVariables`: each env value is expanded against
the variables defined *before* it; `pkg/kubelet/container/helpers.go`
`ExpandContainerCommandAndArgs`: command and args against all of them). It imports nothing
from the product: the render tests use it to show what a process in the pod would see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """expand.go `Expand`, byte for byte (the inputs here are str; the logic is the same)."""
    buf: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            buf.append(text[checkpoint:cursor])
            read, is_var, advance = _try_read_variable_name(text[cursor + 1 :])
            if is_var:
                buf.append(mapping(read))
            else:
                buf.append(read)  # `$$` → `$`; `$x` and an unclosed `$(` as they are
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(buf) + text[checkpoint:]


def _try_read_variable_name(text: str) -> tuple[str, bool, int]:
    if text[0] == "$":
        return text[0:1], False, 1  # escaped operator
    if text[0] == "(":
        for i in range(1, len(text)):
            if text[i] == ")":
                return text[1:i], True, i + 1
        return "$(", False, 1  # incomplete reference
    return "$" + text[0], False, 1


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """expand.go `MappingFuncFor`: an unknown name stays `$(name)`."""

    def look_up(name: str) -> str:
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return f"$({name})"

    return look_up


def container_view(
    container: Mapping[str, Any], secrets: Mapping[tuple[str, str], str]
) -> dict[str, Any]:
    """The env (name → value), command and args the container's process gets.

    `secrets` maps (Secret name, key) to the value a `secretKeyRef` reads; other `valueFrom`
    sources resolve to a placeholder naming them (their content does not matter here).
    """
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(str(entry["value"]), mapping_for(dict(env)))
        elif "valueFrom" in entry:
            ref = entry["valueFrom"].get("secretKeyRef")
            env[name] = (
                secrets[(ref["name"], ref["key"])] if ref else f"<{sorted(entry['valueFrom'])}>"
            )
        else:
            env[name] = ""
    look_up = mapping_for(env)
    return {
        "env": env,
        "command": [expand(str(c), look_up) for c in container.get("command") or []],
        "args": [expand(str(a), look_up) for a in container.get("args") or []],
    }
