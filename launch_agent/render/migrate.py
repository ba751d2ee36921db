"""A W&B run queue's config → a queue spec for `launch-agent migrate`. Pure: data in, text out.

W&B keeps each queue's config in W&B (`defaultResourceConfig`: `{"resource_args":
{"kubernetes": ...}}` with `{{name}}` template variables, each with a JSON schema). The
reference agent applies it as it is, and W&B fills the variables server-side when a run is
pushed, merging the filled config into the item's `resource_args`. So here:

- the config becomes `spec.template` unchanged in form (the Job-spec form or the
  `kubernetes: {...}` custom-resource form; `render.merge.normalise` reads both), with each
  `{{name}}` replaced by its schema's default (or, failing that, its first `enum` value or its
  `minimum`); a variable with none of those stays `{{name}}` and is listed as a decision;
- every value a template variable fills becomes an `overridable` path: W&B writes the
  submitter's value there, and anything else in `resource_args` is refused by the override
  policy (a decision: W&B let submitters change everything);
- what the restricted profile forbids and the config needs (privileged, host namespaces,
  hostPath, added capabilities, root, a service account, Secrets) is **not** granted: each is
  listed with its path and the `security:` key that would grant it, as comments in the spec,
  so the admin decides and the spec refuses to load until they do.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from launch_agent.model.queue_spec import API_VERSION, KIND
from launch_agent.render.paths import Item, Path, format_path, item_label

_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
# W&B's overrides a submitter may set on any W&B queue (`render.policy` checks them).
DEFAULT_OVERRIDES = ("overrides.args", "overrides.entry_point", "overrides.run_config")


class NotAQueueConfig(ValueError):
    """The input is not a W&B queue config this command can turn into a spec."""


@dataclass(frozen=True)
class Finding:
    """Something the config does that the restricted profile forbids: where, what, the grant."""

    path: str
    what: str
    grant: str
    # False for what the template may do without a grant but an admin should know (Secrets
    # it names: pods of the queue read them; a submitter may name only granted ones).
    needed: bool = True


@dataclass(frozen=True)
class Migrated:
    queue: str
    name: str
    document: dict[str, Any]
    findings: tuple[Finding, ...] = ()
    decisions: tuple[str, ...] = ()
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def text(self, source: str) -> str:
        """The spec as YAML, with the review list as comments (never as grants)."""
        head = [
            f"# Queue spec for W&B run queue {self.queue!r}, written by `launch-agent migrate`",
            f"# from {source}. Review it before the agent loads it:",
        ]
        head += [f"#   - {line}" for line in self.decisions]
        body = yaml.safe_dump(self.document, sort_keys=False, default_flow_style=False)
        tail: list[str] = []
        needed = tuple(f for f in self.findings if f.needed)
        known = tuple(f for f in self.findings if not f.needed)
        if needed:
            tail += [
                "  # The config needs these exceptions to the restricted profile. None is granted:",
                "  # the agent refuses this spec until each is removed from the template or",
                "  # granted (uncomment; see docs/queue-specs.md#security).",
                "  # security:",
            ]
            for grant, paths in _grants(needed).items():
                tail.append(f"  #   {grant}")
                tail += [f"  #     # {p}" for p in paths]
        if known:
            tail += [
                "  # Secrets the template names: every pod of this queue can read them. A",
                "  # submitter may name a Secret only if it is listed in security.secrets:",
            ]
            for grant, paths in _grants(known).items():
                tail.append(f"  #   {grant}")
                tail += [f"  #     # {p}" for p in paths]
        for name, schema in self.variables.items():
            tail.append(
                f"  # template variable {name!r}: W&B checked values against"
                f" {json.dumps(schema, sort_keys=True)}; the agent does not"
            )
        return "\n".join(head) + "\n" + body + ("\n".join(tail) + "\n" if tail else "")


def _grants(findings: tuple[Finding, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(f.grant, []).append(f"{f.path}: {f.what}")
    return out


def unwrap(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `kubernetes` part of a queue config, in whichever form W&B gave it.

    Accepts the whole config (`{"resource_args": {"kubernetes": X}}`, optionally with
    `resource`), or X itself as pasted from the W&B UI (the Job-spec form, the
    `kubernetes: {...}` custom-resource form, or a full manifest).
    """
    if not isinstance(config, Mapping):
        raise NotAQueueConfig("a queue config is a JSON/YAML object")
    body: Any = config
    if "resource_args" in body:
        resource = body.get("resource", "kubernetes")
        if resource != "kubernetes":
            raise NotAQueueConfig(f"resource {resource!r}: only kubernetes queues are migrated")
        args = body["resource_args"]
        if not isinstance(args, Mapping) or "kubernetes" not in args:
            raise NotAQueueConfig("resource_args has no `kubernetes` config")
        body = args["kubernetes"]
    if not isinstance(body, Mapping) or not body:
        raise NotAQueueConfig("the kubernetes config is empty: there is nothing to migrate")
    if not ({"spec", "kubernetes", "metadata", "apiVersion"} & set(body)):
        raise NotAQueueConfig(
            "neither W&B form: expected `spec`/`metadata` (Job spec), `kubernetes:` (custom"
            " resource) or a manifest with `apiVersion`/`kind`"
        )
    return copy.deepcopy(dict(body))


