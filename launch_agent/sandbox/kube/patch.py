"""The three PATCH flavours of kube-apiserver, as pure functions on JSON values.

- JSON patch (RFC 6902, `application/json-patch+json`): a list of operations; a failing `test`
  or a missing path is a `PatchError` (the server answers 422).
- Merge patch (RFC 7386, `application/merge-patch+json`): objects merge recursively, `null`
  deletes a key, anything else (lists included) replaces.
- Strategic merge patch (`application/strategic-merge-patch+json`, the default of kubectl and
  of kubernetes_asyncio for dict bodies): like merge patch, except that the lists Kubernetes
  declares with `patchStrategy: merge` merge element by element on their `patchMergeKey`
  (containers, env, volumes, volumeMounts by `name`; ports by `containerPort`; ...).
  `$patch: delete` inside a list element removes it, `$patch: replace` replaces the whole
  list or map, and the `$setElementOrder`/`$retainKeys` directives are accepted and ignored.

Inputs are never mutated: every function returns a new value.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# patchMergeKey of the list fields the API declares with patchStrategy=merge (by field name,
# which is how the server resolves them for the kinds the sandbox serves).
MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "name",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "conditions": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars with set semantics (patchStrategy=merge without a key).
MERGE_SETS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied; the message names the path and the reason."""


# --- RFC 6902 ---------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, for_add: bool) -> int:
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r} in path {path!r}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} out of range in path {path!r}")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError(f"path {path!r} does not exist (missing {token!r})")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, path, for_add=False)]
        else:
            raise PatchError(f"path {path!r} goes through a scalar")
    return current


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, for_add=False)]
    raise PatchError(f"path {path!r} goes through a scalar")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], path, for_add=True), value)
    else:
        raise PatchError(f"cannot add to scalar at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"path {path!r} does not exist")
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], path, for_add=False)]
    else:
        raise PatchError(f"cannot remove from scalar at {path!r}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply an RFC 6902 operation list to a copy of `doc`."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    result = copy.deepcopy(doc)
    for number, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {number} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {number} ({kind}) needs 'value'")
        if kind == "add":
            result = _add(result, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            result = _remove(result, path)
        elif kind == "replace":
            _get(result, path)
            result = _add(_remove(result, path), path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {number} ({kind}) needs 'from'")
            value = copy.deepcopy(_get(result, source))
            if kind == "move":
                result = _remove(result, source)
            result = _add(result, path, value)
        elif kind == "test":
            if _get(result, path) != op["value"]:
                raise PatchError(f"test operation {number} failed at {path!r}")
        else:
            raise PatchError(f"unknown operation {kind!r} in operation {number}")
    return result


# --- RFC 7386 ---------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge --------------------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch for the built-in kinds; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(map(str, value or []))
            result[field] = [v for v in result.get(field) or [] if str(v) not in drop]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, MERGE_KEYS[key], key)
        elif isinstance(value, list) and key in MERGE_SETS:
            current = list(result.get(key) or [])
            result[key] = current + [v for v in value if v not in current]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: Any, patch: list[Any], merge_key: str, field: str) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    merged = [copy.deepcopy(item) for item in current] if isinstance(current, list) else []
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"{field}: every element needs the merge key {merge_key!r}")
        key = item[merge_key]
        position = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(merge_key) == key
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del merged[position]
            continue
        if position is None:
            merged.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            merged[position] = strategic_merge_patch(merged[position], item)
    return merged
