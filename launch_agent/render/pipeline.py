"""`render(queue_spec, item, image_uri, settings)`: a popped item → the objects to create.

The stages, in order (each one pure; none reaches back):

1. parse the item (`model.run_item`), normalise the submitter's `resource_args.kubernetes`;
2. merge the layer onto the template; the merge reports each change and `policy.py` checks
   those, and `overrides`, against `overridable` (all violations at once); `shape.py` checks
   the merged pod templates have the pod schema's shape, naming the change that broke it;
3. substitute allow-listed macros in the merged workload, which also makes the one deep copy
   the later stages edit in place;
4. name, namespace, labels, annotations, image, entry point, W&B environment, kind defaults,
   Kueue and diagnostics labels, per the kind's row in `kinds.py`;
5. every pod that will exist made reachable (`generated.py`: pods the operator would generate
   are written out, pod specs outside the kind's templates and pods defined elsewhere are
   refused), then enforced security, last, on every pod template and every container the
   operator builds from workload fields (`security.py`);
6. what the API server would refuse for its size or metadata (`apiserver.py`): a run copied
   into every pod template must not become an object Kubernetes refuses obscurely.

Everything copied from the item into a field the kubelet expands (`command`, `args`,
`env[].value`) is escaped (`kubelet.py`); a `$(VAR)` reference the submitter writes into such
a field of their layer is refused, since only the admin decides what a pod may read from its
environment (write `$$(VAR)` for the literal text).

Errors raise `InvalidInput` with every problem; warnings come back in `RenderResult`. Nothing
here validates against JSON schemas: that is `output_check`, for `validate`, tests and an
optional check in the dispatcher, and it would cost more than the render itself.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch_agent.model import labels as L
from launch_agent.model.queue_spec import CustomKind, InvalidInput, Problem, QueueSpec
from launch_agent.model.run_item import RunItem, parse_run_item
from launch_agent.model.safe_load import ITEM_LIMITS, check_value
from launch_agent.render import generated, naming, shape
from launch_agent.render.apiserver import metadata_problems, process_problems, size_problems
from launch_agent.render.decisions import NO_DECISIONS, Admission, apply_decisions
from launch_agent.render.disruption_rule import add_disruption_rule
from launch_agent.render.edit import child_map
from launch_agent.render.kinds import KindInfo, PodSet, kind_info, spec_kind, unknown_kind
from launch_agent.render.kubelet import escape, expanded_field, references
from launch_agent.render.macros import macro_values, substitute_checked
from launch_agent.render.merge import REMOVED, Change, merge_changes, normalise
from launch_agent.render.paths import Glob, Item, Path, find, format_path, item_label, parse_glob
from launch_agent.render.policy import LAYER_PREFIX, check_changes, check_overrides, drop_echoes
from launch_agent.render.security import enforce_container, enforce_pod_template
from launch_agent.render.settings import RenderResult, RenderSettings
from launch_agent.render.wandb_env import payloads, set_env, wandb_env


def _spec_info(spec: QueueSpec) -> KindInfo:
    info = spec_kind(spec)
    if info is None:
        raise InvalidInput([Problem("spec.template", unknown_kind(spec.api_version, spec.kind))])
    return info


def _globs(spec: QueueSpec) -> list[Glob]:
    globs = spec.cache.get("globs")
    if globs is None:
        globs = [parse_glob(g) for g in spec.overridable]
        spec.cache["globs"] = globs
    return list(globs)


@dataclass(frozen=True, slots=True)
class _Run:
    """What the later stages write about the run, decided once it passed the checks."""

    item: RunItem
    run_id: str
    image: str
    queue: str
    payload: Mapping[str, str]


def render(
    spec: QueueSpec,
    item: Mapping[str, Any] | RunItem,
    image_uri: str | None,
    settings: RenderSettings,
    *,
    queue_name: str | None = None,
    decisions: Admission = NO_DECISIONS,
) -> RenderResult:
    """Render one popped item; raises `InvalidInput` listing every problem (and `NotAdmitted`
    when the admission decisions cannot be applied: render/decisions.py). The stages are the
    module docstring's, one function each."""
    run = _parse(item, settings)  # 1
    info = _spec_info(spec)
    queue = queue_name or spec.queues[0]
    problems, warnings = _item_problems(spec, run, image_uri, queue, settings)
    layer, found, warned = _layer(run, spec)
    problems += found
    warnings += warned
    merged, found = _merge(spec, info, run, layer)  # 2
    problems += found
    payload = payloads(run)
    problems += _limit_problems(spec, info, payload, settings)
    if problems:
        raise InvalidInput(problems)
    image = image_uri or run.docker_image
    assert image is not None  # `_item_problems` refused a run without one
    subject = _Run(
        run, run.run_id or naming.derived_run_id(run.run_queue_item_id), image, queue, payload
    )
    manifest = _substitute(merged, subject)  # 3
    templates = info.pod_template_matches(manifest)  # 4
    pod_labels = _name_and_label(manifest, spec, info, subject, settings)
    _prepare_pod_templates(templates, info, pod_labels)
    _write_run(manifest, info, templates, subject, settings)
    _apply_defaults(manifest, info, spec, settings)
    warnings += _queue_labels(manifest, info, spec)
    apply_decisions(manifest, info, decisions)  # the admission stage's, before enforcement
    warnings += enforce_every_pod(manifest, info, spec, templates)  # 5
    _check_size(manifest, run, len(templates))  # 6
    return RenderResult([_in_key_order(manifest)], warnings)


