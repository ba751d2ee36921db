"""The Kaniko build Job manifest (pure): one function from a build request to a batch/v1 Job.

Kaniko must run as root (it unpacks base images and runs `RUN` steps in its own container), so
the Job is isolated instead of restricted: its own namespace and service account (the Helm
chart creates both), no Kubernetes API token mounted (Kaniko never talks to the API server), no
service links, no privilege escalation.

Registry credentials, per registry kind:

| registry | with `builder.secret-name`/`secret-key` | without |
| --- | --- | --- |
| ECR | the Secret item at `/kaniko/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`) | IRSA |
| Artifact Registry | key file mounted, `GOOGLE_APPLICATION_CREDENTIALS` set | Workload Identity |
| ACR | (not used) | Azure Workload Identity (pod label) |
| any | `kaniko_docker_config_secret` mounted at `/kaniko/.docker` | anonymous push |

Kaniko's executor resolves ECR, Google and ACR credentials by host name itself; nothing here
writes a registry password into a ConfigMap (W&B's agent does).

The name is derived from the image tag, not the run: two runs needing the same image map to the
same Job, so a second create adopts the first (409) instead of building twice.

The digest Kaniko pushed is how the agent knows what it built (`model/digest_record.py`):
`--digest-file=/dev/termination-log` makes kubelet report it as the container's termination
message. That flag, the container's termination message path and its `File` policy are fixed:
`kaniko-config` cannot move them (an overlay flag of that name is ignored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch_agent.model import labels
from launch_agent.model.build import BuildRequest, Destination, RegistryKind
from launch_agent.model.build_source import check_build_arg
from launch_agent.model.config import BuilderConfig
from launch_agent.render.merge import merge

IMAGE_TAG = labels.PREFIX + "image-tag"
COMPONENT = "app.kubernetes.io/component"
CONTAINER = "kaniko"
DOCKER_CONFIG_DIR = "/kaniko/.docker"
DIGEST_FILE = "/dev/termination-log"
# Ours whatever `kaniko-config` says: the agent reads the pushed digest from this file.
FIXED_FLAGS = frozenset({"--digest-file"})
DEFAULT_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "1", "memory": "2Gi"},
    "limits": {"cpu": "2", "memory": "4Gi"},
}


@dataclass(frozen=True, slots=True)
class KanikoSettings:
    """Where and how build Jobs run; built once from `AgentConfig`."""

    builder: BuilderConfig
    namespace: str
    service_account: str | None = None
    docker_config_secret: str | None = None
    deadline_seconds: int = 1800
    ttl_seconds: int = 600
    cache: bool = True
    # PVC contexts: the claim the agent wrote the context into, mounted at /context.
    pvc_claim: str | None = None
    # Azure Blob contexts: the Secret (key `password`) with the storage account key.
    azure_key_secret: str | None = None


def job_name(prefix: str, tag: str) -> str:
    """`<build-job-name>-<tag>`, cut to a valid 63-character name."""
    head = prefix[: 63 - len(tag) - 1].rstrip("-.")
    return f"{head}-{tag}"


def kaniko_args(
    context_uri: str, image: str, cache_repo: str, cache: bool, overlay_args: list[str]
) -> list[str]:
    """Our flags, then the overlay's: an overlay flag replaces ours of the same name."""
    ours = {
        "--context": context_uri,
        "--dockerfile": "Dockerfile",
        "--destination": image,
        "--cache": "true" if cache else "false",
        "--cache-repo": f"{cache_repo}/cache",
        "--snapshot-mode": "redo",
        "--compressed-caching": "false",
        "--digest-file": DIGEST_FILE,
    }
    extra: list[str] = []
    for arg in overlay_args:
        flag, eq, value = arg.partition("=")
        if flag in FIXED_FLAGS:
            continue
        if eq and flag in ours:
            ours[flag] = value
        else:
            extra.append(arg)
    return [f"{flag}={value}" for flag, value in ours.items()] + extra


