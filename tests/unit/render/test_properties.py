"""Property tests over arbitrary submitter overrides (hypothesis).

For every kind, with every path overridable (the worst case an admin can configure) and an
arbitrary set of granted exceptions:

- no rendered pod template breaks the restricted profile beyond what was granted (checked by
  the independent `helpers.restricted_violations`);
- no output contains the API key or any value of the agent's environment, even when the
  submitter asks for them with `${NAME}` macros;
- rendering is deterministic and does not depend on the input objects' identity.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from launch_agent.render.kinds import kind_info
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import build_queue_spec

from .helpers import EXAMPLES, make_item, restricted_violations

SECRET_ENV = {
    "LA_TEST_SECRET_TOKEN": "env-sentinel-8c1f0a",
    "AWS_SECRET_ACCESS_KEY": "env-sentinel-aws-77",
}
API_KEY = "local-apikey-sentinel-0123456789abcdef"
SETTINGS = RenderSettings()
KIND_FILES = [
    "job.yaml",
    "jobset-gke.yaml",
    "pytorchjob.yaml",
    "leaderworkerset.yaml",
    "rayjob.yaml",
    "volcano-job.yaml",
]
CAPS = ["NET_BIND_SERVICE", "SYS_ADMIN", "IPC_LOCK", "SYS_PTRACE", "NET_RAW"]


@pytest.fixture(scope="module", autouse=True)
def agent_environment() -> Iterator[None]:
    # The agent process has secrets in its environment; render must never see them.
    saved = {k: os.environ.get(k) for k in SECRET_ENV}
    os.environ.update(SECRET_ENV)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


texts = st.one_of(
    st.sampled_from(
        ["${LA_TEST_SECRET_TOKEN}", "${AWS_SECRET_ACCESS_KEY}", "${HOME}", "${run_id}", "x"]
    ),
    # No NUL: render refuses it in argv and env (no process can receive one), a refusal the
    # audit corpus (tests/corpus/audit-items) covers; here every other character is drawn.
    st.text(st.characters(blacklist_characters="\x00"), max_size=8),
)
security_contexts = st.fixed_dictionaries(
    {},
    optional={
        "privileged": st.booleans(),
        "allowPrivilegeEscalation": st.booleans(),
        "capabilities": st.fixed_dictionaries(
            {},
            optional={
                "add": st.lists(st.sampled_from(CAPS), max_size=3),
                "drop": st.lists(st.sampled_from(["ALL", "NET_RAW"]), max_size=2),
            },
        ),
        "runAsNonRoot": st.booleans(),
        "runAsUser": st.sampled_from([0, 1000]),
        "seccompProfile": st.fixed_dictionaries(
            {"type": st.sampled_from(["Unconfined", "RuntimeDefault"])}
        ),
        "procMount": st.sampled_from(["Default", "Unmasked"]),
        "appArmorProfile": st.fixed_dictionaries(
            {"type": st.sampled_from(["Unconfined", "RuntimeDefault"])}
        ),
    },
)
containers = st.fixed_dictionaries(
    {"name": st.sampled_from(["main", "pytorch", "leader", "worker", "ray-head", "side"])},
    optional={
        "securityContext": security_contexts,
        "ports": st.lists(
            st.fixed_dictionaries(
                {"containerPort": st.integers(1, 9000)}, optional={"hostPort": st.integers(1, 9000)}
            ),
            max_size=2,
        ),
        "env": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["A", "WANDB_API_KEY", "B"]), "value": texts}
            ),
            max_size=3,
        ),
        "args": st.lists(texts, max_size=3),
    },
)
volumes = st.one_of(
    st.fixed_dictionaries(
        {
            "name": st.just("h"),
            "hostPath": st.fixed_dictionaries({"path": st.sampled_from(["/", "/data/x", "/var"])}),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("n"),
            "nfs": st.fixed_dictionaries({"server": st.just("s"), "path": st.just("/")}),
        }
    ),
    st.fixed_dictionaries({"name": st.just("e"), "emptyDir": st.just({})}),
)
pod_specs = st.fixed_dictionaries(
    {},
    optional={
        "hostNetwork": st.booleans(),
        "hostPID": st.booleans(),
        "hostIPC": st.booleans(),
        "serviceAccountName": st.sampled_from(["default", "cluster-admin"]),
        "serviceAccount": st.just("cluster-admin"),
        "automountServiceAccountToken": st.booleans(),
        "securityContext": st.fixed_dictionaries(
            {},
            optional={
                "runAsUser": st.sampled_from([0, 1000]),
                "runAsNonRoot": st.booleans(),
                "sysctls": st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": st.sampled_from(["kernel.msgmax", "net.ipv4.tcp_syncookies"]),
                            "value": st.just("1"),
                        }
                    ),
                    max_size=2,
                ),
                "seccompProfile": st.fixed_dictionaries(
                    {"type": st.sampled_from(["Unconfined", "RuntimeDefault"])}
                ),
            },
        ),
        "volumes": st.lists(volumes, max_size=3),
        "containers": st.lists(containers, max_size=3),
        "initContainers": st.lists(containers, max_size=2),
        "ephemeralContainers": st.lists(containers, max_size=1),
    },
)
pod_templates = st.fixed_dictionaries(
    {"spec": pod_specs},
    optional={
        "metadata": st.fixed_dictionaries(
            {
                "annotations": st.just(
                    {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
                )
            }
        )
    },
)
exceptions = st.fixed_dictionaries(
    {},
    optional={
        "serviceAccountName": st.just("granted-sa"),
        "automountServiceAccountToken": st.booleans(),
        "runAsRoot": st.booleans(),
        "privileged": st.booleans(),
        "allowPrivilegeEscalation": st.booleans(),
        "capabilities": st.lists(st.sampled_from(CAPS[1:]), max_size=2, unique=True),
        "hostNetwork": st.booleans(),
        "hostPID": st.booleans(),
        "hostIPC": st.booleans(),
        "hostPorts": st.booleans(),
        "hostPaths": st.lists(st.just("/data"), max_size=1),
        "volumeTypes": st.lists(st.just("nfs"), max_size=1),
        "seccompUnconfined": st.booleans(),
        "appArmorUnconfined": st.booleans(),
        "sysctls": st.lists(st.just("kernel.msgmax"), max_size=1),
    },
)

_EXAMPLES = {f: yaml.safe_load((EXAMPLES / f).read_text()) for f in KIND_FILES}


def spec_for(file: str, security: dict[str, Any]) -> Any:
    data = copy.deepcopy(_EXAMPLES[file])
    data["spec"]["overridable"] = ["**", "overrides.**"]
    data["spec"]["security"] = security
    spec, _ = build_queue_spec(data)
    return spec


def layer_for(spec: Any, pod: dict[str, Any], which: int) -> dict[str, Any]:
    """A submitter layer that overlays `pod` on the `which`-th pod template of the spec."""
    info = kind_info(spec.api_version, spec.kind, spec.custom_kind)
    assert info is not None
    paths = [p for p, _ in info.pod_template_matches(spec.template)]
    path = paths[which % len(paths)]
    layer: Any = pod
    for seg in reversed(path):
        if isinstance(seg, str):
            layer = {seg: layer}
        else:  # a named list item: overlay by name
            key_name = "groupName" if spec.kind == "RayJob" else "name"  # Ray's worker groups
            layer = [{key_name: seg.label, **layer}]
    assert isinstance(layer, dict)
    return layer


def granted_rules(sec: dict[str, Any]) -> set[str]:
    allowed: set[str] = set()
    if sec.get("privileged"):
        allowed |= {"privileged", "allowPrivilegeEscalation"}
    if sec.get("allowPrivilegeEscalation"):
        allowed.add("allowPrivilegeEscalation")
    if sec.get("runAsRoot"):
        allowed |= {"runAsNonRoot", "runAsRoot"}
    for key, rule in [
        ("hostNetwork", "hostNetwork"),
        ("hostPID", "hostPID"),
        ("hostIPC", "hostIPC"),
        ("hostPorts", "hostPorts"),
        ("hostPaths", "hostPath"),
        ("volumeTypes", "volumeTypes"),
        ("sysctls", "sysctls"),
        ("seccompUnconfined", "seccomp"),
        ("appArmorUnconfined", "appArmor"),
        ("automountServiceAccountToken", "automountServiceAccountToken"),
        ("serviceAccountName", "serviceAccount"),
    ]:
        if sec.get(key):
            allowed.add(rule)
    return allowed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    file=st.sampled_from(KIND_FILES),
    pod=pod_templates,
    which=st.integers(0, 3),
    security=exceptions,
    args=st.lists(texts, max_size=3),
)
def test_overrides_never_break_the_profile_or_leak(
    file: str, pod: dict[str, Any], which: int, security: dict[str, Any], args: list[str]
) -> None:
    spec = spec_for(file, security)
    item = make_item(
        layer_for(spec, pod, which),
        overrides={"args": args, "run_config": {"k": "${LA_TEST_SECRET_TOKEN}"}},
        _wandb_api_key=API_KEY,
    )
    frozen = json.dumps(item, sort_keys=True)
    out = render(spec, item, None, SETTINGS)

    info = kind_info(spec.api_version, spec.kind, spec.custom_kind)
    assert info is not None
    allowed = granted_rules(security)
    granted_caps = set(security.get("capabilities", ())) | {"NET_BIND_SERVICE"}
    for _path, tmpl in info.pod_template_matches(out.workload):
        assert set(restricted_violations(tmpl)) - {"capabilities"} <= allowed
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for c in tmpl["spec"].get(key, []):
                added = set(c.get("securityContext", {}).get("capabilities", {}).get("add", []))
                assert added <= granted_caps
        sa = tmpl["spec"].get("serviceAccountName")
        assert sa == security.get("serviceAccountName")
        assert "serviceAccount" not in tmpl["spec"]

    text = json.dumps(out.objects) + json.dumps([str(w) for w in out.warnings])
    assert API_KEY not in text
    for value in SECRET_ENV.values():
        assert value not in text

    again = render(spec, copy.deepcopy(item), None, SETTINGS)
    assert json.dumps(again.objects) == json.dumps(out.objects)
    assert json.dumps(item, sort_keys=True) == frozen


# Values shaped like manifests: mappings with a few keys (some of them named lists), lists of
# named or unnamed items, scalars, empties and nulls -- the type changes the allow-list missed.
_keys = st.sampled_from(["a", "b", "env", "containers", "image", "name"])
_scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(["", "x", "y", "main"]), st.just(0))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.dictionaries(_keys, inner, max_size=3),
        st.lists(inner, max_size=3),
        st.lists(st.dictionaries(_keys, inner, max_size=3), max_size=3),
    ),
    max_leaves=12,
)
_manifests = st.dictionaries(_keys, _values, max_size=4)


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    from launch_agent.render.merge import MISSING
    from launch_agent.render.paths import Item, item_label

    for seg in path:
        if isinstance(seg, Item):
            if not isinstance(node, list):
                return MISSING
            node = next((v for i, v in enumerate(node) if item_label(v, i) == seg.label), MISSING)
        elif isinstance(node, dict) and seg in node:
            node = node[seg]
        else:
            return MISSING
    return node


@settings(max_examples=300, deadline=None)
@given(base=_manifests, overlay=_manifests)
# Found by Hypothesis: an unnamed item at the index of a later duplicate name was merged there
# while its path named the first item of that name.
@example(
    base={"containers": [{}, {"name": "x"}, {"name": "x"}]},
    overlay={"containers": [{}, {}, {"a": False}]},
)
def test_the_merge_reports_exactly_what_it_changes(
    base: dict[str, Any], overlay: dict[str, Any]
) -> None:
    from launch_agent.render.merge import MISSING, REMOVED, merge_changes

    merged, changes = merge_changes(base, overlay)
    # No reported change means the result is the template: nothing slips past the policy.
    if not changes:
        assert merged == base
    for change in changes:
        got = _at(merged, change.path)
        if change.value is REMOVED:
            assert got is MISSING or change.base is MISSING
        else:
            assert got == change.value or isinstance(got, dict)
        assert _at(base, change.path) == change.base or change.base is MISSING


_secret_names_drawn = st.sampled_from(["team-a", "prod-db", "kube-root"])
_secret_env = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["S1", "S2", "WANDB_API_KEY"]),
        "valueFrom": st.fixed_dictionaries(
            {
                "secretKeyRef": st.fixed_dictionaries(
                    {"name": _secret_names_drawn, "key": st.just("k")}
                )
            }
        ),
    }
)
_secret_volumes = st.one_of(
    st.fixed_dictionaries(
        {
            "name": st.just("sv"),
            "secret": st.fixed_dictionaries({"secretName": _secret_names_drawn}),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("pv"),
            "projected": st.fixed_dictionaries(
                {
                    "sources": st.lists(
                        st.one_of(
                            st.fixed_dictionaries(
                                {"secret": st.fixed_dictionaries({"name": _secret_names_drawn})}
                            ),
                            st.just({"serviceAccountToken": {"path": "t"}}),
                        ),
                        min_size=1,
                        max_size=2,
                    )
                }
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("cv"),
            "csi": st.fixed_dictionaries(
                {
                    "driver": st.just("d"),
                    "nodePublishSecretRef": st.fixed_dictionaries({"name": _secret_names_drawn}),
                }
            ),
        }
    ),
)
_secret_pods = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["main", "pytorch", "leader", "ray-head", "side"])},
                optional={
                    "env": st.lists(_secret_env, max_size=2),
                    "envFrom": st.lists(
                        st.fixed_dictionaries(
                            {"secretRef": st.fixed_dictionaries({"name": _secret_names_drawn})}
                        ),
                        max_size=1,
                    ),
                },
            ),
            max_size=2,
        ),
        "volumes": st.lists(_secret_volumes, max_size=2),
        "imagePullSecrets": st.lists(
            st.fixed_dictionaries({"name": _secret_names_drawn}), max_size=1
        ),
    },
)


def _secrets_and_tokens(tmpl: dict[str, Any]) -> tuple[set[str], int]:
    """Secret names and token projections in a pod template, read at the PodSpec's fields."""
    spec = tmpl.get("spec", {})
    names = {s.get("name") for s in spec.get("imagePullSecrets", []) or []}
    tokens = 0
    for v in spec.get("volumes", []) or []:
        names.add((v.get("secret") or {}).get("secretName"))
        names.add(((v.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name"))
        for src in (v.get("projected") or {}).get("sources", []) or []:
            names.add((src.get("secret") or {}).get("name"))
            tokens += "serviceAccountToken" in src
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key, []) or []:
            for e in c.get("env", []) or []:
                names.add(((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name"))
            for e in c.get("envFrom", []) or []:
                names.add((e.get("secretRef") or {}).get("name"))
    names.discard(None)
    return names, tokens


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=st.sampled_from(KIND_FILES), pod=_secret_pods, which=st.integers(0, 3))
def test_no_grant_lets_a_submitter_name_an_unlisted_secret_or_mint_a_token(
    file: str, pod: dict[str, Any], which: int
) -> None:
    from launch_agent.model.queue_spec import InvalidInput

    spec = spec_for(file, {"secrets": ["team-a"]})
    item = make_item(layer_for(spec, {"spec": pod}, which))
    refused: tuple[Any, ...] = ()
    try:
        out = render(spec, item, None, SETTINGS)
    except InvalidInput as exc:
        refused = exc.problems
    if refused:  # refused, and only for what no grant allows
        assert all("refused even where" in p.reason for p in refused)
        return
    info = kind_info(spec.api_version, spec.kind, spec.custom_kind)
    assert info is not None
    for _path, tmpl in info.pod_template_matches(out.workload):
        names, tokens = _secrets_and_tokens(tmpl)
        assert names <= {"team-a", SETTINGS.api_key_secret}
        assert tokens == 0
