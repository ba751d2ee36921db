"""Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{g}`, `/apis/{g}/{v}`.

The typed clients never read these, but kubectl does before every command (to map `jobs` or
`pytorchjobs` to a path and to know verbs and scope), so they carry real kinds, scopes, verbs,
short names and one `x/status` (and `pods/log`) entry per subresource.
"""

from __future__ import annotations

from typing import Any

from launch_agent.sandbox.kube.resources import ALL_VERBS, Registry, ResourceType

VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-launch-agent-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(ALL_VERBS),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = sorted(registry.in_group_version(group, version), key=lambda rt: rt.plural)
    if not types:
        return None
    resources = []
    for rt in types:
        resources.append(_resource(rt))
        for sub in sorted(rt.subresources):
            verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
            kind = "Pod" if sub == "log" else rt.kind
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def core_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def group_list(registry: Registry) -> dict[str, Any]:
    groups = [_group(g, vs) for g, vs in sorted(registry.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.groups().get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


# --- OpenAPI v3 (only what kubectl reads) ----------------------------------------------------
# kubectl asks /openapi/v3 whether a kind's PATCH endpoint accepts `fieldValidation` before it
# sends `fieldValidation=Strict`; without an answer it falls back to client-side validation,
# which needs full schemas. So each group/version document lists, per resource, the item path
# with a PATCH operation carrying the GVK extension and the query parameters.


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_root(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, versions in registry.groups().items():
        for version in versions:
            gv = _gv_path(group, version)
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash=sandbox"}
    return {"paths": paths}


def openapi_group_version(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    params = [
        {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
        for name in ("dryRun", "fieldManager", "fieldValidation", "force")
    ]
    paths: dict[str, Any] = {}
    for rt in types:
        prefix = f"/{_gv_path(group, version)}"
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": group, "version": version, "kind": rt.kind}
        operation = {
            "operationId": f"patch{rt.kind}",
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        }
        paths[f"{prefix}{scope}/{rt.plural}/{{name}}"] = {"patch": operation}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
