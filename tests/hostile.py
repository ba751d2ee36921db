"""Hostile submitter input drawn from the real schemas, for the property and end-to-end tests.

A submitter controls `runSpec`: the `resource_args.kubernetes` manifest layer, `overrides`, the
run name. This module draws such input by walking the schemas the operators and the API server
read: the Kubernetes OpenAPI definitions shipped with `kubernetes-validate` (PodSpec,
Container, Volume, ...) and the CRD schemas in `launch_agent/render/schemas/crds/`. The walk
is biased towards the fields that matter for security (securityContext, volumes, env, service
accounts, namespaces, the operators' extra pods) and towards hostile values: `$(WANDB_API_KEY)`,
`..`, `-`-leading strings, huge numbers, and values of the wrong type (`{}`, `[]`, `null`).

The drawing goes through a `Chooser`, so the same walk serves hypothesis (`HypothesisChooser`,
shrinkable) and the end-to-end test's fixed-seed generator (`RandomChooser`).
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = ROOT / "launch_agent" / "render" / "schemas" / "crds"
API_KEY_SECRET = "wandb-api-key-launch-agent"


class Chooser(Protocol):
    def pick(self, options: Sequence[T]) -> T: ...
    def below(self, n: int) -> int: ...  # 0 <= result < n
    def chance(self, percent: int) -> bool: ...


class RandomChooser:
    def __init__(self, seed: int, ints: Sequence[int] | None = None) -> None:
        self.rng = random.Random(seed)
        # The integers to draw; the end-to-end test keeps them small, because the sandbox's
        # operators create one object per replica even while a workload is suspended.
        self.ints = tuple(ints) if ints is not None else HOSTILE_INTS

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def below(self, n: int) -> int:
        return self.rng.randrange(n)

    def chance(self, percent: int) -> bool:
        return self.rng.randrange(100) < percent


class HypothesisChooser:
    """Draws through hypothesis' `data.draw`, so failures shrink (towards fewer, earlier picks)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st

        self.draw = draw
        self.st = st

    def pick(self, options: Sequence[T]) -> T:
        return options[self.below(len(options))]

    def below(self, n: int) -> int:
        result: int = self.draw(self.st.integers(0, n - 1))
        return result

    def chance(self, percent: int) -> bool:
        # Shrinks towards 0, i.e. towards "no": smaller counterexamples.
        return self.below(100) >= 100 - percent


# ----------------------------------------------------------------------------- schemas


@cache
def k8s_definitions() -> dict[str, Any]:
    """The newest strict OpenAPI definitions `kubernetes-validate` ships."""
    base = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    versions = [p.name for p in base.iterdir() if p.name.endswith("-local-strict")]

    def key(name: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", name))

    newest = max(versions, key=key)
    defs: dict[str, Any] = json.loads((base / newest / "_definitions.json").read_text())["$defs"]
    return defs


def k8s(name: str) -> dict[str, Any]:
    """A definition by its short name: `PodSpec`, `Container`, `Volume`, ..."""
    schema: dict[str, Any] = k8s_definitions()[f"io.k8s.api.core.v1.{name}"]
    return schema


@cache
def crd_schema(file_stem: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CRD_DIR / f"{file_stem}.json").read_text())
    return schema


CRD_FILES = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobsets.jobset.x-k8s.io_v1alpha2",
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjobs.kubeflow.org_v1",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjobs.trainer.kubeflow.org_v1alpha1",
    (
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
    ): "leaderworkersets.leaderworkerset.x-k8s.io_v1",
    ("ray.io/v1", "RayJob"): "rayjobs.ray.io_v1",
    ("batch.volcano.sh/v1alpha1", "Job"): "jobs.batch.volcano.sh_v1alpha1",
}


