"""The smaller holes: hostPath prefixes, macro values, legacy annotations, type confusion."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings

from .helpers import job_template, make_item, make_spec, restricted_violations

SETTINGS = RenderSettings()


def _layer(pod_spec: dict[str, Any] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "spec": {
            "template": {
                "spec": {**(pod_spec or {}), "containers": [{"name": "main", **container}]}
            }
        }
    }


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    tmpl: dict[str, Any] = obj["spec"]["template"]
    return tmpl


def _host_path_volumes(path: Any) -> dict[str, Any]:
    return _layer(
        {"volumes": [{"name": "h", "hostPath": {"path": path}}]},
        volumeMounts=[{"name": "h", "mountPath": "/h"}],
    )


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("/data", True),
        ("/data/", True),
        ("/data/x/y", True),
        ("/data//x/./y", True),
        ("/data/../etc", False),
        ("/data/x/../../etc", False),
        ("/database", False),
        ("/data-other", False),
        ("data/x", False),
        ("", False),
        (None, False),
        (["/data"], False),
        ("/", False),
    ],
)
def test_host_path_prefix_is_matched_on_normalised_components(path: Any, kept: bool) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"], security={"hostPaths": ["/data"]})
    out = render(spec, make_item(_host_path_volumes(path)), None, SETTINGS)
    volumes = _pod(out.workload)["spec"]["volumes"]
    assert (volumes != []) is kept
    if not kept:
        assert any("is not under security.hostPaths" in w.reason for w in out.warnings)


def test_host_path_given_as_a_string_is_refused_not_crashed_on() -> None:
    # A volume source is an object (core/v1 VolumeSource): a string is refused, not guessed at.
    spec = make_spec(job_template(image="i"), overridable=["**"], security={"hostPaths": ["/"]})
    layer = _layer({"volumes": [{"name": "h", "hostPath": "/etc"}]})
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == [
        "runSpec.resource_args.kubernetes.spec.template.spec.volumes[h].hostPath"
    ]


def test_a_dot_dot_host_path_prefix_is_refused_by_the_schema() -> None:
    with pytest.raises(InvalidInput) as exc:
        make_spec(job_template(image="i"), security={"hostPaths": ["/data/../etc"]})
    assert exc.value.problems[0].path == "spec.security.hostPaths[0]"


@pytest.mark.parametrize(
    ("item", "field", "where"),
    [
        ({"name": "../../etc"}, "runSpec.name", "subPath"),
        ({"name": ".."}, "runSpec.name", "subPath"),
        ({"name": "a\\b"}, "runSpec.name", "subPath"),
        ({"name": "bad\nname"}, "runSpec.name", "charset"),
        ({"project": "p/../q"}, "runSpec.project", "item"),
        ({"entity": "e\x00"}, "runSpec.entity", "item"),
        ({"author": "a b"}, "runSpec.author", "charset"),
        ({"run_id": "../x"}, "runSpec.run_id", "item"),
    ],
)
def test_macro_values_are_validated_where_they_land(
    item: dict[str, Any], field: str, where: str
) -> None:
    tmpl = job_template(
        image="i",
        volumeMounts=[{"name": "d", "mountPath": "/out", "subPath": "${run_name}"}],
        env=[
            {"name": "P", "value": "${project_name}/${entity_name}"},
            {"name": "A", "value": "${author}-${run_id}"},
        ],
    )
    tmpl["spec"]["template"]["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    with pytest.raises(InvalidInput) as exc:
        render(make_spec(tmpl), make_item(**item), None, SETTINGS)
    (problem,) = exc.value.problems
    assert problem.path == field
    # "item": the identifier is refused when the item is parsed (model/run_item.py), before
    # any macro uses it.
    assert ("macro ${" in problem.reason) != (where == "item"), problem.reason
    assert (where in problem.reason) or where in ("charset", "item")


def test_run_name_with_a_slash_is_fine_outside_paths() -> None:
    tmpl = job_template(image="i", env=[{"name": "N", "value": "${run_name}"}])
    obj = render(make_spec(tmpl), make_item(name="exp/1 (v2)"), None, SETTINGS).workload
    assert _pod(obj)["spec"]["containers"][0]["env"][0] == {"name": "N", "value": "exp/1 (v2)"}


@pytest.mark.parametrize(
    ("key", "value", "granted"),
    [
        ("seccomp.security.alpha.kubernetes.io/pod", "unconfined", {"seccompUnconfined": True}),
        ("container.seccomp.security.alpha.kubernetes.io/main", "unconfined", None),
        ("seccomp.security.alpha.kubernetes.io/pod", "something-else", None),
        ("container.apparmor.security.beta.kubernetes.io/main", "unconfined", None),
        ("container.apparmor.security.beta.kubernetes.io/main", "Unconfined", None),
    ],
)
def test_legacy_unconfined_annotations_are_removed(
    key: str, value: str, granted: dict[str, Any] | None
) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = _layer()
    layer["spec"]["template"]["metadata"] = {"annotations": {key: value}}
    out = render(spec, make_item(layer), None, SETTINGS)
    assert key not in _pod(out.workload)["metadata"].get("annotations", {})
    assert any(key in w.path for w in out.warnings)
    if granted is not None and value == "unconfined":
        allowed = make_spec(job_template(image="i"), overridable=["**"], security=granted)
        kept = render(allowed, make_item(layer), None, SETTINGS).workload
        assert _pod(kept)["metadata"]["annotations"][key] == value


@pytest.mark.parametrize("value", ["runtime/default", "docker/default", "localhost/profile.json"])
def test_confined_legacy_seccomp_annotations_are_kept(value: str) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = _layer()
    key = "seccomp.security.alpha.kubernetes.io/pod"
    layer["spec"]["template"]["metadata"] = {"annotations": {key: value}}
    out = render(spec, make_item(layer), None, SETTINGS)
    assert _pod(out.workload)["metadata"]["annotations"][key] == value


@pytest.mark.parametrize(
    ("context", "pod_context", "where"),
    [
        ({"privileged": "true"}, None, "securityContext.privileged"),
        ({"allowPrivilegeEscalation": "true"}, None, "securityContext.allowPrivilegeEscalation"),
        ({"runAsUser": "0"}, None, "securityContext.runAsUser"),
        ({"runAsNonRoot": "false"}, None, "securityContext.runAsNonRoot"),
        ({"capabilities": {"add": "SYS_ADMIN"}}, None, "capabilities.add"),
        ({"capabilities": {"add": [{"SYS_ADMIN": 1}]}}, None, "capabilities.add"),
        ({"capabilities": {"drop": "ALL"}}, None, "capabilities.drop"),
        ({"procMount": 1}, None, "securityContext.procMount"),
        (None, {"runAsUser": "0"}, "spec.securityContext.runAsUser"),
        (None, {"runAsNonRoot": "false"}, "spec.securityContext.runAsNonRoot"),
        (None, {"seccompProfile": {"type": 1}}, "spec.securityContext.seccompProfile.type"),
    ],
)
def test_wrong_typed_security_fields_are_removed_never_passed(
    context: dict[str, Any] | None, pod_context: dict[str, Any] | None, where: str
) -> None:
    spec = make_spec(
        job_template(image="i"),
        overridable=["**"],
        security={"privileged": True, "capabilities": ["SYS_ADMIN"]},
    )
    layer = _layer({"securityContext": pod_context} if pod_context else None)
    if context:
        layer["spec"]["template"]["spec"]["containers"][0]["securityContext"] = context
    out = render(spec, make_item(layer), None, SETTINGS)
    pod = _pod(out.workload)
    assert restricted_violations(pod) == []
    sc = pod["spec"]["containers"][0]["securityContext"]
    psc = pod["spec"]["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc.get("capabilities", {}).get("add") in (None, [])
    assert "privileged" not in sc and sc["allowPrivilegeEscalation"] is False
    assert psc["runAsNonRoot"] is True and psc.get("runAsUser") != "0"
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert any(where in w.path for w in out.warnings), [w.path for w in out.warnings]


@pytest.mark.parametrize("key", ["hostNetwork", "hostPID", "hostIPC"])
def test_host_namespaces_given_as_strings_are_removed(key: str) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    out = render(spec, make_item(_layer({key: "true"})), None, SETTINGS)
    assert key not in _pod(out.workload)["spec"]


def test_pod_template_namespace_from_the_submitter_is_refused_under_a_full_grant() -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = _layer()
    layer["spec"]["template"]["metadata"] = {"namespace": "kube-system"}
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == [
        "runSpec.resource_args.kubernetes.spec.template.metadata.namespace"
    ]


def test_admin_template_with_a_nested_namespace_is_refused_at_load() -> None:
    tmpl = job_template(image="i")
    tmpl["spec"]["template"]["metadata"] = {"namespace": "other"}
    with pytest.raises(InvalidInput) as exc:
        make_spec(tmpl)
    assert [p.path for p in exc.value.problems] == [
        "spec.template.spec.template.metadata.namespace"
    ]


@pytest.mark.parametrize(
    ("pod_spec", "container", "where"),
    [
        (
            {"initContainers": {"init": {"image": "x", "securityContext": {"privileged": True}}}},
            {},
            "spec.initContainers",
        ),
        ({"volumes": {"name": "h", "hostPath": {"path": "/"}}}, {}, "spec.volumes"),
        ({}, {"ports": {"containerPort": 1, "hostPort": 1}}, "containers[main].ports"),
        ({}, {"securityContext": "privileged"}, "containers[main].securityContext"),
        ({}, {"securityContext": {"capabilities": "ALL"}}, "securityContext.capabilities"),
        (
            {},
            {"securityContext": {"seccompProfile": "Unconfined"}},
            "securityContext.seccompProfile",
        ),
        ({"ephemeralContainers": [{"name": "e"}, "x"]}, {}, "spec.ephemeralContainers[1]"),
        ({"volumes": [{"name": "s", "secret": 0}]}, {}, "spec.volumes[s].secret"),
        ({}, {"env": [{"name": "A", "valueFrom": []}]}, "env[A].valueFrom"),
    ],
)
def test_wrong_typed_pod_lists_and_mappings_are_refused_with_the_runspec_path(
    pod_spec: dict[str, Any], container: dict[str, Any], where: str
) -> None:
    # Where the pod schema wants a mapping or a list of mappings, anything else is refused
    # (render/shape.py): enforcement skips what is not a mapping, so it must never pass on.
    spec = make_spec(job_template(image="i"), overridable=["**"])
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(_layer(pod_spec, **container)), None, SETTINGS)
    paths = [p.path for p in exc.value.problems]
    assert len(paths) == 1 and paths[0].startswith("runSpec.resource_args.kubernetes.spec."), paths
    assert paths[0].endswith(where) and "must be a" in exc.value.problems[0].reason
