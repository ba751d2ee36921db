"""The override policy: every change the submitter's layer makes is checked against the spec.

W&B merges its own queue config (and `{{variable}}` values) into `runSpec.resource_args`
before the agent sees it, so most of that layer usually repeats the template. The merge itself
(`merge.merge_changes`) reports every place where the layer changes the template, and this
module decides on that list; what is checked is by construction what is merged. An identical
echo is no change. Everything else is:

- **outside a grant**, refused with its path: a changed value, a new key (even `{}`, `[]`,
  `""` or `null`), a type change (mapping, list, scalar), a removal (`null`), a list that is
  replaced by one of another length, a new item in a named list (a renamed item is a new one);
- **inside a grant**, allowed, except what no grant can make safe (`_refusals`): Secrets the
  spec does not list in `security.secrets`, projected service-account tokens for audiences
  not in `security.serviceAccountTokenAudiences`, projected pod certificates, nested
  `kind`/`apiVersion`, TrainJob `runtimeRef`, RayJob `clusterSelector`, `managedBy`,
  namespaces anywhere, and the labels and annotations the agent and Kueue own. Values that
  break the restricted profile are left to enforcement (`security.py`), which removes or
  corrects them with a warning.

A change is allowed when a glob matches its path or a prefix of it. A new mapping is checked
key by key (so `**.resources.limits` admits a new `resources: {limits: ...}`), a new named list
item as one item (so `**.containers[*].image` does not admit a new container).

`runSpec.overrides` is checked the same way under the pseudo-paths `overrides.args`,
`overrides.entry_point`, `overrides.run_config`, `overrides.artifacts` and `overrides.files`,
each exactly when the pipeline would apply it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from launch_agent.model import labels as L
from launch_agent.model.queue_spec import Problem, QueueSpec, SecurityExceptions
from launch_agent.model.run_item import RunItem
from launch_agent.render.kinds import KindInfo
from launch_agent.render.merge import MISSING, REMOVED, Change, is_named_list, merge_changes
from launch_agent.render.paths import (
    Glob,
    Item,
    Path,
    PrefixMatcher,
    format_path,
    glob_matches_prefix,
    item_label,
)

LAYER_PREFIX = "runSpec.resource_args.kubernetes"

# Kueue's and Volcano's scheduling keys move a run into another queue (another team's quota)
# or priority: `scheduling.volcano.sh/queue-name` on a pod group, `volcano.sh/preemptable`.
RESERVED_LABEL_PREFIXES = (
    "kueue.x-k8s.io/",
    L.PREFIX,
    "wandb.ai/",
    "scheduling.volcano.sh/",
    "volcano.sh/",
    "scheduling.x-k8s.io/",
)
RESERVED_LABELS = frozenset(
    {
        L.AGENT,
        L.QUEUE,
        L.RUN_QUEUE_ITEM,
        L.RUN_ID,
        L.RUN_QUEUE_ITEM_ID,
        L.QUEUE_NAME,
        L.QUEUE_SPEC,
        L.ENTITY,
        L.PROJECT,
        L.WANDB_RUN_ID,
        L.WANDB_AGENT,
        L.KUEUE_QUEUE_NAME,
        L.GKE_ML_DIAGNOSTICS,
    }
)
# Maps whose keys are data (label keys, resource names, Ray flags), not Kubernetes fields: a
# label called `namespace` or a resource called `example.com/secret` is not a reference.
FREE_FORM = frozenset(
    {"labels", "annotations", "nodeSelector", "matchLabels", "limits", "requests", "rayStartParams"}
)
# Keys that switch what runs or where, or mint credentials; no grant covers them.
SWITCHES = {
    "kind": "sets an object's kind, which switches what runs or what it reads",
    "apiVersion": "sets an object's API version, which switches what runs or what it reads",
    "runtimeRef": "switches the training runtime (and so the pods) of a TrainJob",
    "clusterSelector": "sends the RayJob to another (existing) Ray cluster",
    "managedBy": "hands the workload to another controller (MultiKueue runs it in another cluster)",
    "podCertificate": "mints a certificate for the pod's identity",
    # Kueue reads a pod's priority class as the workload's priority when no Kueue priority
    # label is set (kueue pkg/util/priority/priority.go), and the scheduler preempts by it.
    "priorityClassName": "sets the pods' priority, by which Kueue and the scheduler preempt other"
    " runs",
    "schedulerName": "hands the pods to another scheduler, outside the queue's admission and gang"
    " scheduling",
}
# Volcano Job `spec.queue`: the Volcano queue (and so the quota) the job is admitted from.
QUEUE_KEYS = frozenset({("spec", "queue")})
# `fieldRef.apiVersion` (the downward API's `v1`) names no object.
SWITCH_EXEMPT_PARENTS = frozenset({"fieldRef"})
NOT_A_NAMESPACE = frozenset({"shareProcessNamespace"})


def allowed(path: Path, globs: Sequence[Glob]) -> bool:
    return any(glob_matches_prefix(g, path) for g in globs)


def apply_layer(
    layer: Mapping[str, Any], spec: QueueSpec, globs: Sequence[Glob]
) -> tuple[dict[str, Any], list[Problem]]:
    """The layer merged onto the template, and a problem for each change the spec refuses."""
    merged, changes = merge_changes(spec.template, layer)
    return merged, check_changes(drop_echoes(changes, spec), globs, spec)


def drop_echoes(changes: Sequence[Change], spec: QueueSpec) -> list[Change]:
    """`changes` less those that write back what the admin wrote where the agent sets its own
    value (`QueueSpec.written`): the template no longer holds those values, but W&B's server
    echoes the queue config as the admin wrote it into every item. The agent overwrites them
    after the merge, so the echo changes nothing."""
    written = spec.written
    if not written:
        return list(changes)
    return [c for c in changes if not (c.path in written and c.value == written[c.path])]


def check_changes(
    changes: Sequence[Change], globs: Sequence[Glob], spec: QueueSpec
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[Problem] = set()

    def add(path: Path, reason: str) -> None:
        p = Problem(format_path(path, LAYER_PREFIX), reason)
        if p not in seen:
            seen.add(p)
            problems.append(p)

    grants = PrefixMatcher(globs)
    for change in changes:
        for path, value, base in _parts(change.path, change.value, change.base):
            if not grants.allows(path):
                add(path, _reason(spec.name, spec.overridable, _describe(path, value, base)))
        for path, reason in _refusals(change, spec.security):
            add(path, reason)
    return problems


def _parts(path: Path, value: Any, base: Any) -> Iterator[tuple[Path, Any, Any]]:
    """The pieces a change is checked as: a new mapping key by key, a new named list by item."""
    if base is MISSING and isinstance(value, dict) and value and not isinstance(path[-1], Item):
        for k, v in value.items():
            yield from _parts((*path, k), v, MISSING)
    elif base is MISSING and value and isinstance(path[-1], str) and is_named_list(path[-1], value):
        for i, item in enumerate(value):
            yield (*path, Item(item_label(item, i))), item, MISSING
    else:
        yield path, value, base


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if value is None:
        return "null"
    return "scalar"


def _describe(path: Path, value: Any, base: Any) -> str | None:
    """What kind of change this is, when it is more than a changed scalar."""
    if value is REMOVED:
        if base is MISSING:
            return "null where the template has no value"
        return "removes the template's value"
    if base is MISSING:
        if isinstance(path[-1], Item):
            return "adds a list item"
        if value is None:
            return "null where the template has no value"
        if value in ({}, [], ""):
            return f"adds an empty {_kind_of(value)} the template does not have"
        return None  # a new value: its path says it all
    if _kind_of(value) != _kind_of(base):
        return f"is a {_kind_of(value)} where the template has a {_kind_of(base)}"
    if value in ({}, [], "") and base not in ({}, [], ""):
        return "is empty where the template has a value"
    if isinstance(value, list) and isinstance(base, list) and len(value) != len(base):
        return f"is a list of {len(value)} items where the template has {len(base)}"
    return None


def _reason(spec_name: str, granted: Sequence[str], what: str | None = None) -> str:
    listed = ", ".join(granted) if granted else "nothing"
    detail = f" ({what})" if what else ""
    return (
        f"may not be overridden{detail}: queue spec {spec_name!r} lets submitters set only {listed}"
    )


# ------------------------------------------------------------------ refused even when granted


def _keys(node: Any, path: Path) -> Iterator[tuple[Path, str, Any]]:
    """(path, key, value) of every mapping key in `node`, at any depth."""
    if isinstance(node, dict):
        for k, v in node.items():
            sub = (*path, k)
            yield sub, k, v
            yield from _keys(v, sub)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _keys(v, (*path, Item(item_label(v, i))))


def _refusals(change: Change, sec: SecurityExceptions) -> Iterator[tuple[Path, str]]:
    """What no grant permits in this change: the keys on its path and in its new value, the
    Secrets it names, and the reserved labels it removes or replaces."""
    path, value = change.path, change.value
    on_path: list[tuple[Path, str, Any]] = []
    for i, seg in enumerate(path):
        if isinstance(seg, str) and _notable(seg, path[i - 1] if i else None):
            on_path.append((path[: i + 1], seg, _at_rest(path[i + 1 :], value)))
    new = list(_keys(value, path)) if value is not REMOVED else []
    for where, key, v in on_path + new:
        yield from _key_refusals(where, key, v, sec)
    yield from _secret_refusals(change, on_path, sec)
    # Removing or replacing the admin's reserved labels (Kueue's queue) is a change to them too.
    if change.base is not MISSING:
        for where, key, _v in _keys(change.base, path):
            if len(where) > 1 and where[-2] in ("labels", "annotations") and _reserved(key):
                yield where, f"is reserved for the agent and Kueue; {_NO_GRANT}"


def _key_refusals(
    where: Path, key: str, value: Any, sec: SecurityExceptions
) -> Iterator[tuple[Path, str]]:
    """What a key the change writes (or writes below) switches that no grant covers."""
    parent = where[-2] if len(where) > 1 else None
    if parent in ("labels", "annotations"):
        if _reserved(key):
            yield where, f"is reserved for the agent and Kueue; {_NO_GRANT}"
        return
    if parent in FREE_FORM:
        return
    if key in SWITCHES and parent not in SWITCH_EXEMPT_PARENTS:
        yield where, f"{SWITCHES[key]}; {_NO_GRANT}"
    elif tuple(where) in QUEUE_KEYS:
        yield where, f"sets the scheduler queue the workload is admitted from; {_NO_GRANT}"
    elif "namespace" in key.lower() and key not in NOT_A_NAMESPACE:
        yield where, f"names a namespace: workloads run only in the queue spec's; {_NO_GRANT}"
    elif key == "serviceAccountToken":
        yield from _token(where, value, sec)


def _secret_refusals(
    change: Change, on_path: Sequence[tuple[Path, str, Any]], sec: SecurityExceptions
) -> Iterator[tuple[Path, str]]:
    """The Secrets the new value names, less those the template's replaced value had, that
    the spec does not list."""
    trusted = (
        {n for _w, n in _secret_names(change.base, (), [])} if change.base is not MISSING else set()
    )
    for where, name in _secret_names(change.value, change.path, on_path):
        if name not in trusted and name not in sec.secrets:
            listed = ", ".join(sorted(sec.secrets)) or "none"
            yield (
                where,
                f"names Secret {name!r}, which the queue spec does not list in security.secrets"
                f" (listed: {listed}); {_NO_GRANT}",
            )


_NO_GRANT = "refused even where the queue spec grants overrides"
_REST_UNKNOWN: Any = object()


def _at_rest(rest: Path, value: Any) -> Any:
    """The new value at the end of `rest` when the change is that deep, else unknown."""
    return value if not rest else _REST_UNKNOWN


def _notable(key: str, parent: Any) -> bool:
    """Whether a key on a change's path can trigger a refusal (most keys cannot)."""
    if parent in ("labels", "annotations"):
        return _reserved(key)
    if parent in FREE_FORM:
        return False
    lower = key.lower()
    return (
        key in SWITCHES
        or (parent == "spec" and key == "queue")
        or key == "serviceAccountToken"
        or "secret" in lower
        or ("namespace" in lower and key not in NOT_A_NAMESPACE)
    )