def workload_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The schema of a whole workload of this kind (batch/v1 Job from the OpenAPI)."""
    if (api_version, kind) == ("batch/v1", "Job"):
        schema: dict[str, Any] = k8s_definitions()["io.k8s.api.batch.v1.Job"]
        return schema
    return crd_schema(CRD_FILES[(api_version, kind)])


def _resolve(schema: Any) -> dict[str, Any]:
    for _ in range(50):
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return schema
        schema = k8s_definitions().get(ref.rpartition("/")[2], {})
    return {}


# ----------------------------------------------------------------------------- values

# Property names the walk prefers: what enforcement and the guarantees are about, and the
# structure that leads to it.
SECURITY_FIELDS = frozenset(
    {
        "spec",
        "template",
        "metadata",
        "containers",
        "initContainers",
        "ephemeralContainers",
        "securityContext",
        "privileged",
        "allowPrivilegeEscalation",
        "capabilities",
        "add",
        "drop",
        "runAsUser",
        "runAsNonRoot",
        "runAsGroup",
        "seccompProfile",
        "appArmorProfile",
        "seLinuxOptions",
        "procMount",
        "sysctls",
        "windowsOptions",
        "hostProcess",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "ports",
        "hostPort",
        "volumes",
        "volumeMounts",
        "hostPath",
        "path",
        "subPathExpr",
        "projected",
        "sources",
        "serviceAccountToken",
        "secret",
        "secretName",
        "env",
        "envFrom",
        "valueFrom",
        "secretKeyRef",
        "secretRef",
        "value",
        "serviceAccountName",
        "serviceAccount",
        "automountServiceAccountToken",
        "imagePullSecrets",
        "image",
        "command",
        "args",
        "namespace",
        "labels",
        "annotations",
        "replicatedJobs",
        "pytorchReplicaSpecs",
        "Master",
        "Worker",
        "tasks",
        "rayClusterSpec",
        "headGroupSpec",
        "workerGroupSpecs",
        "submitterPodTemplate",
        "submissionMode",
        "autoscalerOptions",
        "enableInTreeAutoscaling",
        "clusterSelector",
        "gcsFaultToleranceOptions",
        "redisPassword",
        "leaderWorkerTemplate",
        "leaderTemplate",
        "workerTemplate",
        "trainer",
        "initializer",
        "dataset",
        "model",
        "runtimeRef",
        "runtimePatches",
        "trainingRuntimeSpec",
        "resources",
        "limits",
    }
)
NAMES = (
    "main",
    "pytorch",
    "ray-head",
    "ray-worker",
    "leader",
    "worker",
    "master",
    "gpu",
    "launch0",
)
HOSTILE_STRINGS = (
    "$(WANDB_API_KEY)",
    "x$(WANDB_API_KEY)x",
    "$$(WANDB_API_KEY)",
    "${WANDB_API_KEY}",
    "${run_name}",
    "${image_uri}",
    "../../etc/shadow",
    "/",
    "-c",
    "--upload-pack=touch /tmp/pwned",
    "kube-system",
    "",
    "Unconfined",
    "unconfined",
    "SYS_ADMIN",
    "ALL",
    "0",
    "true",
    "a" * 300,
    "☃\x00",
)
FIELD_VALUES: dict[str, tuple[Any, ...]] = {
    "name": (*NAMES, "WANDB_API_KEY", "WANDB_NAME", "other-team-secret", API_KEY_SECRET),
    "path": ("/", "/etc", "/data/../etc", "..", "/var/run/docker.sock", "relative/x"),
    "type": ("Unconfined", "RuntimeDefault", "Localhost", "spc_t", "Directory", ""),
    "procMount": ("Unmasked", "Default"),
    "namespace": ("kube-system", "default", "ml-training"),
    "secretName": (API_KEY_SECRET, "other-team-secret"),
    "serviceAccountName": ("default", "cluster-admin", "training-data-reader"),
    "serviceAccount": ("default", "cluster-admin"),
    "image": ("img:1", "-x", "busybox", ""),
    "submissionMode": ("K8sJobMode", "HTTPMode", "SidecarMode", "InteractiveMode"),
    "key": ("password", "token", "nvidia.com/gpu"),
    "user": ("root", "system_u"),
    "role": ("sysadm_r",),
    "level": ("s0:c1",),
}
CAPABILITIES = ("SYS_ADMIN", "ALL", "NET_BIND_SERVICE", "NET_RAW", "sys_admin", "CAP_SYS_ADMIN")
RESERVED_KEYS = (
    "kueue.x-k8s.io/queue-name",
    "kueue.x-k8s.io/priority-class",
    "launch-agent.io/agent",
    "launch-agent.io/run-queue-item",
    "container.apparmor.security.beta.kubernetes.io/main",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/main",
    "team",
)
HOSTILE_INTS = (0, 1, -1, 1000, 2**31, 2**63, 10**30)
WRONG_TYPES: tuple[Any, ...] = ({}, [], None, "x", 0, True, [{}], "$(WANDB_API_KEY)")
MAX_DEPTH = 14


def _types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, list):
        return [x for x in t if x != "null"] or ["null"]
    if isinstance(t, str):
        return [t]
    if "properties" in schema or "additionalProperties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    return []


def draw(ch: Chooser, schema: Any, name: str = "", depth: int = 0) -> Any:
    """One value for `schema` (found at property `name`), biased to hostile values."""
    s = _resolve(schema)
    for key in ("oneOf", "anyOf"):
        if isinstance(s.get(key), list) and s[key]:
            s = {**s, **_resolve(ch.pick(s[key]))}
            s.pop(key, None)
    if ch.chance(6):
        return copy.deepcopy(ch.pick(WRONG_TYPES))
    if s.get("x-kubernetes-int-or-string"):
        return ch.pick(_ints(ch)) if ch.chance(50) else _string(ch, name)
    if isinstance(s.get("enum"), list) and s["enum"] and ch.chance(80):
        return ch.pick(s["enum"])
    types = _types(s)
    kind = ch.pick(types) if types else "scalar"
    if kind == "object":
        return _object(ch, s, name, depth)
    if kind == "array":
        return _array(ch, s, name, depth)
    if kind == "string":
        return _string(ch, name)
    if kind == "integer":
        return ch.pick(_ints(ch))
    if kind == "number":
        return ch.pick((0.5, 1e308, -1.0))
    if kind == "boolean":
        return ch.chance(70)
    return ch.pick((*HOSTILE_STRINGS[:6], *_ints(ch)[:3], True))


def _ints(ch: Chooser) -> tuple[int, ...]:
    ints: tuple[int, ...] = getattr(ch, "ints", HOSTILE_INTS)
    return ints


def _string(ch: Chooser, name: str) -> str:
    pool = FIELD_VALUES.get(name)
    if pool and ch.chance(70):
        value: str = ch.pick(pool)
        return value
    return ch.pick(HOSTILE_STRINGS)


def _object(ch: Chooser, s: Mapping[str, Any], name: str, depth: int) -> dict[str, Any]:
    props = s.get("properties")
    out: dict[str, Any] = {}
    if depth >= MAX_DEPTH:
        return out
    if isinstance(props, dict) and props:
        names = sorted(props)
        preferred = [n for n in names if n in SECURITY_FIELDS]
        count = ch.below(4)
        for _ in range(count):
            key = ch.pick(preferred) if preferred and ch.chance(75) else ch.pick(names)
            out[key] = draw(ch, props[key], key, depth + 1)
        return out
    extra = s.get("additionalProperties")
    if extra is not None or s.get("x-kubernetes-preserve-unknown-fields"):
        value_schema = extra if isinstance(extra, dict) else {}
        keys: Sequence[str] = RESERVED_KEYS if name in ("labels", "annotations") else NAMES
        for _ in range(ch.below(3)):
            out[ch.pick(keys)] = draw(ch, value_schema, "", depth + 1)
    return out


def _array(ch: Chooser, s: Mapping[str, Any], name: str, depth: int) -> list[Any]:
    if depth >= MAX_DEPTH:
        return []
    if name in ("add", "drop"):
        return [ch.pick(CAPABILITIES) for _ in range(ch.below(3))]
    return [draw(ch, s.get("items", {}), name.rstrip("s"), depth + 1) for _ in range(ch.below(3))]


# ----------------------------------------------------------------------------- layers


def pod_template_paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths (keys and list indexes) of every mapping with `spec.containers` in `node`."""
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and "containers" in spec:
            yield path
        for k, v in node.items():
            yield from pod_template_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from pod_template_paths(v, (*path, i))


