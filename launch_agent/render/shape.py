"""The shape of every pod template after the merge: mappings where the pod schema has objects,
lists of mappings where it has lists of objects.

Enforcement (`security.py`) and the pipeline edit pod templates in place and skip what is not
a mapping; a value of the wrong type (`containers: null`, `volumes: [0]`, `secret: 0`,
`securityContext: []`, a template that is a list) would then pass through unenforced, to an
operator or a decoder that may read it some other way. So the merged workload's shape is
checked first, against the core/v1 types (k8s.io/api/core/v1/types.go: PodTemplateSpec,
PodSpec, Container, Volume and its sources, EnvVar, SecurityContext), and any mismatch is
refused with its path: the submitter's runSpec path when their layer put it there, the
admin's `spec.template` path otherwise (at spec load).

`null` counts as absent (the API server's decoder drops it), except for a pod template at one
of the kind's locations and a pod's `containers`, which every pod needs; a missing
`containers` is filled in by the pipeline only for the admin's template, never after the
submitter removed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from launch_agent.render.paths import Item, Path, find, item_label, parse_glob

MAP, MAPS, STR, STRS = "a mapping", "a list of mappings", "a string", "a list of strings"

# A schema: {field: (what it must be, the schema of its mapping(s) or None)}; "*" is any other
# field. Only fields whose type matters to enforcement or to what an operator reads are listed:
# everything that holds objects, and the strings the pipeline and kubelet read. Scalars and
# string lists inside a securityContext (`privileged: "true"`, `capabilities.add: SYS_ADMIN`)
# are `security.py`'s: it removes them and fills in the restricted value.
Schema = Mapping[str, tuple[str, "Schema | None"]]

_REF: Schema = {"name": (STR, None)}
_KEY_REF: Schema = {"name": (STR, None), "key": (STR, None)}
_CONTEXT_COMMON: dict[str, tuple[str, Schema | None]] = {
    "seccompProfile": (MAP, None),
    "appArmorProfile": (MAP, None),
    "seLinuxOptions": (MAP, None),
    "windowsOptions": (MAP, None),
}
POD_SECURITY_CONTEXT: Schema = {
    **_CONTEXT_COMMON,
    "sysctls": (MAPS, {"name": (STR, None), "value": (STR, None)}),
}
CONTAINER_SECURITY_CONTEXT: Schema = {
    **_CONTEXT_COMMON,
    "capabilities": (MAP, None),
}
_ENV_VAR: Schema = {
    "name": (STR, None),
    "value": (STR, None),
    "valueFrom": (
        MAP,
        {
            "secretKeyRef": (MAP, _KEY_REF),
            "configMapKeyRef": (MAP, _KEY_REF),
            "fieldRef": (MAP, None),
            "resourceFieldRef": (MAP, None),
            "fileKeyRef": (MAP, None),
        },
    ),
}
_ENV_FROM: Schema = {"secretRef": (MAP, _REF), "configMapRef": (MAP, _REF), "prefix": (STR, None)}
_PROBE = (MAP, None)
CONTAINER: Schema = {
    "name": (STR, None),
    "image": (STR, None),
    "command": (STRS, None),
    "args": (STRS, None),
    "env": (MAPS, _ENV_VAR),
    "envFrom": (MAPS, _ENV_FROM),
    "ports": (MAPS, None),
    "volumeMounts": (MAPS, {"name": (STR, None), "subPathExpr": (STR, None)}),
    "volumeDevices": (MAPS, None),
    "resizePolicy": (MAPS, None),
    "resources": (MAP, None),
    "lifecycle": (MAP, None),
    "livenessProbe": _PROBE,
    "readinessProbe": _PROBE,
    "startupProbe": _PROBE,
    "securityContext": (MAP, CONTAINER_SECURITY_CONTEXT),
}
_KEY_TO_PATH: Schema = {"key": (STR, None), "path": (STR, None)}
# Every volume source is an object (VolumeSource's fields are all pointers to structs); the
# ones that name Secrets or hold nested lists are spelled out.
_VOLUME_SOURCE: Schema = {
    "secretName": (STR, None),
    "name": (STR, None),
    "items": (MAPS, _KEY_TO_PATH),
    "secretRef": (MAP, _REF),
    "nodePublishSecretRef": (MAP, _REF),
    "volumeClaimTemplate": (MAP, None),
    "sources": (
        MAPS,
        {
            "secret": (MAP, {"name": (STR, None), "items": (MAPS, _KEY_TO_PATH)}),
            "configMap": (MAP, {"name": (STR, None), "items": (MAPS, _KEY_TO_PATH)}),
            "downwardAPI": (MAP, {"items": (MAPS, None)}),
            "serviceAccountToken": (MAP, None),
            "clusterTrustBundle": (MAP, None),
            "podCertificate": (MAP, None),
        },
    ),
}
VOLUME: Schema = {"name": (STR, None), "*": (MAP, _VOLUME_SOURCE)}
POD_SPEC: Schema = {
    "containers": (MAPS, CONTAINER),
    "initContainers": (MAPS, CONTAINER),
    "ephemeralContainers": (MAPS, CONTAINER),
    "volumes": (MAPS, VOLUME),
    "imagePullSecrets": (MAPS, _REF),
    "tolerations": (MAPS, None),
    "hostAliases": (MAPS, None),
    "topologySpreadConstraints": (MAPS, None),
    "readinessGates": (MAPS, None),
    "resourceClaims": (MAPS, None),
    "schedulingGates": (MAPS, None),
    "securityContext": (MAP, POD_SECURITY_CONTEXT),
    "affinity": (MAP, None),
    "dnsConfig": (MAP, None),
    "nodeSelector": (MAP, None),
    "overhead": (MAP, None),
    "os": (MAP, None),
    "resources": (MAP, None),
    "serviceAccountName": (STR, None),
    "serviceAccount": (STR, None),
}
POD_TEMPLATE: Schema = {
    "metadata": (MAP, {"labels": (MAP, None), "annotations": (MAP, None)}),
    "spec": (MAP, POD_SPEC),
}

Mismatch = tuple[Path, str]


def _is(value: Any, want: str) -> bool:
    if want == MAP:
        return isinstance(value, dict)
    if want == STR:
        return isinstance(value, str)
    if not isinstance(value, list):
        return False
    return want == MAPS or all(isinstance(v, str) for v in value)


def _describe(value: Any) -> str:
    text = f"{type(value).__name__} {value!r}"
    return text if len(text) <= 80 else text[:77] + "..."


def check(value: Any, want: str, schema: Schema | None, path: Path) -> list[Mismatch]:
    """Every place under `path` where `value` is not what `want`/`schema` say, found without
    recursion (an item may be as deep as the loaders allow)."""
    out: list[Mismatch] = []
    stack: list[tuple[Any, str, Schema | None, Path]] = [(value, want, schema, path)]
    while stack:
        node, what, sub, where = stack.pop()
        if not _is(node, what):
            out.append((where, f"must be {what}, not {_describe(node)}"))
            continue
        if what == MAPS:
            # Each item by its own path (`volumes[0]`), as a mapping.
            stack += [(v, MAP, sub, (*where, Item(item_label(v, i)))) for i, v in enumerate(node)]
            continue
        if sub is None or not isinstance(node, dict):
            continue
        for key, field in node.items():
            rule = (sub.get(key) if isinstance(key, str) else None) or sub.get("*")
            if rule is not None and field is not None:
                stack.append((field, rule[0], rule[1], (*where, key)))
    return out


def pod_template_shapes(
    manifest: Mapping[str, Any], patterns: Iterable[str], *, require_containers: bool
) -> list[Mismatch]:
    """Shape mismatches of every pod template `patterns` find in `manifest` (sorted)."""
    out: list[Mismatch] = []
    seen: set[int] = set()
    for pattern in patterns:
        for path, tmpl in find(manifest, parse_glob(pattern)):
            if id(tmpl) in seen:
                continue
            seen.add(id(tmpl))
            # A null here is not absent: it survives the merge only inside a value the layer
            # added whole (a new PyTorchJob replica with `template: null`), and the operator
            # would decode it as an empty pod template, a pod without containers.
            found = check(tmpl, MAP, POD_TEMPLATE, path)
            out += found
            spec = tmpl.get("spec") if isinstance(tmpl, dict) else None
            if require_containers and isinstance(spec, dict) and spec.get("containers") is None:
                out.append(((*path, "spec", "containers"), "a pod needs a containers list"))
    return sorted(out, key=lambda m: str(m[0]))


# The workload fields an operator builds a container from are a container's subset plus, for
# TrainJob's initializers (trainer.kubeflow.org/v1alpha1 DatasetInitializer, ModelInitializer),
# the Secret their env comes from.
OPERATOR_CONTAINER: Schema = {**CONTAINER, "secretRef": (MAP, _REF)}


def container_shapes(container: Any, path: Path) -> list[Mismatch]:
    """Shape mismatches of a container an operator builds from a workload field."""
    return check(container, MAP, OPERATOR_CONTAINER, path)


def touches(path: Path, changed: Iterable[Path]) -> bool:
    """Whether a change at one of `changed` made or contains the value at `path`."""
    for c in changed:
        n = min(len(c), len(path))
        if c[:n] == path[:n]:
            return True
    return False