def spec_name(queue: str) -> str:
    """A DNS label from a W&B queue name (`GPU Queue #1` → `gpu-queue-1`)."""
    name = _DNS_LABEL.sub("-", queue.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"q-{name}".rstrip("-")
    return name[:40].rstrip("-")


def _default(schema: Mapping[str, Any]) -> tuple[bool, Any]:
    if "default" in schema:
        return True, schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return True, enum[0]
    if "minimum" in schema:
        return True, schema["minimum"]
    return False, None


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _walk(child, (*path, str(key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, (*path, Item(item_label(child, index))))


def _fill(
    value: Any, variables: Mapping[str, Mapping[str, Any]], used: dict[str, list[Path]], path: Path
) -> Any:
    """Replace `{{name}}` by the variable's default; remember where each variable lands."""
    if isinstance(value, dict):
        return {k: _fill(v, variables, used, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [
            _fill(v, variables, used, (*path, Item(item_label(v, i)))) for i, v in enumerate(value)
        ]
    if not isinstance(value, str) or not _VARIABLE.search(value):
        return value
    names = _VARIABLE.findall(value)
    for name in names:
        used.setdefault(name, []).append(path)
    whole = _VARIABLE.fullmatch(value.strip())
    if whole is not None:
        # W&B keeps the type of a leaf that is exactly one variable (`replicas: "{{n}}"` → 3).
        ok, default = _default(variables.get(whole.group(1), {}))
        return default if ok else value

    def one(match: re.Match[str]) -> str:
        ok, default = _default(variables.get(match.group(1), {}))
        return str(default) if ok else match.group(0)

    return _VARIABLE.sub(one, value)


def _manifest_path(path: Path, wrapped: bool) -> Path:
    return path[1:] if wrapped and path[:1] == ("kubernetes",) else path


_CONTAINER_FLAGS = (
    ("privileged", True, "a privileged container", "privileged: true"),
    (
        "allowPrivilegeEscalation",
        True,
        "privilege escalation allowed",
        "allowPrivilegeEscalation: true",
    ),
)
_POD_FLAGS = ("hostNetwork", "hostPID", "hostIPC")


def findings(template: Any) -> list[Finding]:
    """What in `template` needs an exception to the restricted profile or names a Secret."""
    out: list[Finding] = []
    for path, value in _walk(template, ()):
        where = format_path(path, "spec.template")
        key = path[-1] if path and isinstance(path[-1], str) else None
        if key == "securityContext" and isinstance(value, dict):
            for field_, bad, what, grant in _CONTAINER_FLAGS:
                if value.get(field_) is bad:
                    out.append(Finding(f"{where}.{field_}", what, grant))
            added = (value.get("capabilities") or {}).get("add") or []
            if added:
                caps = ", ".join(map(str, added))
                out.append(
                    Finding(f"{where}.capabilities.add", f"adds {caps}", f"capabilities: [{caps}]")
                )
            if value.get("runAsUser") == 0 or value.get("runAsNonRoot") is False:
                out.append(Finding(where, "runs as root", "runAsRoot: true"))
            seccomp = value.get("seccompProfile") or {}
            if isinstance(seccomp, dict) and seccomp.get("type") == "Unconfined":
                out.append(
                    Finding(
                        f"{where}.seccompProfile", "seccomp unconfined", "seccompUnconfined: true"
                    )
                )
        elif key in _POD_FLAGS and value is True:
            out.append(Finding(where, f"uses the node's {key[4:]} namespace", f"{key}: true"))
        elif key == "hostPath" and isinstance(value, dict):
            out.append(
                Finding(where, "mounts a node directory", f"hostPaths: [{value.get('path', '')}]")
            )
        elif key == "hostPort" and value:
            out.append(Finding(where, "binds a node port", "hostPorts: true"))
        elif key in ("serviceAccountName", "serviceAccount") and isinstance(value, str):
            out.append(Finding(where, "runs as a service account", f"serviceAccountName: {value}"))
        elif key == "automountServiceAccountToken" and value is True:
            out.append(Finding(where, "mounts an API token", "automountServiceAccountToken: true"))
        elif key in ("secretKeyRef", "secretRef", "secret") and isinstance(value, dict):
            name = value.get("name", value.get("secretName"))
            if isinstance(name, str):
                out.append(
                    Finding(where, f"reads Secret {name!r}", f"secrets: [{name}]", needed=False)
                )
        elif key == "imagePullSecrets" and isinstance(value, list):
            for entry in value:
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    name = entry["name"]
                    out.append(
                        Finding(
                            where, f"pulls with Secret {name!r}", f"secrets: [{name}]", needed=False
                        )
                    )
    return out


def migrate(
    queue: str,
    config: Mapping[str, Any],
    template_variables: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    namespace: str | None = None,
    default_namespace: str = "default",
) -> Migrated:
    """Build the queue spec for `queue` from its W&B config; raises `NotAQueueConfig`."""
    variables = {k: dict(v) for k, v in (template_variables or {}).items()}
    body = unwrap(config)
    wrapped = set(body) == {"kubernetes"}
    used: dict[str, list[Path]] = {}
    template = _fill(body, variables, used, ())
    decisions: list[str] = []

    manifest = template["kubernetes"] if wrapped else template
    meta = manifest.get("metadata") if isinstance(manifest, dict) else None
    named = manifest.get("namespace") if isinstance(manifest, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("namespace"), str):
        named = meta["namespace"]
    if namespace is None:
        namespace = named if isinstance(named, str) else default_namespace
        if not isinstance(named, str):
            decisions.append(
                f"namespace {namespace!r}: the config names none (W&B's agent used its own);"
                " pass --namespace to choose"
            )
    elif isinstance(named, str) and named != namespace:
        decisions.append(f"namespace: the config says {named!r}; --namespace {namespace!r} wins")
        for where in (manifest, meta):
            if isinstance(where, dict):
                where.pop("namespace", None)

    overridable: list[str] = []
    for name in sorted(used):
        for path in used[name]:
            glob = format_path(_manifest_path(path, wrapped))
            if glob not in overridable:
                overridable.append(glob)
        if name not in variables:
            decisions.append(f"template variable {name!r} is used but W&B gave no schema for it")
        elif not _default(variables[name])[0]:
            decisions.append(
                f"template variable {name!r} has no default: the template keeps"
                f" '{{{{{name}}}}}' at {', '.join(format_path(p) for p in used[name])};"
                " write a value"
            )
    unused = sorted(set(variables) - set(used))
    if unused:
        decisions.append(f"template variables not used by the config: {', '.join(unused)}")
    overridable += DEFAULT_OVERRIDES
    decisions.append(
        "W&B let submitters change any field of resource_args; this spec lets them change only"
        " the template variables' paths and W&B's overrides (args, entry_point, run_config):"
        " add `overridable` globs for anything else they relied on"
    )

    found = tuple(findings(template))
    needed = [f for f in found if f.needed]
    if needed:
        decisions.append(
            f"{len(needed)} security exception(s) listed at the end: grant or remove each"
        )
    if len(needed) < len(found):
        decisions.append("Secrets the template names are listed at the end: review them")
    name = spec_name(queue)
    document: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "description": f"migrated from W&B run queue {queue!r}"},
        "spec": {
            "queues": [queue],
            "namespace": namespace,
            "template": template,
            "overridable": overridable,
        },
    }
    return Migrated(
        queue,
        name,
        document,
        found,
        tuple(decisions),
        {k: variables[k] for k in sorted(variables) if k in used},
    )