def layer_at(template: Any, path: Sequence[Any], value: Any) -> Any:
    """A layer that puts `value` at `path` of `template`: list items keep the template item's
    name (`name`, Ray's `groupName`), which is how the merge finds them."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        base = template[head] if isinstance(template, list) and head < len(template) else {}
        item = layer_at(base, rest, value)
        if isinstance(base, dict) and isinstance(item, dict):
            for key in ("name", "groupName"):
                if key in base:
                    item = {key: base[key], **item}
        return [item]
    base = template.get(head) if isinstance(template, dict) else None
    return {head: layer_at(base, rest, value)}


def pod_layer(ch: Chooser, template: Mapping[str, Any]) -> dict[str, Any]:
    """A hostile PodTemplateSpec fragment at one of the template's pod templates."""
    paths = list(pod_template_paths(template))
    if not paths:
        return {}
    where = ch.pick(paths)
    fragment = draw(ch, k8s_definitions()["io.k8s.api.core.v1.PodTemplateSpec"], "template")
    if isinstance(fragment, dict) and isinstance(fragment.get("spec"), dict):
        fragment["spec"].update(_pod_spec_bias(ch))
    result = layer_at(template, where, fragment)
    return result if isinstance(result, dict) else {}


def _pod_spec_bias(ch: Chooser) -> dict[str, Any]:
    """Direct draws of the pod-level fields, which a sparse walk reaches rarely."""
    spec = k8s("PodSpec")["properties"]
    out: dict[str, Any] = {}
    for _ in range(ch.below(3)):
        key = ch.pick(
            (
                "containers",
                "initContainers",
                "volumes",
                "securityContext",
                "hostNetwork",
                "serviceAccountName",
                "automountServiceAccountToken",
                "imagePullSecrets",
            )
        )
        out[key] = draw(ch, spec[key], key, 2)
    return out