def _build_args(pairs: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Checked `--build-arg` pairs: each is one argv element of Kaniko whatever its value, but
    a key that is not an identifier (`X --destination=evil`) is refused, not passed on."""
    return [check_build_arg(k, v, "build arguments") for k, v in pairs]


def _credentials(
    dest: Destination, builder: BuilderConfig, docker_secret: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """(env, volumes, mounts, pod labels) giving Kaniko push access to `dest`."""
    env: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    pod_labels: dict[str, str] = {}
    secret = builder.secret_name
    key = builder.secret_key
    if dest.kind is RegistryKind.ECR:
        env.append({"name": "AWS_REGION", "value": dest.region})
        if secret and key:
            volumes.append(_secret_volume("aws-credentials", secret, key, "credentials"))
            mounts.append(
                {"name": "aws-credentials", "mountPath": "/kaniko/.aws", "readOnly": True}
            )
            env.append({"name": "AWS_SHARED_CREDENTIALS_FILE", "value": "/kaniko/.aws/credentials"})
    elif dest.kind is RegistryKind.GAR:
        if secret and key:
            volumes.append(_secret_volume("gcp-credentials", secret, key, "key.json"))
            mounts.append({"name": "gcp-credentials", "mountPath": "/secret/gcp", "readOnly": True})
            env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/secret/gcp/key.json"})
    elif dest.kind is RegistryKind.ACR:
        pod_labels["azure.workload.identity/use"] = "true"
    if docker_secret:
        volumes.append(
            _secret_volume("docker-config", docker_secret, ".dockerconfigjson", "config.json")
        )
        mounts.append({"name": "docker-config", "mountPath": DOCKER_CONFIG_DIR, "readOnly": True})
    return env, volumes, mounts, pod_labels


def _context_access(
    context_uri: str,
    settings: KanikoSettings,
    env: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> None:
    """What Kaniko needs to read the context (wandb's kaniko_builder.py does the same)."""
    if context_uri.startswith("tar:///context/") and settings.pvc_claim:
        claim = {"claimName": settings.pvc_claim, "readOnly": True}
        volumes.append({"name": "kaniko-pvc", "persistentVolumeClaim": claim})
        mounts.append({"name": "kaniko-pvc", "mountPath": "/context", "readOnly": True})
    elif context_uri.startswith("https://") and settings.azure_key_secret:
        ref = {"name": settings.azure_key_secret, "key": "password"}
        env.append({"name": "AZURE_STORAGE_ACCESS_KEY", "valueFrom": {"secretKeyRef": ref}})


def _secret_volume(name: str, secret: str, key: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "secret": {"secretName": secret, "items": [{"key": key, "path": path}]},
    }


def kaniko_job(
    request: BuildRequest,
    dest: Destination,
    context_uri: str,
    settings: KanikoSettings,
) -> dict[str, Any]:
    """The build Job for `request`; `kaniko-config` is merged over it (ours wins on identity)."""
    builder = settings.builder
    tag = request.tag
    name = job_name(builder.build_job_name, tag)
    job_labels = {
        labels.AGENT: request.agent,
        labels.WANDB_AGENT: request.agent,
        IMAGE_TAG: tag,
        COMPONENT: "image-build",
    }
    if labels.is_label_value(request.run_id):
        job_labels[labels.RUN_ID] = request.run_id
        job_labels[labels.WANDB_RUN_ID] = request.run_id
    annotations = {labels.PREFIX + "image": request.image}
    if request.run_queue_item:
        annotations[labels.RUN_QUEUE_ITEM_ID] = request.run_queue_item
    overlay = dict(builder.kaniko_config or {})
    overlay_args = _overlay_container(overlay).get("args") or []
    env, volumes, mounts, pod_labels = _credentials(dest, builder, settings.docker_config_secret)
    _context_access(context_uri, settings, env, volumes, mounts)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": builder.kaniko_image,
        "args": kaniko_args(
            context_uri, request.image, dest.uri, settings.cache, list(overlay_args)
        )
        + [f"--build-arg={k}={v}" for k, v in _build_args(request.build_args)],
        "resources": DEFAULT_RESOURCES,
        # Root is required (see the module docstring); escalation beyond it is not.
        "securityContext": {"allowPrivilegeEscalation": False, "runAsUser": 0},
        "terminationMessagePath": DIGEST_FILE,
        "terminationMessagePolicy": "File",
    }
    if env:
        container["env"] = env
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    if volumes:
        pod["volumes"] = volumes
    if platform := builder.platform:
        pod["nodeSelector"] = {"kubernetes.io/arch": platform.split("/")[1]}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": job_labels,
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.deadline_seconds,
            "ttlSecondsAfterFinished": settings.ttl_seconds,
            "template": {
                "metadata": {"labels": {**job_labels, **pod_labels}},
                "spec": pod,
            },
        },
    }
    # The overlay may tune anything (resources, node selectors, tolerations, deadlines) except
    # what ties the Job to this build: its name, namespace, labels, image and flags.
    _overlay_container(overlay).pop("args", None)
    merged = merge(job, _without_identity(overlay))
    merged["metadata"]["name"] = name
    merged["metadata"]["namespace"] = settings.namespace
    merged["metadata"]["labels"] = {**merged["metadata"].get("labels", {}), **job_labels}
    merged["spec"]["backoffLimit"] = 0
    first = merged["spec"]["template"]["spec"]["containers"][0]
    first["image"] = builder.kaniko_image
    first["args"] = container["args"]
    first["terminationMessagePath"] = DIGEST_FILE
    first["terminationMessagePolicy"] = "File"
    return merged


def _overlay_container(overlay: dict[str, Any]) -> dict[str, Any]:
    """The overlay's (only) container, copied into `overlay` so it can be edited safely."""
    spec = overlay.get("spec")
    if not isinstance(spec, Mapping):
        return {}
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if not isinstance(containers, list) or not containers:
        return {}
    first = dict(containers[0])
    overlay["spec"] = {
        **spec,
        "template": {**template, "spec": {**pod, "containers": [first]}},  # type: ignore[dict-item]
    }
    first.setdefault("name", CONTAINER)
    return first


def _without_identity(overlay: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(overlay)
    out.pop("apiVersion", None)
    out.pop("kind", None)
    meta = dict(out.get("metadata") or {})
    meta.pop("name", None)
    meta.pop("namespace", None)
    if meta:
        out["metadata"] = meta
    else:
        out.pop("metadata", None)
    return out