# --- 1. the item -------------------------------------------------------------------------------


def _parse(item: Mapping[str, Any] | RunItem, settings: RenderSettings) -> RunItem:
    # Before anything walks it: the merge, the policy and the macros recurse, and an item
    # nested deeper than the loaders allow must be refused, not crash the render.
    whole = item.raw if isinstance(item, RunItem) else item
    too_deep = nesting_problem(whole, settings.max_item_depth)
    if too_deep is not None:
        raise InvalidInput([too_deep])
    return item if isinstance(item, RunItem) else parse_run_item(item)


def _item_problems(
    spec: QueueSpec, run: RunItem, image_uri: str | None, queue: str, settings: RenderSettings
) -> tuple[list[Problem], list[Problem]]:
    """What is wrong with the item whatever its layer says (problems, warnings)."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    if queue not in spec.queues:
        problems.append(Problem("queue", f"{queue!r} is not served by queue spec {spec.name!r}"))
    if run.has_additional_services:
        problems.append(Problem("runSpec.additional_services", "is not supported by this agent"))
    if run.has_api_key_override:
        warnings.append(
            Problem(
                "runSpec._wandb_api_key",
                f"ignored: pods get the API key only from Secret {settings.api_key_secret!r}",
            )
        )
    if not (image_uri or run.docker_image):
        problems.append(
            Problem("runSpec.docker.docker_image", "the item names no image and none was built")
        )
    return problems, warnings


def _layer(run: RunItem, spec: QueueSpec) -> tuple[dict[str, Any], list[Problem], list[Problem]]:
    """The submitter's `resource_args.kubernetes`, normalised, without the kind it may repeat
    (layer, problems, warnings)."""
    if not run.resource_args:
        return {}, [], []
    layer, ns, problems, warnings = normalise(run.resource_args, LAYER_PREFIX, infer_job=False)
    if ns is not None and ns != spec.namespace:
        problems.append(
            Problem(
                f"{LAYER_PREFIX}.namespace",
                f"{ns!r} differs from the queue spec's namespace {spec.namespace!r}",
            )
        )
    for key, want in (("apiVersion", spec.api_version), ("kind", spec.kind)):
        got = layer.pop(key, None)
        if got is not None and got != want:
            problems.append(
                Problem(f"{LAYER_PREFIX}.{key}", f"is {got!r}; the queue spec runs {want!r}")
            )
    return layer, problems, warnings


# --- 2. merge and policy -----------------------------------------------------------------------


def _merge(
    spec: QueueSpec, info: KindInfo, run: RunItem, layer: Mapping[str, Any]
) -> tuple[Mapping[str, Any], list[Problem]]:
    """The layer merged onto the template, and every problem of the change: what the policy
    refuses, the shape it breaks, the kubelet references it writes and the `overrides` the
    spec does not grant."""
    # The merge reports each change it makes and the policy decides on those: checked == applied.
    merged, changes = merge_changes(spec.template, layer) if layer else (spec.template, [])
    changes = drop_echoes(changes, spec)
    problems = check_changes(changes, _globs(spec), spec)
    named = {p.path for p in problems}
    problems += [
        p
        for p in shape_problems(merged, info, spec, [c.path for c in changes])
        if p.path not in named  # the policy's grant-proof refusals saw it first
    ]
    problems += kubelet_references(changes)
    problems += check_overrides(
        run, _globs(spec), spec.name, spec.overridable, info=info, manifest=merged
    )
    return merged, problems


def _limit_problems(
    spec: QueueSpec, info: KindInfo, payload: Mapping[str, str], settings: RenderSettings
) -> list[Problem]:
    problems = []
    size = sum(len(v) for v in payload.values())
    if size > settings.max_env_bytes:
        problems.append(
            Problem(
                "runSpec.overrides",
                f"run_config, files and artifacts are {size:,} bytes as JSON; the limit is"
                f" {settings.max_env_bytes:,} (Kubernetes objects must stay under 1.5 MiB)",
            )
        )
    if spec.kueue_queue_name and info.kueue is None:
        problems.append(Problem("spec.kueue", f"Kueue cannot queue a {info.label}"))
    if spec.multi_kueue and info.multikueue_problem is not None:
        problems.append(Problem("spec.kueue.multiKueue", info.multikueue_problem))
    return problems


# --- 3. macros ---------------------------------------------------------------------------------


def _substitute(merged: Mapping[str, Any], subject: _Run) -> dict[str, Any]:
    """The merged workload with its macros substituted: the one deep copy later stages edit."""
    run = subject.item
    values = macro_values(
        run_id=subject.run_id,
        image_uri=subject.image,
        project=run.project,
        entity=run.entity,
        run_name=run.run_name,
        author=run.author,
        queue_name=subject.queue,
    )
    manifest, problems = substitute_checked(merged, values)
    problems += metadata_problems(manifest) + process_problems(manifest)
    if problems:
        raise InvalidInput(problems)
    assert isinstance(manifest, dict)
    return manifest


# --- 4. what the agent writes ------------------------------------------------------------------


def _name_and_label(
    manifest: dict[str, Any],
    spec: QueueSpec,
    info: KindInfo,
    subject: _Run,
    settings: RenderSettings,
) -> dict[str, str]:
    """The workload's name, namespace, labels and annotations; returns the labels its pods
    carry too."""
    run = subject.item
    meta = child_map(manifest, "metadata")
    meta.pop("generateName", None)
    meta["name"] = naming.workload_name(spec.name, run.run_queue_item_id, info.max_name)
    meta["namespace"] = spec.namespace
    pod_labels = {
        L.AGENT: settings.agent_name,
        L.QUEUE: naming.label_value(subject.queue),
        L.RUN_QUEUE_ITEM: naming.label_value(run.run_queue_item_id),
        L.RUN_ID: naming.label_value(subject.run_id),
        L.WANDB_RUN_ID: naming.label_value(subject.run_id),
        L.WANDB_AGENT: settings.agent_name,
    }
    child_map(meta, "labels").update(pod_labels)
    child_map(meta, "annotations").update(
        {
            L.RUN_QUEUE_ITEM_ID: run.run_queue_item_id,
            L.QUEUE_NAME: subject.queue,
            L.QUEUE_SPEC: spec.name,
            L.ENTITY: run.entity,
            L.PROJECT: run.project,
        }
    )
    return pod_labels


def _prepare_pod_templates(
    templates: list[tuple[Any, Any]], info: KindInfo, pod_labels: Mapping[str, str]
) -> None:
    """Every pod template: the run's labels, the kind's restartPolicy, and named containers
    (one, empty, where the template has none)."""
    for _path, tmpl in templates:
        child_map(child_map(tmpl, "metadata"), "labels").update(pod_labels)
        pod_spec = child_map(tmpl, "spec")
        if info.restart_policy and "restartPolicy" not in pod_spec:
            pod_spec["restartPolicy"] = info.restart_policy
        containers = pod_spec.get("containers")
        if not isinstance(containers, list) or not containers:
            containers = [{}]
            pod_spec["containers"] = containers
        for i, c in enumerate(containers):
            if isinstance(c, dict) and not c.get("name"):
                c["name"] = f"launch{i}"  # W&B's names for unnamed containers


def _write_run(
    manifest: dict[str, Any],
    info: KindInfo,
    templates: list[tuple[Any, Any]],
    subject: _Run,
    settings: RenderSettings,
) -> None:
    """The run itself, where the kind keeps it (`KindInfo.run_targets`): its image, command,
    args and W&B environment, once for every target; a RayJob's entry point."""
    run, image = subject.item, subject.image
    spec_body = child_map(manifest, "spec")
    if info.env_target == "trainer":
        child_map(spec_body, "trainer")  # written into even when the template has none
    env = functools.partial(
        wandb_env,
        run,
        settings,
        run_id=subject.run_id,
        image=image,
        queue_name=subject.queue,
        payload=subject.payload,
    )
    mains: set[str] = set()
    for index, target in enumerate(info.run_targets(manifest, templates)):
        if target is None:
            continue
        if info.env_target == "trainer":
            target.setdefault("image", image)
        elif not target.get("image"):
            target["image"] = image
        if info.env_target == "containers" and isinstance(target.get("name"), str):
            mains.add(target["name"])
        if info.entry_target != "rayjob":
            # The kubelet expands command and args (a trainer's become its container's).
            if run.entry_point:
                target["command"] = [escape(a) for a in run.entry_point]
            if run.args:  # W&B applies only non-empty args (kubernetes_runner.py)
                target["args"] = [escape(a) for a in run.args]
        set_env(target, env(primary=index == 0))
    # Which containers run the run itself, and its image: the tracker and `diagnose` blame them
    # before sidecars (tracking/pods.py `main_container_of`), adopted runs included.
    run_annotations = child_map(child_map(manifest, "metadata"), "annotations")
    if mains:
        run_annotations[L.MAIN_CONTAINERS] = ",".join(sorted(mains))
    run_annotations[L.RUN_IMAGE] = image
    if info.entry_target == "rayjob" and (run.entry_point or run.args):
        # KubeRay puts the entrypoint into the submitter container's command (K8sJobMode), which
        # the kubelet expands; HTTPMode sends it to the dashboard as it is.
        quote = escape if generated.ray_submission_mode(manifest) == "K8sJobMode" else str
        head = (
            [quote(a) for a in run.entry_point]
            if run.entry_point
            else shlex.split(str(spec_body.get("entrypoint", "")))
        )
        spec_body["entrypoint"] = shlex.join(head + [quote(a) for a in run.args or ()])