def container_field_layer(
    ch: Chooser, template: Mapping[str, Any], field: str, schema: Any
) -> dict[str, Any]:
    """A layer setting `field` of containers (the template's, by name, or new ones)."""
    paths = list(pod_template_paths(template))
    if not paths:
        return {}
    where = ch.pick(paths)
    tmpl: Any = template
    for step in where:
        tmpl = tmpl[step]
    existing = [c.get("name") for c in tmpl["spec"]["containers"] if isinstance(c, dict)]
    containers = []
    for _ in range(1 + ch.below(2)):
        cname = ch.pick([n for n in existing if n] or list(NAMES))
        containers.append({"name": cname, field: draw(ch, schema, field, 3)})
    result = layer_at(template, where, {"spec": {"containers": containers}})
    return result if isinstance(result, dict) else {}


def pod_field_layer(
    ch: Chooser, template: Mapping[str, Any], field: str, schema: Any
) -> dict[str, Any]:
    paths = list(pod_template_paths(template))
    if not paths:
        return {}
    result = layer_at(template, ch.pick(paths), {"spec": {field: draw(ch, schema, field, 2)}})
    return result if isinstance(result, dict) else {}


def whole_layer(ch: Chooser, template: Mapping[str, Any]) -> Any:
    """A layer drawn from the workload's own schema (CRD or OpenAPI), from the root."""
    schema = workload_schema(str(template.get("apiVersion")), str(template.get("kind")))
    root = _resolve(schema)
    props = root.get("properties", {})
    layer: dict[str, Any] = {"spec": draw(ch, props.get("spec", {}), "spec", 0)}
    if ch.chance(30):
        layer["metadata"] = draw(ch, props.get("metadata", {}), "metadata", 0)
    if ch.chance(5):
        return copy.deepcopy(ch.pick(WRONG_TYPES))  # the whole layer of the wrong type
    return layer


