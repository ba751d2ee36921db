"""Pods the workload's manifest does not spell out, and pod specs enforcement would miss.

Enforcement (`security.py`) restricts the pod templates `kinds.py` finds. That is every pod only
if (a) no pod spec hides elsewhere in the manifest, (b) the operator creates no pod of its own
from other fields, and (c) the pods are not defined by an object the agent never sees. This
module closes each case, per kind, and refuses what it cannot close with a message, instead of
leaving a pod unenforced:

| case | what happens |
| --- | --- |
| `containers` (or init/ephemeral) outside the kind's pod templates | refused |
| `metadata.namespace` anywhere below the workload's own metadata | removed |
| RayJob in K8sJobMode (the default), no `submitterPodTemplate` | default submitter written |
| RayJob `SidecarMode` | refused |
| RayJob `enableInTreeAutoscaling: true` | `autoscalerOptions.securityContext` restricted |
| RayJob `enableInTreeAutoscaling` not a boolean | refused |
| RayJob `clusterSelector` | refused |
| RayJob `rayClusterSpec.historyServerOptions` | refused |
| TrainJob `runtimeRef` not named in `security.trainingRuntimes` | refused |

In SidecarMode KubeRay adds its default submitter container (no securityContext) to the head
pod; with `clusterSelector` the job runs on a RayCluster someone else defined;
`historyServerOptions` adds a collector container (`BuildCollectorContainer`) whose
securityContext cannot be set; a TrainJob's pods come from its runtime. The init containers
KubeRay adds (`wait-gcs-ready`, TLS) copy the Ray container's securityContext, which is
enforced, so they need nothing here. The default submitter pod is written out as KubeRay
would create it, so it gets the same enforcement as every other template (and quota counts
it).

The KubeRay behaviour is modelled on ray-project/kuberay `ray-operator/controllers/ray/common/
pod.go` (`BuildAutoscalerContainer`, `mergeAutoscalerOverrides`: `autoscalerOptions` is
copied onto the sidecar), `common/job.go` (`GetSubmitterTemplate`,
`GetDefaultSubmitterContainer`), `common/pod.go` `BuildCollectorContainer` and the
`wait-gcs-ready` init container, and `rayjob_controller.go` (SidecarMode injects
`GetDefaultSubmitterContainer` into the head pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launch_agent.model.queue_spec import Problem, SecurityExceptions
from launch_agent.render.paths import Item, Path, format_path, get, item_label

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
RAY_SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
# KubeRay's `utils.SubmitterContainerName` and `GetDefaultSubmitterContainer` resources.
RAY_SUBMITTER_CONTAINER = "ray-job-submitter"
RAY_SUBMITTER_RESOURCES = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}


def looks_like_pod_spec(node: Any) -> bool:
    return isinstance(node, dict) and any(isinstance(node.get(k), list) for k in CONTAINER_LISTS)


def scan(
    manifest: dict[str, Any], templates: list[tuple[Any, Any]], hint: str
) -> tuple[list[Problem], list[Problem]]:
    """One walk of the manifest below the known pod templates: (problems, changes).

    Problems: every pod spec that is not the spec of a known template. Changes: every
    `metadata.namespace` below the workload's own metadata, removed (a pod template's own is
    removed by enforcement)."""
    known = {id(t) for _p, t in templates}
    problems = []
    changes = []
    stack: list[tuple[Path, Any]] = [((), manifest)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            if id(node) in known:
                continue  # enforced as a whole; nothing inside it is another pod
            if looks_like_pod_spec(node):
                problems.append(
                    Problem(
                        format_path(path) or "(root)",
                        f"holds containers but is not a pod template the agent enforces; {hint}",
                    )
                )
                continue
            meta = node.get("metadata")
            if path and isinstance(meta, dict) and "namespace" in meta:
                del meta["namespace"]
                changes.append(
                    Problem(
                        format_path((*path, "metadata", "namespace")),
                        "removed: everything runs in the queue spec's namespace",
                    )
                )
            for k, v in node.items():
                if isinstance(v, dict | list):
                    stack.append(((*path, str(k)), v))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, dict | list):
                    stack.append(((*path, Item(item_label(v, i))), v))
    return sorted(problems, key=lambda p: p.path), sorted(changes, key=lambda p: p.path)


# ----------------------------------------------------------------------------- RayJob


def ray_submission_mode(manifest: Mapping[str, Any]) -> Any:
    return get(manifest, ("spec", "submissionMode"), None) or "K8sJobMode"


def rayjob_refusals(manifest: Mapping[str, Any], sec: SecurityExceptions) -> list[Problem]:
    problems = []
    if get(manifest, ("spec", "clusterSelector")):
        problems.append(
            Problem(
                "spec.clusterSelector",
                "not allowed: the job would run on a RayCluster whose pods the agent did not"
                " render or restrict; describe the cluster in spec.rayClusterSpec",
            )
        )
    if get(manifest, ("spec", "rayClusterSpec", "historyServerOptions")) is not None:
        problems.append(
            Problem(
                "spec.rayClusterSpec.historyServerOptions",
                "not allowed: KubeRay adds a history-server collector container to every pod"
                " with no way to set its securityContext, so it cannot be restricted",
            )
        )
    autoscaling = get(manifest, ("spec", "rayClusterSpec", "enableInTreeAutoscaling"))
    if autoscaling is not None and not isinstance(autoscaling, bool):
        # Whether KubeRay adds the autoscaler container hangs on this flag: a lenient decoder
        # reading "true" as true would add one the enforcement did not restrict.
        problems.append(
            Problem(
                "spec.rayClusterSpec.enableInTreeAutoscaling",
                f"must be a boolean, not {type(autoscaling).__name__} {autoscaling!r}",
            )
        )
    mode = ray_submission_mode(manifest)
    if mode == "SidecarMode":
        problems.append(
            Problem(
                "spec.submissionMode",
                "SidecarMode is not allowed: KubeRay adds its own submitter container, without"
                " a securityContext, to the head pod; use K8sJobMode (the default) or HTTPMode",
            )
        )
    elif mode not in RAY_SUBMISSION_MODES:
        problems.append(
            Problem(
                "spec.submissionMode",
                f"{mode!r} is not one of {', '.join(RAY_SUBMISSION_MODES)}: the agent cannot"
                " tell which pods KubeRay would create",
            )
        )
    return problems


def rayjob_materialise(manifest: dict[str, Any]) -> None:
    """Write out the pods KubeRay would otherwise generate, so enforcement reaches them."""
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        return
    if ray_submission_mode(manifest) == "K8sJobMode" and not isinstance(
        spec.get("submitterPodTemplate"), dict
    ):
        head = get(spec, ("rayClusterSpec", "headGroupSpec", "template", "spec", "containers"))
        image = head[0].get("image") if isinstance(head, list) and head else None
        container: dict[str, Any] = {"name": RAY_SUBMITTER_CONTAINER}
        if isinstance(image, str):
            container["image"] = image
        container["resources"] = {k: dict(v) for k, v in RAY_SUBMITTER_RESOURCES.items()}
        spec["submitterPodTemplate"] = {
            "spec": {"restartPolicy": "Never", "containers": [container]}
        }
    rcs = spec.get("rayClusterSpec")
    if (
        isinstance(rcs, dict)
        and rcs.get("enableInTreeAutoscaling") is True
        and not isinstance(rcs.get("autoscalerOptions"), dict)
    ):
        rcs["autoscalerOptions"] = {}


def rayjob_operator_containers(manifest: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Containers KubeRay builds from workload fields: the autoscaler takes its
    securityContext, env, envFrom, image and mounts from `autoscalerOptions`."""
    rcs = get(manifest, ("spec", "rayClusterSpec"))
    if not isinstance(rcs, dict) or rcs.get("enableInTreeAutoscaling") is not True:
        return []
    options = rcs.get("autoscalerOptions")
    if not isinstance(options, dict):
        return []
    return [("spec.rayClusterSpec.autoscalerOptions", options)]


# ----------------------------------------------------------------------------- TrainJob


def trainjob_refusals(manifest: Mapping[str, Any], sec: SecurityExceptions) -> list[Problem]:
    ref = get(manifest, ("spec", "runtimeRef"))
    name = ref.get("name") if isinstance(ref, dict) else None
    if isinstance(name, str) and name in sec.training_runtimes:
        return []
    return [
        Problem(
            "spec.runtimeRef",
            f"runtime {name!r} is not in security.trainingRuntimes: a TrainJob's pods come from"
            " its (Cluster)TrainingRuntime, which the agent never sees; list the runtimes whose"
            " pod templates you keep restricted",
        )
    ]