def _queue_labels(manifest: dict[str, Any], info: KindInfo, spec: QueueSpec) -> list[Problem]:
    """The spec's Kueue LocalQueue and GKE diagnostics labels; the warnings they earn."""
    workload_labels = child_map(child_map(manifest, "metadata"), "labels")
    if spec.kueue_queue_name:
        workload_labels[L.KUEUE_QUEUE_NAME] = spec.kueue_queue_name
        if info.kueue == "suspend":
            info.set_suspended(manifest, True)
    if spec.kueue_priority_class:
        workload_labels[L.KUEUE_PRIORITY_CLASS] = spec.kueue_priority_class
    if spec.multi_kueue:
        # The manager's controller leaves the workload to MultiKueue, which copies it to the
        # worker that admits it (without managedBy, so the worker's controller runs it).
        info.set_managed_by_multikueue(manifest)
    if not spec.gke_ml_diagnostics:
        return []
    workload_labels[L.GKE_ML_DIAGNOSTICS] = "true"
    if info.gke_diagnostics:
        return []
    return [
        Problem(
            "spec.diagnostics.gkeManagedMLDiagnostics",
            f"the GKE ML diagnostics webhook supports JobSet, LeaderWorkerSet and"
            f" RayJob; a {info.label} gets the label but may not be instrumented",
        )
    ]