def hostile_overrides(ch: Chooser) -> dict[str, Any]:
    """`runSpec.overrides` and the run name, all copied from the item into the pods."""
    run: dict[str, Any] = {}
    if ch.chance(50):
        run["name"] = ch.pick(HOSTILE_STRINGS)
    overrides: dict[str, Any] = {}
    if ch.chance(50):
        overrides["args"] = (
            [ch.pick(HOSTILE_STRINGS) for _ in range(ch.below(3))]
            if ch.chance(80)
            else copy.deepcopy(ch.pick(WRONG_TYPES))
        )
    if ch.chance(30):
        overrides["entry_point"] = [ch.pick(HOSTILE_STRINGS) for _ in range(1 + ch.below(2))]
    if ch.chance(30):
        overrides["run_config"] = {ch.pick(HOSTILE_STRINGS): ch.pick(HOSTILE_STRINGS)}
    if overrides:
        run["overrides"] = overrides
    return run


# ----------------------------------------------------------------------------- attack classes

NARROW_SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: narrow
spec:
  queues: [q-narrow]
  namespace: default
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              env:
                - {name: MY_ENV, value: from-the-admin}
              resources:
                requests: {cpu: "1", memory: 1Gi}
  overridable:
    - "**.containers[*].env"
    - "**.volumes"
    - "**.resources"
    - overrides.args
    - overrides.run_config
"""
EXAMPLES = ROOT / "queue-specs"


def queue_specs(
    *, namespace: str = "default", kueue: str | None = None, skip: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """queue → raw queue spec: each example spec granting `**` (`open-<stem>`), and q-narrow.

    `kueue` names a LocalQueue for every kind Kueue can suspend, so their workloads are
    created suspended (nothing runs them); `skip` leaves out examples by stem.
    """
    out = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if path.stem in skip:
            continue
        raw = yaml.safe_load(path.read_text())
        queue = f"open-{path.stem}"
        raw["metadata"]["name"] = queue
        raw["spec"]["queues"] = [queue]
        raw["spec"]["namespace"] = namespace
        template = raw["spec"]["template"]
        if isinstance(template.get("kubernetes"), dict):
            template["kubernetes"].pop("namespace", None)
        template.pop("namespace", None)
        raw["spec"]["overridable"] = ["**"]
        kind = template_of(raw).get("kind")
        if kueue and kind not in ("LeaderWorkerSet",) and path.stem != "volcano-job":
            raw["spec"]["kueue"] = {"queueName": kueue}
        out[queue] = raw
    narrow = yaml.safe_load(NARROW_SPEC)
    narrow["spec"]["namespace"] = namespace
    if kueue:
        narrow["spec"]["kueue"] = {"queueName": kueue}
    out["q-narrow"] = narrow
    return out


def template_of(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The workload template of a raw queue spec, in its plain form (apiVersion/kind set)."""
    t = raw["spec"]["template"]
    t = t["kubernetes"] if "kubernetes" in t and "spec" not in t else t
    t = copy.deepcopy(t)
    t.setdefault("apiVersion", "batch/v1")
    t.setdefault("kind", "Job")
    return dict(t)


Spec = dict[str, Any]


def run_spec(layer: Any = None, **run: Any) -> Spec:
    """A runSpec with an image (no build), the given layer and runSpec keys (None removes)."""
    spec: Spec = {
        "entity": "ent",
        "project": "proj",
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example/train:1"},
    }
    if layer is not None:
        spec["resource_args"] = {"kubernetes": layer}
    for key, value in run.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


def _job_pod(**pod: Any) -> Any:
    return {"spec": {"template": {"spec": pod}}}


def _main(**container: Any) -> Any:
    return _job_pod(containers=[{"name": "main", **container}])


