"""The sandbox checked against the real cluster: the same objects created through the API on
both, the end states compared field by field (issue 27 item 4).

A scenario creates its objects with a plain REST client (`KubeHTTP`, which talks to the
sandbox's API server and to kube-apiserver alike) in a namespace of its own on each side, and
waits for its end state. `snapshot` then reads what a user of the cluster sees (the Jobs' and
pods' metadata, spec and status, the Kueue Workloads' status, the namespace's Events, the
Status bodies of refused creates) and `normalise` takes out what legitimately varies between
two runs of one scenario (random name suffixes, uids, timestamps, resourceVersions, addresses,
node names, how often an Event repeated). `differences` lists every path where the two differ; the test
(`test_compare.py`) fails on any that `differences.KNOWN` does not explain.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from tests.cluster.world import Obj, until

KUEUE = "kueue.x-k8s.io/v1beta2"
OUTCOME = "sandbox.launch-agent.io/outcome"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"

# Fields whose value is an address, an identity or a moment: equal on no two runs.
DROPPED = frozenset(
    {
        "uid",
        "resourceVersion",
        "hostIP",
        "hostIPs",
        "podIP",
        "podIPs",
        "containerID",
        "imageID",
    }
)
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
# The characters of `generateName`'s suffix (apiserver `names.SimpleNameGenerator`).
_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
# How long a Workload waited (Kueue's admission Events), in whole seconds of the wall clock.
_WAITED = re.compile(r"(wait time since \w+ was )\d+s")
# client-go's correlator folds the 10th similar Event into one that says so; how many
# repeats a run has is not the model's to match.
_COMBINED = re.compile(r"^\(combined from similar events\): ")
# The service-account token volume the ServiceAccount admission plugin adds, named at random.
_TOKEN_VOLUME = re.compile(rf"\bkube-api-access-{_SUFFIX}\b")
# The nodes of both tiers (tests/cluster/conftest.py `NODES`), also where no pod names them.
_NODE = re.compile(r"\bsim-node-\d+\b")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# Events left out of the comparison: what a real cluster's add-ons say by chance, not what
# the scenario makes happen (docs/sandbox.md lists these with the known differences).
NOISE: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r'admission webhook "mpod\.kb\.io" denied the request: .* not found'),
        "Kueue's pod webhook (`mpod.kb.io`) sometimes refuses a Job's first pod because its"
        " informer has not seen the new Job yet; the Job controller's retry is admitted. A"
        " race of the real cluster's caches, which the sandbox has none of.",
    ),
]


@dataclass
class Side:
    """One cluster a scenario runs on: its client, its namespace, what it was refused."""

    tier: str  # "sandbox" | "real"
    http: KubeHTTP
    namespace: str
    refusals: dict[str, Obj] = field(default_factory=dict)
    cleanup: list[str] = field(default_factory=list)  # cluster-scoped paths to delete

    def path(self, api_version: str, plural: str, name: str = "") -> str:
        return path_of(api_version, plural, self.namespace, name)

    async def create(self, api_version: str, plural: str, body: Obj) -> Obj:
        return await self.http.create(self.path(api_version, plural), body)

    async def refused(self, label: str, api_version: str, plural: str, body: Obj) -> None:
        """A create that admission must refuse; its Status body is kept for the comparison."""
        try:
            await self.create(api_version, plural, body)
        except ApiError as exc:
            self.refusals[label] = exc.body or {"code": exc.status, "message": exc.message}
            return
        self.refusals[label] = {"admitted": True}

    async def items(self, api_version: str, plural: str) -> list[Obj]:
        got = await self.http.get(self.path(api_version, plural))
        return list(got.get("items") or [])

    async def job(self, name: str) -> Obj | None:
        return await self.http.find(self.path("batch/v1", "jobs", name))

    async def events(self) -> list[Obj]:
        return await self.items("v1", "events")


Run = Callable[[Side], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Run
    # The sandbox's Kueue model acts only on Workloads of queued jobs; read them only where
    # the scenario has some (the real cluster serves the CRD in every namespace).
    kueue: bool = False


# --- building blocks of scenarios ----------------------------------------------------------


def container(resources: Obj | None = None, **extra: Any) -> Obj:
    return {
        "name": "main",
        "image": "registry.example/train:1",
        "resources": resources or {"requests": {"cpu": "1", "memory": "1Gi"}},
        **extra,
    }


def job_body(
    name: str,
    outcome: str,
    *,
    spec: Obj | None = None,
    labels: dict[str, str] | None = None,
    pod: Obj | None = None,
) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}, "annotations": {OUTCOME: outcome}},
        "spec": {
            "backoffLimit": 0,
            **(spec or {}),
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [container()], **(pod or {})}
            },
        },
    }


def pod_body(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container()], **spec},
    }


def conditions(obj: Obj | None) -> dict[str, Obj]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


async def job_condition(side: Side, name: str, *types: str, within: float = 90) -> None:
    async def reached() -> bool:
        found = conditions(await side.job(name))
        return any(found.get(t, {}).get("status") == "True" for t in types)

    await until(reached, within=within, message=f"{side.tier}: Job {name} {'/'.join(types)}")


async def event(side: Side, reason: str, within: float = 60) -> None:
    async def seen() -> bool:
        return any(e.get("reason") == reason for e in await side.events())

    await until(seen, within=within, message=f"{side.tier}: an Event {reason}")


# --- what is compared ------------------------------------------------------------------------


async def snapshot(side: Side, scenario: Scenario) -> Obj:
    """What a user of the cluster sees of the scenario, before normalisation."""
    got: Obj = {
        "jobs": await side.items("batch/v1", "jobs"),
        "pods": await side.items("v1", "pods"),
        "events": await side.events(),
        "refusals": dict(side.refusals),
        "workloads": await side.items(KUEUE, "workloads") if scenario.kueue else [],
    }
    return got


def _renamer(side: Side, raw: Obj) -> Callable[[str], str]:
    """Names that differ between two runs, to stable stand-ins: the namespace, pods by their
    Job and creation order, Workloads by their job, nodes."""
    names: dict[str, str] = {side.namespace: "NS"}
    # A pod is known by its object or, once deleted, by the Events about it; its birth is its
    # creation or its first Event.
    born: dict[str, tuple[str, str]] = {}
    pods = {p["metadata"]["name"] for p in raw["pods"]}
    for pod in raw["pods"]:
        meta = pod["metadata"]
        if meta.get("generateName"):
            owner = (meta.get("labels") or {}).get("job-name") or meta["generateName"][:-1]
            born[meta["name"]] = (meta.get("creationTimestamp") or "", owner)
    for e in raw["events"]:
        regarding = e.get("involvedObject") or {}
        name = str(regarding.get("name") or "")
        found = re.fullmatch(rf"(.+)-{_SUFFIX}", name)
        if regarding.get("kind") == "Pod" and found and name not in pods:
            at = str(e.get("firstTimestamp") or e.get("eventTime") or "")
            born[name] = min(born.get(name, (at, found.group(1))), (at, found.group(1)))
    counts: dict[str, int] = {}
    for name, (_, owner) in sorted(born.items(), key=lambda kv: (kv[1][0], kv[0])):
        counts[owner] = counts.get(owner, 0) + 1
        names[name] = f"{owner}-POD{counts[owner]}"
    for workload in raw["workloads"]:
        refs = workload["metadata"].get("ownerReferences") or [{}]
        names[workload["metadata"]["name"]] = f"WORKLOAD-{refs[0].get('name', '')}"
    # Longest first, so a name that contains another (a pod name holds its Job's) wins.
    ordered = sorted(names, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(n) for n in ordered)) if ordered else None

    # A name the API server generated for a pod it then refused (a FailedCreate message)
    # names no pod that exists.
    owners = {j["metadata"]["name"] for j in raw["jobs"]} | {
        str((e.get("involvedObject") or {}).get("name"))
        for e in raw["events"]
        if (e.get("involvedObject") or {}).get("kind") == "Job"
    }
    jobs = sorted(owners, key=len, reverse=True)
    generated = (
        re.compile(rf"\b({'|'.join(re.escape(j) for j in jobs)})-{_SUFFIX}\b") if jobs else None
    )

    def rename(text: str) -> str:
        if pattern is not None:
            text = pattern.sub(lambda m: names[m.group(0)], text)
        if generated is not None:
            text = generated.sub(lambda m: f"{m.group(1)}-GENERATED", text)
        text = _WAITED.sub(r"\1Ns", _NODE.sub("NODE", text))
        text = _TOKEN_VOLUME.sub("kube-api-access-GENERATED", text)
        return _UID.sub("UID", _TIME.sub("TIME", text))

    return rename


def _clean(value: Any, rename: Callable[[str], str]) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v, rename) for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list):
        return [_clean(v, rename) for v in value]
    if isinstance(value, str):
        return rename(value)
    return value


def _meta(obj: Obj) -> Obj:
    """The metadata a writer or the API server decides (the rest is identity and time)."""
    meta = obj.get("metadata") or {}
    kept = ("labels", "annotations", "finalizers", "ownerReferences", "generation")
    return {k: meta[k] for k in kept if k in meta}


def _event_key(event: Obj, rename: Callable[[str], str]) -> str:
    regarding = event.get("involvedObject") or {}
    return rename(
        f"events[{regarding.get('kind')}/{regarding.get('name')}/{event.get('reason')}/"
        f"{event.get('type')}]"
    )


def normalise(side: Side, raw: Obj) -> dict[str, Any]:
    """The snapshot as flat `path: value` pairs, free of what varies from run to run."""
    rename = _renamer(side, raw)
    flat: dict[str, Any] = {}
    for job in raw["jobs"]:
        where = f"job/{job['metadata']['name']}"
        _flatten(f"{where}.metadata", _clean(_meta(job), rename), flat)
        _flatten(f"{where}.spec", _clean(job.get("spec"), rename), flat)
        _flatten(f"{where}.status", _clean(job.get("status"), rename), flat)
    for pod in raw["pods"]:
        where = f"pod/{rename(pod['metadata']['name'])}"
        _flatten(f"{where}.metadata", _clean(_meta(pod), rename), flat)
        _flatten(f"{where}.spec", _clean(pod.get("spec"), rename), flat)
        _flatten(f"{where}.status", _clean(pod.get("status"), rename), flat)
    for workload in raw["workloads"]:
        name = rename(workload["metadata"]["name"])
        _flatten(f"workload/{name}.status", _clean(workload.get("status"), rename), flat)
    for label, status in raw["refusals"].items():
        body = {k: v for k, v in status.items() if k not in ("metadata", "apiVersion", "kind")}
        _flatten(f"refusal/{label}", _clean(body, rename), flat)
    events: dict[str, set[str]] = {}
    for e in raw["events"]:
        if any(pattern.search(str(e.get("message") or "")) for pattern, _ in NOISE):
            continue
        said = {
            "message": _COMBINED.sub("", str(e.get("message") or "")),
            "reportingComponent": e.get("reportingComponent") or "",
            "source": (e.get("source") or {}).get("component") or "",
        }
        # A repeated Event is one entry however often it repeated (count, series, combined).
        events.setdefault(_event_key(e, rename), set()).add(
            json.dumps(_clean(said, rename), sort_keys=True)
        )
    for key, told in events.items():
        flat[key] = sorted(told)
    return flat


def _flatten(path: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        if not value:
            out[path] = {}
        for key, inner in value.items():
            _flatten(f"{path}.{key}", inner, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        # Conditions by type, container statuses by name: their order carries no meaning.
        for i, inner in enumerate(value):
            tag = inner.get("type") or inner.get("name") or str(i)
            _flatten(f"{path}[{tag}]", inner, out)
    else:
        out[path] = value


@dataclass(frozen=True)
class Difference:
    scenario: str
    path: str
    sandbox: Any
    real: Any

    def __str__(self) -> str:
        return (
            f"{self.scenario}: {self.path}\n  sandbox: {self.sandbox!r}\n  real:    {self.real!r}"
        )


MISSING = "<absent>"


def differences(scenario: str, sandbox: dict[str, Any], real: dict[str, Any]) -> list[Difference]:
    return [
        Difference(scenario, path, sandbox.get(path, MISSING), real.get(path, MISSING))
        for path in sorted(set(sandbox) | set(real))
        if sandbox.get(path, MISSING) != real.get(path, MISSING)
    ]


# --- running ---------------------------------------------------------------------------------


async def settled(side: Side, scenario: Scenario, *, quiet: float = 2.0, within: float = 30) -> Obj:
    """The normalised snapshot once it stopped changing for `quiet` seconds (a status write
    or an Event may trail the end state a moment)."""
    deadline = time.monotonic() + within
    last = normalise(side, await snapshot(side, scenario))
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet)
        now = normalise(side, await snapshot(side, scenario))
        if now == last:
            return now
        last = now
    return last


async def run_both(
    scenarios: Iterable[Scenario],
    sides: Callable[[Scenario], Awaitable[tuple[Side, Side]]],
) -> list[Difference]:
    """Every scenario on both clusters at once; the differences of all of them."""

    async def one(scenario: Scenario) -> list[Difference]:
        sandbox, real = await sides(scenario)

        async def play(side: Side) -> Obj:
            await scenario.run(side)
            return await settled(side, scenario)

        got_sandbox, got_real = await asyncio.gather(play(sandbox), play(real))
        return differences(scenario.name, got_sandbox, got_real)

    found = await asyncio.gather(*(one(s) for s in scenarios))
    return [d for group in found for d in group]
