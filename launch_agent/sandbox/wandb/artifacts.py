"""Artifacts, as far as the wandb SDK needs them to download a launch job.

A run spec with `"job": "ENTITY/PROJECT/NAME:ALIAS"` makes the reference agent download the job
artifact with `wandb.Api().job(...)`: `ArtifactMembershipByName` finds the version,
`FetchArtifactManifest` gives the URL of its manifest (fetched over plain HTTP), and
`GetArtifactMembershipFileUrls` gives a presigned URL per file. The job's `wandb-job.json`
then says where the code comes from: an image, a git repository, or a code artifact (which
is downloaded the same way).

Only that read path is modelled: artifacts are seeded from Python (`add_artifact`, `add_job`),
nothing logs them over the API, there are no portfolios, registries, TTLs or references. The
manifest is the SDK's format v1 with real MD5 digests, so the SDK's cache accepts the files.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ArtifactVersion:
    id: str
    collection: ArtifactCollection
    index: int
    files: dict[str, bytes]
    created_at: float
    aliases: list[str] = field(default_factory=list)
    description: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())

    @property
    def digest(self) -> str:
        """A stable digest of the contents (W&B's is the manifest digest; any hex works)."""
        h = hashlib.md5(usedforsecurity=False)
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + self.files[name] + b"\0")
        return h.hexdigest()

    @property
    def qualified_name(self) -> str:
        c = self.collection
        return f"{c.entity}/{c.project}/{c.name}:v{self.index}"


@dataclass
class ArtifactCollection:
    id: str
    name: str
    type: str
    entity: str
    project: str
    versions: list[ArtifactVersion] = field(default_factory=list)

    def version(self, alias: str) -> ArtifactVersion | None:
        """`latest`, `vN` or any alias a version carries."""
        for version in reversed(self.versions):
            if alias in version.aliases or alias == f"v{version.index}":
                return version
        return None


def file_md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def manifest(version: ArtifactVersion) -> dict[str, Any]:
    """The artifact manifest (format v1) the SDK downloads from `currentManifest.file`."""
    return {
        "version": 1,
        "storagePolicy": "wandb-storage-policy-v1",
        "storagePolicyConfig": {"storageLayout": "V2"},
        "contents": {
            name: {"digest": file_md5_b64(data), "size": len(data), "birthArtifactID": version.id}
            for name, data in sorted(version.files.items())
        },
    }


def job_files(
    *,
    image: str | None = None,
    repo: str | None = None,
    commit: str | None = None,
    code_artifact: str | None = None,
    entrypoint: list[str] | None = None,
    requirements: str = "",
) -> dict[str, bytes]:
    """`wandb-job.json` (+ `requirements.frozen.txt`) for exactly one kind of source."""
    sources = [s for s in (image, repo, code_artifact) if s]
    source: dict[str, Any]
    code_artifact = code_artifact or ""
    if len(sources) != 1:
        raise ValueError("a job has exactly one source: image, repo or code_artifact")
    if image:
        source_type, source = "image", {"image": image, "args": []}
    elif repo:
        source_type = "repo"
        source = {
            "git": {"remote": repo, "commit": commit or "0" * 40},
            "entrypoint": entrypoint or ["python", "train.py"],
            "args": [],
        }
    else:
        source_type = "artifact"
        # The SDK writes (and reads) code artifact references as wandb-artifact:// URIs.
        prefix = "" if code_artifact.startswith("wandb-artifact://") else "wandb-artifact://"
        source = {
            "artifact": prefix + code_artifact,
            "entrypoint": entrypoint or ["python", "train.py"],
            "args": [],
        }
    info = {
        "_version": "v0",
        "source_type": source_type,
        "source": source,
        "input_types": {"wb_type": "typedDict", "params": {"type_map": {}}},
        "output_types": {"wb_type": "typedDict", "params": {"type_map": {}}},
        "runtime": "3.11",
    }
    return {
        "wandb-job.json": json.dumps(info, indent=2).encode(),
        "requirements.frozen.txt": requirements.encode(),
    }


class ArtifactStore:
    """Artifact collections by (entity, project, name), and versions by id."""

    def __init__(self, next_id: Callable[[str], str], clock: Callable[[], float]) -> None:
        self._next_id = next_id
        self._clock = clock
        self.collections: dict[tuple[str, str, str], ArtifactCollection] = {}
        self.versions: dict[str, ArtifactVersion] = {}

    def add(
        self,
        entity: str,
        project: str,
        name: str,
        type_: str,
        *,
        files: dict[str, bytes],
        aliases: tuple[str, ...] = ("latest",),
    ) -> ArtifactVersion:
        """A new version of the collection; its aliases move off older versions."""
        key = (entity, project, name)
        collection = self.collections.get(key)
        if collection is None:
            collection = ArtifactCollection(
                self._next_id("ArtifactSequence"), name, type_, entity, project
            )
            self.collections[key] = collection
        for older in collection.versions:
            older.aliases = [a for a in older.aliases if a not in aliases]
        version = ArtifactVersion(
            self._next_id("Artifact"),
            collection,
            len(collection.versions),
            dict(files),
            self._clock(),
            list(aliases),
        )
        collection.versions.append(version)
        self.versions[version.id] = version
        return version

    def find(self, entity: str, project: str, name: str) -> ArtifactVersion | None:
        """`NAME:ALIAS` (alias `latest`, `vN` or a custom one) in a project."""
        collection_name, _, alias = name.partition(":")
        collection = self.collections.get((entity, project, collection_name))
        return None if collection is None else collection.version(alias or "latest")