SECRET_ENV = {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db-admin", "key": "pw"}}}
TOKEN_VOLUME = {
    "name": "tok",
    "projected": {"sources": [{"serviceAccountToken": {"path": "token", "audience": "vault"}}]},
}

# The attack classes of the security review: class → [(queue, runSpec maker)]. Queues are
# those of `queue_specs` (`open-<example>` grants `**`; `q-narrow` grants env, volumes and
# resources). `ch` varies what a class can vary.
ATTACKS: dict[str, list[tuple[str, Callable[[Chooser], Spec]]]] = {
    "git-args": [
        (
            "open-job",
            lambda ch: run_spec(
                docker=None,
                job="ent/proj/job-x:v1",
                git={"repo": ch.pick(["--upload-pack=touch /tmp/p", "-c", "ext::sh -c id"])},
            ),
        ),
    ],
    "type-change": [
        ("open-job", lambda ch: run_spec(_main(image={}))),
        ("open-job", lambda ch: run_spec(_job_pod(containers={}))),
        ("open-job", lambda ch: run_spec(_main(env={}))),
        ("open-job", lambda ch: run_spec(None, overrides={"args": {}})),
        ("q-narrow", lambda ch: run_spec(_main(env={}))),
        ("q-narrow", lambda ch: run_spec(_job_pod(containers={}))),
        ("q-narrow", lambda ch: run_spec(_main(image={"$ne": ""}))),
        ("q-narrow", lambda ch: run_spec({"spec": {"template": {"spec": []}}})),
        ("q-narrow", lambda ch: run_spec(None, overrides={"args": []})),
    ],
    "api-key-expansion": [
        ("open-job", lambda ch: run_spec(name="$(WANDB_API_KEY)")),
        ("q-narrow", lambda ch: run_spec(None, overrides={"args": ["--x=$(WANDB_API_KEY)"]})),
        ("q-narrow", lambda ch: run_spec(_main(env=[{"name": "X", "value": "$(WANDB_API_KEY)"}]))),
        ("open-trainjob", lambda ch: run_spec(name="$(WANDB_API_KEY)")),
        ("open-rayjob", lambda ch: run_spec(name="a $(WANDB_API_KEY) b")),
    ],
    "secret-read": [
        ("q-narrow", lambda ch: run_spec(_main(env=[SECRET_ENV]))),
        ("q-narrow", lambda ch: run_spec(_main(envFrom=[{"secretRef": {"name": "db-admin"}}]))),
        ("q-narrow", lambda ch: run_spec(_job_pod(volumes=[TOKEN_VOLUME]))),
        (
            "q-narrow",
            lambda ch: run_spec(_job_pod(volumes=[{"name": "s", "secret": {"secretName": "db"}}])),
        ),
        ("open-job", lambda ch: run_spec(_job_pod(automountServiceAccountToken=True))),
        ("open-job", lambda ch: run_spec(_job_pod(imagePullSecrets=[{"name": "other-team"}]))),
        (
            "open-trainjob",
            lambda ch: run_spec(
                {"spec": {"initializer": {"dataset": {"secretRef": {"name": "db"}}}}}
            ),
        ),
        (
            "open-rayjob",
            lambda ch: run_spec(
                {
                    "spec": {
                        "rayClusterSpec": {
                            "gcsFaultToleranceOptions": {
                                "redisAddress": "redis:6379",
                                "redisPassword": {"valueFrom": SECRET_ENV["valueFrom"]},
                            }
                        }
                    }
                }
            ),
        ),
    ],
    "template-escape": [
        (
            "open-volcano-job",
            lambda ch: run_spec(
                {
                    "spec": {
                        "tasks": [
                            {
                                "name": "worker",
                                "template": {"spec": {"containers": [{"name": "main"}]}},
                            },
                            {
                                "name": "worker",
                                "replicas": 1,
                                "template": {
                                    "spec": {
                                        "hostNetwork": True,
                                        "containers": [
                                            {
                                                "name": "x",
                                                "image": "busybox",
                                                "securityContext": {"privileged": True},
                                            }
                                        ],
                                    }
                                },
                            },
                        ]
                    }
                }
            ),
        ),
        (
            "open-rayjob",
            lambda ch: run_spec(
                {
                    "spec": {
                        "rayClusterSpec": {
                            "enableInTreeAutoscaling": True,
                            "autoscalerOptions": {"securityContext": {"privileged": True}},
                        }
                    }
                }
            ),
        ),
        (
            "open-rayjob",
            lambda ch: run_spec({"spec": {"clusterSelector": {"ray.io/cluster": "x"}}}),
        ),
        (
            "open-trainjob",
            lambda ch: run_spec({"spec": {"runtimeRef": {"name": "privileged-runtime"}}}),
        ),
        (
            "open-job",
            lambda ch: run_spec({"spec": {"template": {"metadata": {"namespace": "kube-system"}}}}),
        ),
    ],
    "hostpath-dotdot": [
        (
            "q-narrow",
            lambda ch: run_spec(
                _job_pod(volumes=[{"name": "h", "hostPath": {"path": "/data/../etc"}}])
            ),
        ),
        ("q-narrow", lambda ch: run_spec(_job_pod(volumes=[{"name": "h", "hostPath": "x"}]))),
    ],
    "macros": [
        ("open-job", lambda ch: run_spec(_main(image="${WANDB_API_KEY}"))),
        (
            "open-job",
            lambda ch: run_spec(_job_pod(serviceAccountName="${run_name}"), name="cluster-admin"),
        ),
        (
            "open-job",
            lambda ch: run_spec({"metadata": {"labels": {"x": "${run_name}"}}}, name="a b/$(c)"),
        ),
    ],
    "seccomp-annotation": [
        (
            "open-job",
            lambda ch: run_spec(
                {
                    "spec": {
                        "template": {
                            "metadata": {
                                "annotations": {
                                    ch.pick(
                                        [
                                            "seccomp.security.alpha.kubernetes.io/pod",
                                            "container.seccomp.security.alpha.kubernetes.io/main",
                                        ]
                                    ): "unconfined"
                                }
                            }
                        }
                    }
                }
            ),
        ),
    ],
    "capability-string": [
        (
            "open-job",
            lambda ch: run_spec(_main(securityContext={"capabilities": {"add": "SYS_ADMIN"}})),
        ),
        (
            "open-job",
            lambda ch: run_spec(_main(securityContext={"capabilities": {"add": ["sys_admin"]}})),
        ),
    ],
    "reserved-labels": [
        (
            "open-job",
            lambda ch: run_spec({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "vip"}}}),
        ),
        (
            "open-job-kueue",
            lambda ch: run_spec({"metadata": {"labels": {"kueue.x-k8s.io/priority-class": "top"}}}),
        ),
        (
            "open-job",
            lambda ch: run_spec(
                {"spec": {"template": {"metadata": {"labels": {"launch-agent.io/agent": "x"}}}}}
            ),
        ),
    ],
    "huge-or-deep": [
        ("open-job", lambda ch: run_spec(_nested(ch.pick([200, 900])))),
        ("open-job", lambda ch: run_spec(_main(args=["a" * 1000] * 200))),
        ("open-job", lambda ch: run_spec(_main(resources={"limits": {"cpu": 10**30}}))),
    ],
    # Over the 1,000,000-byte payload limit. Not fed to the e2e test: the sandbox's GraphQL
    # server alone takes more than the guardrail's 100 ms to serve a 1 MB item.
    "huge-config": [
        ("open-job", lambda ch: run_spec(None, overrides={"run_config": {"k": "v" * 1_100_000}})),
    ],
}


def _nested(depth: int) -> Any:
    node: Any = {"leaf": 1}
    for _ in range(depth):
        node = {"spec": node}
    return node


def schema_item(ch: Chooser, specs: Mapping[str, Mapping[str, Any]]) -> tuple[str, Spec]:
    """A queue and a runSpec whose layer is drawn from that queue's schemas."""
    queue = ch.pick(sorted(specs))
    template = template_of(specs[queue])
    layer = whole_layer(ch, template) if ch.chance(50) else pod_layer(ch, template)
    spec = run_spec(layer)
    if queue != "q-narrow":
        spec.update(hostile_overrides(ch))
    return queue, spec
