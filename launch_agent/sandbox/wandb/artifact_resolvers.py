"""GraphQL resolvers for the artifact read path (`artifacts.py` says what is modelled).

Download URLs point back at this server (`/artifact-manifests/...`, `/artifact-files/...`) and
carry the server's URL token instead of credentials, like W&B's presigned storage URLs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from launch_agent.sandbox.wandb.artifacts import ArtifactCollection, ArtifactVersion
from launch_agent.sandbox.wandb.model import encode_id, iso
from launch_agent.sandbox.wandb.resolvers import Info, Obj, project_view

if TYPE_CHECKING:
    from launch_agent.sandbox.wandb.resolvers import Context


def _context(info: Info) -> Context:
    return info.context


def collection_view(info: Info, collection: ArtifactCollection) -> Obj:
    state = _context(info).state
    home = state.find_project(collection.entity, collection.project)
    first = collection.versions[0].created_at if collection.versions else state.clock()
    return {
        "__typename": "ArtifactSequence",
        "id": collection.id,
        "name": collection.name,
        "description": None,
        "createdAt": iso(first),
        "project": None if home is None else project_view(state, home),
        "_c": collection,
    }


def _aliases(info: Info, version: ArtifactVersion) -> list[Obj]:
    collection = collection_view(info, version.collection)
    return [
        {
            "id": encode_id(f"ArtifactAlias:{version.id}", n),
            "alias": alias,
            "artifactCollection": collection,
        }
        for n, alias in enumerate(version.aliases)
    ]


def artifact_view(info: Info, version: ArtifactVersion) -> Obj:
    return {
        "id": version.id,
        "artifactSequence": collection_view(info, version.collection),
        "versionIndex": version.index,
        "artifactType": {"id": encode_id("ArtifactType", 1), "name": version.collection.type},
        "description": version.description,
        "metadata": json.dumps(version.metadata),
        "ttlDurationSeconds": -1,
        "ttlIsInherited": True,
        "tags": [],
        "historyStep": None,
        "state": "COMMITTED",
        "size": version.size,
        "digest": version.digest,
        "digestAlgorithm": "MANIFEST_MD5",
        "commitHash": None,
        "fileCount": len(version.files),
        "createdAt": iso(version.created_at),
        "updatedAt": iso(version.created_at),
        "aliases": _aliases(info, version),
        "_v": version,
    }


def membership_view(info: Info, version: ArtifactVersion) -> Obj:
    return {
        "id": encode_id(f"ArtifactCollectionMembership:{version.collection.id}", version.index),
        "versionIndex": version.index,
        "createdAt": iso(version.created_at),
        "aliases": _aliases(info, version),
        "artifactCollection": collection_view(info, version.collection),
        "artifact": artifact_view(info, version),
        "_v": version,
    }


def _url(info: Info, kind: str, version: ArtifactVersion, name: str = "") -> str:
    context = _context(info)
    path = f"{context.base_url}/{kind}/{context.upload_token}/{quote(version.id, safe='')}"
    return f"{path}/{quote(name)}" if name else path


# -- resolvers ----------------------------------------------------------------------------


def query_artifact(_: None, info: Info, id: str) -> Obj | None:
    version = _context(info).state.artifacts.versions.get(id)
    return None if version is None else artifact_view(info, version)


def project_membership(parent: Obj, info: Info, name: str) -> Obj | None:
    project = parent["_p"]
    version = _context(info).state.artifacts.find(project.entity, project.name, name)
    return None if version is None else membership_view(info, version)


def project_collection(parent: Obj, info: Info, name: str) -> Obj | None:
    project = parent["_p"]
    key = (project.entity, project.name, name)
    collection = _context(info).state.artifacts.collections.get(key)
    return None if collection is None else collection_view(info, collection)


def collection_membership(parent: Obj, info: Info, aliasName: str) -> Obj | None:
    version = parent["_c"].version(aliasName)
    return None if version is None else membership_view(info, version)


def current_manifest(parent: Obj, info: Info) -> Obj:
    version: ArtifactVersion = parent["_v"]
    url = _url(info, "artifact-manifests", version)
    file = {"id": encode_id("File", version.index), "name": "wandb_manifest.json"}
    return {"id": encode_id("ArtifactManifest", version.index), "file": {**file, "directUrl": url}}


def files(
    parent: Obj,
    info: Info,
    after: str | None = None,
    first: int | None = None,
    names: list[str] | None = None,
) -> Obj:
    """The version's files with download URLs, paged by a numeric cursor."""
    version: ArtifactVersion = parent["_v"]
    selected = [n for n in sorted(version.files) if names is None or n in names]
    start = int(after) + 1 if after and after.isdigit() else 0
    page = selected[start : start + first] if first else selected[start:]
    edges = [
        {
            "cursor": str(start + n),
            "node": {
                "id": encode_id("File", start + n),
                "name": name,
                "directUrl": _url(info, "artifact-files", version, name),
                "url": _url(info, "artifact-files", version, name),
                "sizeBytes": len(version.files[name]),
                "md5": None,
            },
        }
        for n, name in enumerate(page)
    ]
    end = start + len(page)
    return {
        "pageInfo": {
            "endCursor": str(end - 1) if page else after,
            "hasNextPage": end < len(selected),
        },
        "edges": edges,
    }


RESOLVERS: dict[tuple[str, str], Any] = {
    ("Query", "artifact"): query_artifact,
    ("Project", "artifactCollectionMembership"): project_membership,
    ("Project", "artifactCollection"): project_collection,
    ("ArtifactSequence", "artifactMembership"): collection_membership,
    ("ArtifactCollectionMembership", "files"): files,
    ("Artifact", "files"): files,
    ("Artifact", "currentManifest"): current_manifest,
}
