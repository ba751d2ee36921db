"""What the API server serves: the built-in resources and those registered from CRDs.

A `ResourceType` is one served (group, version, plural). Objects are stored per (group,
plural), the `storage` key, so every served version of a CRD sees the same objects (the
sandbox converts between versions the way a CRD with `conversion: None` does: only
`apiVersion` changes). A CRD arrives as a plain `apiextensions.k8s.io/v1` object, from a POST,
a file or Python; `crd_resource_types` checks it and says precisely what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


class CrdError(ValueError):
    """An invalid CustomResourceDefinition; `path` is where in the object, `source` which file."""

    def __init__(self, path: str, reason: str, source: str = "") -> None:
        self.path, self.reason, self.source = path, reason, source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {reason}")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    categories: tuple[str, ...] = ()
    # The CRD's openAPIV3Schema for this version (None for built-in kinds).
    schema: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    crd_name: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage(self) -> str:
        """The key objects are stored under, shared by all versions of a resource."""
        return f"{self.group}/{self.plural}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def is_custom(self) -> bool:
        return bool(self.crd_name)


def _core(
    plural: str, kind: str, namespaced: bool, short: tuple[str, ...] = (), sub: str = ""
) -> ResourceType:
    subs = frozenset(s for s in sub.split(",") if s)
    return ResourceType("", "v1", plural, kind, namespaced, kind.lower(), short, subs)


BUILTIN: tuple[ResourceType, ...] = (
    _core("pods", "Pod", True, ("po",), "status,log"),
    _core("secrets", "Secret", True),
    _core("configmaps", "ConfigMap", True, ("cm",)),
    _core("events", "Event", True, ("ev",)),
    _core("serviceaccounts", "ServiceAccount", True, ("sa",)),
    _core("resourcequotas", "ResourceQuota", True, ("quota",), "status"),
    _core("limitranges", "LimitRange", True, ("limits",)),
    _core("namespaces", "Namespace", False, ("ns",), "status"),
    _core("nodes", "Node", False, ("no",), "status"),
    ResourceType("batch", "v1", "jobs", "Job", True, "job", (), frozenset({"status"}), ("all",)),
    # Leader election: updates conditional on resourceVersion, 409 Conflict otherwise (store.py).
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease"),
    # The same Events in the newer API; the sandbox's components write both views
    # (`cluster/common.py`, `Ctx.event`), as kube-apiserver serves one object at both.
    ResourceType("events.k8s.io", "v1", "events", "Event", True, "event"),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        "customresourcedefinition",
        ("crd", "crds"),
        frozenset({"status"}),
    ),
)


def _need(obj: Mapping[str, Any], key: str, path: str, source: str, kind: type = str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (kind is str and not value):
        expected = "a non-empty string" if kind is str else kind.__name__
        raise CrdError(f"{path}.{key}", f"must be {expected}, got {value!r}", source)
    return value


def crd_resource_types(crd: Mapping[str, Any], source: str = "") -> list[ResourceType]:
    """The served versions of a CRD object, or a `CrdError` naming the bad field."""
    if not isinstance(crd, Mapping):
        raise CrdError("(root)", "a CRD must be a mapping", source)
    if crd.get("kind") != "CustomResourceDefinition":
        raise CrdError("kind", f"must be CustomResourceDefinition, got {crd.get('kind')!r}", source)
    if crd.get("apiVersion") != "apiextensions.k8s.io/v1":
        raise CrdError(
            "apiVersion", f"must be apiextensions.k8s.io/v1, got {crd.get('apiVersion')!r}", source
        )
    spec = _need(crd, "spec", "", source, dict)
    group = _need(spec, "group", "spec", source)
    names = _need(spec, "names", "spec", source, dict)
    plural = _need(names, "plural", "spec.names", source)
    kind = _need(names, "kind", "spec.names", source)
    name = (crd.get("metadata") or {}).get("name")
    if name != f"{plural}.{group}":
        raise CrdError("metadata.name", f"must be {plural}.{group}, got {name!r}", source)
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        raise CrdError("spec.scope", f"must be Namespaced or Cluster, got {scope!r}", source)
    versions = _need(spec, "versions", "spec", source, list)
    if not versions:
        raise CrdError("spec.versions", "must list at least one version", source)
    if sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        raise CrdError("spec.versions", "exactly one version must have storage: true", source)
    types = []
    for i, version in enumerate(versions):
        path = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            raise CrdError(path, "must be a mapping", source)
        vname = _need(version, "name", path, source)
        if not version.get("served", False):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
        if schema is not None and not isinstance(schema, dict):
            raise CrdError(f"{path}.schema.openAPIV3Schema", "must be a mapping", source)
        subresources = version.get("subresources") or {}
        subs = frozenset(k for k in ("status", "scale") if k in subresources)
        types.append(
            ResourceType(
                group=group,
                version=vname,
                plural=plural,
                kind=kind,
                namespaced=scope == "Namespaced",
                singular=str(names.get("singular") or kind.lower()),
                short_names=tuple(names.get("shortNames") or ()),
                subresources=subs,
                categories=tuple(names.get("categories") or ()),
                schema=schema,
                crd_name=name,
            )
        )
    return types


class Registry:
    """Served resources by (group, version, plural), with lookups by kind for GC and Python."""

    def __init__(self, types: Iterable[ResourceType] = BUILTIN) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_crd(self, crd_name: str) -> list[ResourceType]:
        gone = [rt for rt in self._types.values() if rt.crd_name == crd_name]
        for rt in gone:
            del self._types[(rt.group, rt.version, rt.plural)]
        return gone

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def by_storage(self, storage: str) -> ResourceType | None:
        for rt in self._types.values():
            if rt.storage == storage:
                return rt
        return None

    def find(self, name: str) -> ResourceType | None:
        """By plural, `plural.group`, kind or short name, as Python callers like to say it."""
        for rt in self._types.values():
            full = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
            if name in (rt.plural, full, rt.kind, rt.singular, *rt.short_names):
                return rt
        return None

    def groups(self) -> dict[str, list[str]]:
        """Group name → served versions, core group ("") included."""
        out: dict[str, list[str]] = {}
        for group, version, _ in self._types:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _), rt in self._types.items() if g == group and v == version]

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))