# --- 6. what the API server would refuse -------------------------------------------------------


def _check_size(manifest: Mapping[str, Any], run: RunItem, pod_templates: int) -> None:
    """Last: what the API server would refuse for its size, with the item's values to blame."""
    run_spec = run.raw.get("runSpec")
    too_big = size_problems(
        manifest, run_spec if isinstance(run_spec, Mapping) else {}, pod_templates
    )
    if too_big:
        raise InvalidInput(too_big)


def _in_key_order(manifest: dict[str, Any]) -> dict[str, Any]:
    """Conventional key order, so `render` output reads like a hand-written manifest."""
    first: dict[str, Any] = {
        k: manifest.pop(k) for k in ("apiVersion", "kind", "metadata") if k in manifest
    }
    return {**first, **manifest}


def nesting_problem(item: Any, limit: int = ITEM_LIMITS.max_depth) -> Problem | None:
    """Where the item's runSpec nests deeper than `limit` (the loaders' bound, which W&B's
    client and the CLI apply to the runSpec they decode), found without recursion.

    Render runs on the agent's event loop, so the walk carries no paths (a 20,000-entry
    run_config of 60,000 containers costs ~30 ms); only a refusal pays for `check_value`'s path."""
    run_spec = item.get("runSpec") if isinstance(item, Mapping) else None
    stack: list[tuple[Any, int]] = [(run_spec, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            found = check_value(run_spec, limit, "runSpec")
            return (
                Problem(*found)
                if found
                else Problem("runSpec", f"nested deeper than {limit} levels")
            )
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return None


def enforce_every_pod(
    manifest: dict[str, Any],
    info: KindInfo,
    spec: QueueSpec,
    templates: list[tuple[Any, Any]] | None = None,
) -> list[Problem]:
    """Enforcement on every pod that will exist; raises `InvalidInput` for pods it cannot
    reach. Returns what it changed (render warnings; `validate` errors for the admin's).
    `templates` are the manifest's pod templates if the caller has them already."""
    problems = [
        Problem(format_path(path), reason) for path, reason in workload_shapes(manifest, info)
    ]
    if problems:
        raise InvalidInput(problems)
    problems = info.refusals(manifest, spec.security) if info.refusals else []
    if info.materialise is not None:
        info.materialise(manifest)
        templates = None  # it may have written out a template
    if templates is None:
        templates = info.pod_template_matches(manifest)
    hint = (
        "declare its path in spec.podTemplatePaths"
        if spec.custom_kind is not None
        else f"a {info.label} has pod templates only at {', '.join(info.pod_templates)}"
    )
    foreign, changes = generated.scan(manifest, templates, hint)
    problems += foreign
    if problems:
        raise InvalidInput(problems)
    for path, tmpl in templates:
        changes += enforce_pod_template(tmpl, spec.security, format_path(path))
    for where, container in info.operator_containers(manifest) if info.operator_containers else ():
        changes += enforce_container(container, spec.security, where, set())
    return changes


def workload_shapes(
    manifest: Mapping[str, Any], info: KindInfo, *, require_containers: bool = False
) -> list[shape.Mismatch]:
    """Shape mismatches of every pod template and operator-built container (`shape.py`)."""
    found = shape.pod_template_shapes(
        manifest, info.pod_templates, require_containers=require_containers
    )
    for pattern in info.container_fields:
        for path, value in find(manifest, parse_glob(pattern)):
            if value is not None:
                found += shape.container_shapes(value, path)
    return found


def shape_problems(
    merged: Mapping[str, Any], info: KindInfo, spec: QueueSpec, changed: list[Path]
) -> list[Problem]:
    """The merged workload's shape mismatches, each named where it came from: the
    submitter's layer if a change made it, else the admin's template. A pod template the
    admin wrote without containers gets one from the pipeline; one whose containers the
    submitter removed is refused."""
    problems = []
    # The kind's refusals (`generated.py`) too, so a refusal the layer caused names its path.
    found = workload_shapes(merged, info, require_containers=True)
    if info.refusals is not None:
        for p in info.refusals(merged, spec.security):
            path = tuple(s for s in parse_glob(p.path) if isinstance(s, str | Item))
            found.append((path, p.reason))
    for path, reason in found:
        if shape.touches(path, changed):
            problems.append(Problem(format_path(path, LAYER_PREFIX), reason))
        elif path[-1] != "containers" or "containers list" not in reason:
            problems.append(Problem(format_path(path, "spec.template"), reason))
    return problems


def kubelet_references(changes: list[Change]) -> list[Problem]:
    """The submitter's changed strings in fields the kubelet expands that hold a `$(VAR)`
    reference."""
    problems = []
    for change in changes:
        if change.value is REMOVED:
            continue
        leaf_path, leaf = change.path, change.value
        for where, text in _strings(leaf_path, leaf):
            if not expanded_field(where):
                continue
            for name in references(text):
                problems.append(
                    Problem(
                        format_path(where, LAYER_PREFIX),
                        f"$({name}) would be expanded by the kubelet; submitters may not"
                        f" reference environment variables here (write $$({name}) for the"
                        " literal text)",
                    )
                )
    return problems


def _strings(path: Path, value: Any) -> list[tuple[Path, str]]:
    if isinstance(value, str):
        return [(path, value)]
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _strings((*path, str(k)), v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _strings((*path, Item(item_label(v, i))), v)
    return out


def _apply_defaults(
    manifest: dict[str, Any], info: KindInfo, spec: QueueSpec, settings: RenderSettings
) -> None:
    d = spec.defaults
    wanted = (
        (info.backoff_limit, d.backoff_limit, settings.backoff_limit),
        (info.ttl, d.ttl_seconds_after_finished, settings.ttl_seconds_after_finished),
        (info.deadline, d.active_deadline_seconds, settings.active_deadline_seconds),
    )
    for where, from_spec, from_settings in wanted:
        value = from_spec if from_spec is not None else from_settings
        if where is None or value is None:
            continue
        if where == info.ttl and info.ttl_requires is not None:
            flag_path = info.ttl_requires
            holders = _parents(manifest, flag_path[0])
            if holders and flag_path[1] not in holders[0]:
                holders[0][flag_path[1]] = True
            if not holders or holders[0].get(flag_path[1]) is not True:
                continue
        for parent in _parents(manifest, where[0]):
            parent.setdefault(where[1], value)
    if info.builtin and info.api_version == "batch/v1" and info.kind == "Job":
        # A disruption must outlive its pod: render/disruption_rule.py.
        add_disruption_rule(child_map(manifest, "spec"))


def _parents(manifest: dict[str, Any], glob_text: str) -> list[dict[str, Any]]:
    glob = parse_glob(glob_text)
    if all(isinstance(g, str) for g in glob):
        node = manifest
        for key in glob:
            assert isinstance(key, str)
            node = child_map(node, key)
        return [node]
    return [v for _p, v in find(manifest, glob) if isinstance(v, dict)]


def _info_for(manifest: Mapping[str, Any], custom: CustomKind | None) -> KindInfo:
    api_version, kind = str(manifest.get("apiVersion", "")), str(manifest.get("kind", ""))
    info = kind_info(api_version, kind, custom)
    if info is None:
        raise InvalidInput([Problem("kind", unknown_kind(api_version, kind))])
    return info


def pod_sets(manifest: Mapping[str, Any], custom: CustomKind | None = None) -> list[PodSet]:
    """`[(count, pod template)]` of a rendered workload, for quota."""
    return _info_for(manifest, custom).pod_sets(manifest)


def suspend(manifest: dict[str, Any], custom: CustomKind | None = None) -> None:
    """Mark a workload suspended (in place); raises `InvalidInput` for kinds without one."""
    _info_for(manifest, custom).set_suspended(manifest, True)


def unsuspend(manifest: dict[str, Any], custom: CustomKind | None = None) -> None:
    _info_for(manifest, custom).set_suspended(manifest, False)


def is_suspended(manifest: Mapping[str, Any], custom: CustomKind | None = None) -> bool:
    return _info_for(manifest, custom).is_suspended(manifest)