def _reserved(key: str) -> bool:
    return key in RESERVED_LABELS or key.startswith(RESERVED_LABEL_PREFIXES)


def _token(where: Path, v: Any, sec: SecurityExceptions) -> Iterator[tuple[Path, str]]:
    audience = v.get("audience") if isinstance(v, dict) else None
    if isinstance(audience, str) and audience in sec.service_account_token_audiences:
        return
    listed = ", ".join(sorted(sec.service_account_token_audiences)) or "none"
    what = f"audience {audience!r}" if audience else "the API server's audience"
    yield (
        where,
        f"mints a service-account token for {what}, which the queue spec does not list in"
        f" security.serviceAccountTokenAudiences (listed: {listed}); {_NO_GRANT}",
    )


def _secret_names(
    value: Any, path: Path, on_path: Sequence[tuple[Path, str, Any]]
) -> Iterator[tuple[Path, str]]:
    """(path, Secret name) for every Secret reference the change writes.

    Any key containing `secret` is a reference (`secretKeyRef`, `secretRef`, `secret`,
    `secretName`, `imagePullSecrets`, `nodePublishSecretRef`, the TrainJob initializers'
    `secretRef`, the Secret refs of other volume types): its value names the Secret as a string,
    as `name`/`secretName`, or as a list of `{name}`.
    """
    if value is REMOVED or value is MISSING:
        return
    # The change is below a reference: only the name field itself (or an item of a list of
    # references) can name a new Secret; a changed `key` or `optional` keeps the template's.
    for where, key, _v in on_path:
        if not _is_secret_key(key, where):
            continue
        rest = path[len(where) :]
        if rest in (("name",), ("secretName",)) or (
            len(rest) == 2 and isinstance(rest[0], Item) and rest[1] == "name"
        ):
            if isinstance(value, str):
                yield path, value
        elif len(rest) == 1 and isinstance(rest[0], Item) and isinstance(value, dict):
            name = value.get("name")
            if isinstance(name, str):
                yield path, name
    if on_path and on_path[-1][0] == path and _is_secret_key(on_path[-1][1], path):
        # The change *is* the reference (a new or retyped `secretKeyRef: {...}`).
        yield from _names_in(value, path)
    for where, key, v in _keys(value, path):
        if _is_secret_key(key, where):
            yield from _names_in(v, where)


def _is_secret_key(key: str, where: Path) -> bool:
    parent = where[-2] if len(where) > 1 else None
    return "secret" in key.lower() and parent not in FREE_FORM


def _names_in(v: Any, where: Path) -> Iterator[tuple[Path, str]]:
    if isinstance(v, str):
        yield where, v
    elif isinstance(v, dict):
        if any("secret" in k.lower() for k in v):
            return  # the nested key (`secret: {secretName: ...}`) is the reference
        for field in ("name", "secretName"):
            name = v.get(field)
            if isinstance(name, str):
                yield (*where, field), name
    elif isinstance(v, list):
        for i, item in enumerate(v):
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                yield (*where, Item(item_label(item, i))), item["name"]


# ------------------------------------------------------------------------- W&B's overrides


def check_overrides(
    item: RunItem,
    globs: Sequence[Glob],
    spec_name: str,
    granted: Sequence[str],
    *,
    info: KindInfo | None = None,
    manifest: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """Problems for each W&B `overrides` entry the pipeline would apply and the spec refuses.

    Each entry counts exactly when the pipeline applies it, and the pipeline applies each only
    when it is non-empty, as W&B's agent does (`if override_args:` in wandb's
    kubernetes_runner.py): W&B's UI sends `args: []`, `entry_point: []` and `run_config: {}`
    with every launch, meaning "the job's own". Non-empty `args` that leave every place they
    are written as it is (an echo) change nothing either; `info` and `manifest` (the merged
    workload) say where those places are; without them any non-empty `args` counts.
    """
    present = {
        "args": bool(item.args) and not _args_unchanged(item, info, manifest),
        "entry_point": bool(item.entry_point),
        "run_config": bool(item.run_config),
        "artifacts": bool(item.artifacts),
        "files": bool(item.files),
    }
    problems = []
    for key, applied in present.items():
        if applied and not allowed(("overrides", key), globs):
            problems.append(Problem(f"runSpec.overrides.{key}", _reason(spec_name, granted)))
    return problems


def _args_unchanged(
    item: RunItem, info: KindInfo | None, manifest: Mapping[str, Any] | None
) -> bool:
    """True when `overrides.args` would leave every place it is written unchanged."""
    if info is None or manifest is None or item.args is None:
        return False
    args = list(item.args)
    if info.entry_target == "rayjob":
        if item.entry_point:
            return False  # the args are appended to the submitter's entry point
        # The pipeline re-joins the template's entrypoint with the args.
        spec = manifest.get("spec")
        current = spec.get("entrypoint", "") if isinstance(spec, dict) else ""
        try:
            return shlex.join([*shlex.split(str(current)), *args]) == str(current)
        except ValueError:
            return False
    # Everywhere else the pipeline writes the args into the run's targets: a TrainJob's
    # trainer, or each pod template's main container (`{}` for a template whose container
    # the pipeline adds).
    return all(
        _same_args(target.get("args"), args)
        for target in info.run_targets(manifest)
        if target is not None
    )


def _same_args(current: Any, args: list[str]) -> bool:
    if current is None:
        return not args
    # The args are written after macro substitution: an echo of `${run_id}` would be literal.
    if any("${" in str(a) for a in args):
        return False
    return isinstance(current, list) and [str(a) for a in current] == args
