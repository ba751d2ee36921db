"""`multikueue.workers`: each worker's kubeconfig Secret mounted read-only, and the launch
config's `multikueue.workers` entries that point at it (issue 29, docs/multicluster.md).

The generated config is loaded with the agent's own resolver, so what the chart writes is what
the agent accepts; the kubeconfig path in it is followed to the volume that puts the file there.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from launch_agent.model.config_resolve import ConfigError
from tests.chart.conftest import ci_file
from tests.chart.helm import CHART, RELEASE, Helm, HelmError, Manifest, find, one
from tests.chart.test_chart_render import validate_manifest
from tests.chart.test_chart_security import restricted_violations
from tests.chart.test_chart_values import load_agent_config

DEFAULT = ci_file("default-values.yaml")
MULTIKUEUE = ci_file("multikueue-values.yaml")
WORKERS = [
    {"name": "worker-1", "secretName": "worker-1-reader"},
    {"name": "worker-2.eu", "secretName": "w2", "key": "config", "context": "reader@w2"},
]


def render(helm: Helm, tmp_path: Any, values: dict[str, Any]) -> list[Manifest]:
    extra = tmp_path / "workers.yaml"
    extra.write_text(yaml.safe_dump(values))
    return helm.template([DEFAULT, extra])


def pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = one(manifests, "Deployment")["spec"]["template"]["spec"]
    return spec


def agent_container(manifests: list[Manifest]) -> dict[str, Any]:
    return next(c for c in pod_spec(manifests)["containers"] if c["name"] == "launch-agent")


def config_text(manifests: list[Manifest]) -> str:
    config_map = next(
        m for m in find(manifests, "ConfigMap") if m["metadata"]["name"] == "rel-config"
    )
    text: str = config_map["data"]["launch-config.yaml"]
    return text


def secret_file(manifests: list[Manifest], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The mount and the Secret volume that put a file at `path` in the agent's container."""
    where = PurePosixPath(path)
    mount = next(
        m for m in agent_container(manifests)["volumeMounts"] if m["mountPath"] == str(where.parent)
    )
    volume = next(v for v in pod_spec(manifests)["volumes"] if v["name"] == mount["name"])
    assert [item["path"] for item in volume["secret"]["items"]] == [where.name]
    return mount, volume


def test_the_agent_reads_every_worker_where_the_chart_mounts_it(
    rendered: dict[str, list[Manifest]],
) -> None:
    manifests = rendered[MULTIKUEUE.name]
    workers = load_agent_config(manifests).config.multikueue.workers
    # launchConfig's own worker first, then the chart's, in the order of the values.
    assert [(w.name, w.context) for w in workers] == [
        ("worker-3", None),
        ("worker-1", None),
        ("worker-2.eu-west", "reader@worker-2"),
    ]
    assert workers[0].kubeconfig == "/home/launch-agent/worker-3.kubeconfig"
    found = {}
    for worker in workers[1:]:
        assert worker.kubeconfig == f"/etc/launch-agent/workers/{worker.name}/kubeconfig"
        mount, volume = secret_file(manifests, worker.kubeconfig)
        assert mount["readOnly"] is True and "subPath" not in mount
        found[worker.name] = volume["secret"]
    assert found == {
        "worker-1": {
            "secretName": "worker-1-reader",
            "defaultMode": 0o440,
            "optional": True,
            "items": [{"key": "kubeconfig", "path": "kubeconfig"}],
        },
        "worker-2.eu-west": {
            "secretName": "worker-2-reader",
            "defaultMode": 0o440,
            "optional": True,
            "items": [{"key": "config", "path": "kubeconfig"}],
        },
    }


def test_the_kubeconfig_is_readable_by_the_agent_and_by_no_one_else(
    rendered: dict[str, list[Manifest]],
) -> None:
    # The kubelet writes a Secret volume's files as root:fsGroup: the mode must let the group,
    # which the agent's user is in, read them, and give the others nothing.
    spec = pod_spec(rendered[MULTIKUEUE.name])
    context = spec["securityContext"]
    assert context["runAsUser"] != 0 and context["fsGroup"] == context["runAsGroup"]
    modes = {v["name"]: v["secret"]["defaultMode"] for v in spec["volumes"] if "secret" in v}
    workers = {name: mode for name, mode in modes.items() if name.startswith("multikueue-worker-")}
    assert workers == {"multikueue-worker-0": 0o440, "multikueue-worker-1": 0o440}
    assert restricted_violations(spec) == []


def test_the_agent_s_own_rbac_on_the_manager_gains_only_the_workload_read(
    helm: Helm, tmp_path: Any
) -> None:
    # The kubelet mounts the Secrets; the agent is given no right to read them itself. What
    # MultiKueue adds is the read of the manager's Workloads (the test below).
    kinds = ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount")

    def without_kueue(manifests: list[Manifest]) -> list[Manifest]:
        out = []
        for m in manifests:
            if m["kind"] not in kinds:
                continue
            rules = [r for r in m.get("rules") or [] if "kueue.x-k8s.io" not in r["apiGroups"]]
            out.append({**m, "rules": rules} if "rules" in m else m)
        return out

    without = without_kueue(helm.template([DEFAULT]))
    with_workers = without_kueue(render(helm, tmp_path, {"multikueue": {"workers": WORKERS}}))
    assert with_workers == without


def test_a_launch_config_text_stays_verbatim_and_the_workers_follow_it(
    helm: Helm, tmp_path: Any
) -> None:
    manifests = render(
        helm,
        tmp_path,
        {
            "launchConfig": "queues: [a]\n# the admin's comment\nmax_job: 3\n",
            "multikueue": {"workers": WORKERS},
        },
    )
    text = config_text(manifests)
    assert text.startswith("queues: [a]\n# the admin's comment\nmax_job: 3\n")
    # The agent's errors still point at the admin's own line.
    with pytest.raises(ConfigError) as caught:
        load_agent_config(manifests)
    assert "launch-config.yaml:3: max_job: unknown key" in str(caught.value)


def test_a_launch_config_mapping_is_merged_the_same_way(helm: Helm, tmp_path: Any) -> None:
    # The mapping form is .Values itself, which the ConfigMap, its checksum and the notes each
    # read: the merge must not write the chart's workers into it (the second reader would then
    # find every worker given twice).
    launch_config = {
        "queues": ["a"],
        "multikueue": {"workers": [{"name": "worker-0", "kubeconfig": "/home/launch-agent/w0"}]},
    }
    values = {"launchConfig": launch_config, "multikueue": {"workers": WORKERS}}
    manifests = render(helm, tmp_path, values)
    workers = load_agent_config(manifests).config.multikueue.workers
    assert [w.name for w in workers] == ["worker-0", "worker-1", "worker-2.eu"]
    values_file = tmp_path / "install.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = helm.run(
        "install",
        RELEASE,
        str(CHART),
        "--dry-run=client",
        "--namespace",
        "agents",
        "--values",
        str(DEFAULT),
        "--values",
        str(values_file),
    )
    assert result.returncode == 0, result.stderr


def test_the_workers_reach_a_config_with_quota_from_the_chart(helm: Helm, tmp_path: Any) -> None:
    manifests = render(
        helm,
        tmp_path,
        {"quota": {"mode": "kueue"}, "multikueue": {"workers": WORKERS[:1]}},
    )
    config = load_agent_config(manifests).config
    assert config.quota.mode == "kueue"
    assert [w.name for w in config.multikueue.workers] == ["worker-1"]


@pytest.mark.parametrize(
    "name",
    ["Worker-1", "worker_1", "-worker", "worker-", "worker..1", "a" * 254, "worker 1", "w/1"],
)
def test_a_worker_name_that_is_not_a_dns_subdomain_is_refused(
    helm: Helm, tmp_path: Any, name: str
) -> None:
    workers = [WORKERS[0], {"name": name, "secretName": "s"}]
    with pytest.raises(HelmError) as caught:
        render(helm, tmp_path, {"multikueue": {"workers": workers}})
    assert f"multikueue.workers[1].name: {name!r}".replace("'", '"') in str(caught.value)
    assert "is not a DNS-1123 subdomain" in str(caught.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"multikueue": {"workers": [WORKERS[0], {"name": "worker-1", "secretName": "other"}]}},
            'multikueue.workers[1].name: worker "worker-1" is already multikueue.workers[0]',
        ),
        (
            {
                "launchConfig": "queues: [a]\nmultikueue:\n  workers:\n"
                "    - {name: worker-0, kubeconfig: /k}\n    - {name: worker-1, kubeconfig: /k}\n",
                "multikueue": {"workers": WORKERS},
            },
            'worker "worker-1" is also listed in launchConfig (multikueue.workers[1])',
        ),
        (
            {
                "launchConfig": {
                    "multikueue": {"workers": [{"name": "worker-2.eu", "kubeconfig": "/k"}]}
                },
                "multikueue": {"workers": WORKERS},
            },
            'worker "worker-2.eu" is also listed in launchConfig (multikueue.workers[0])',
        ),
        (
            {"launchConfig": "multikueue: [worker-0]\n", "multikueue": {"workers": WORKERS}},
            "launchConfig: multikueue is not a mapping",
        ),
        (
            {
                "launchConfig": "multikueue:\n  workers: worker-0\n",
                "multikueue": {"workers": WORKERS},
            },
            "launchConfig: multikueue.workers is not a list",
        ),
    ],
    ids=["twice", "both-ways-text", "both-ways-mapping", "not-a-mapping", "not-a-list"],
)
def test_a_worker_given_twice_is_refused(
    helm: Helm, tmp_path: Any, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError) as caught:
        render(helm, tmp_path, values)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("worker", "where"),
    [
        ({"name": "worker-1"}, "missing property 'secretName'"),
        ({"name": "worker-1", "secretName": "Worker_1"}, "/multikueue/workers/0/secretName"),
        ({"name": "worker-1", "secretName": "s", "key": "a/b"}, "/multikueue/workers/0/key"),
        (
            {"name": "worker-1", "secretName": "s", "context": "a\nb"},
            "/multikueue/workers/0/context",
        ),
        ({"name": "worker-1", "secretName": "s", "secret": "s"}, "additional properties 'secret'"),
        ({"name": "", "secretName": "s"}, "/multikueue/workers/0/name"),
    ],
)
def test_the_schema_refuses_a_malformed_worker(
    helm: Helm, tmp_path: Any, worker: dict[str, Any], where: str
) -> None:
    with pytest.raises(HelmError) as caught:
        render(helm, tmp_path, {"multikueue": {"workers": [worker]}})
    assert "values don't meet the specifications of the schema" in str(caught.value)
    assert where in str(caught.value)


def test_no_workers_renders_what_the_chart_rendered_before(helm: Helm, tmp_path: Any) -> None:
    default = helm.template_text([DEFAULT])
    empty = tmp_path / "empty.yaml"
    empty.write_text(yaml.safe_dump({"multikueue": {"workers": []}}))
    assert helm.template_text([DEFAULT, empty]) == default
    manifests = [doc for doc in yaml.safe_load_all(default) if doc]
    assert "multikueue" not in config_text(manifests)
    assert not [v for v in pod_spec(manifests)["volumes"] if "multikueue" in v["name"]]


def test_the_multikueue_values_render_valid_objects(rendered: dict[str, list[Manifest]]) -> None:
    problems = [p for m in rendered[MULTIKUEUE.name] if (p := validate_manifest(m, "1.37"))]
    assert not problems, "\n".join(problems)


def notes(helm: Helm, *files: Any) -> str:
    args = ["install", RELEASE, str(CHART), "--dry-run=client", "--namespace", "agents"]
    for file in files:
        args += ["--values", str(file)]
    result = helm.run(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def worker_rbac(manifests: list[Manifest]) -> list[Manifest]:
    config_map = next(
        m
        for m in find(manifests, "ConfigMap")
        if m["metadata"]["name"] == "rel-multikueue-worker-rbac"
    )
    return [doc for doc in yaml.safe_load_all(config_map["data"]["worker-rbac.yaml"]) if doc]


def test_the_worker_rbac_is_the_file_filled_in_for_the_release(
    rendered: dict[str, list[Manifest]],
) -> None:
    manifests = rendered[MULTIKUEUE.name]
    docs = worker_rbac(manifests)
    problems = [p for doc in docs if (p := validate_manifest(doc, "1.37"))]
    assert not problems, "\n".join(problems)
    shipped = [
        doc
        for doc in yaml.safe_load_all((CHART / "files" / "multikueue-worker-rbac.yaml").read_text())
        if doc
    ]
    assert [d["kind"] for d in docs] == [d["kind"] for d in shipped] + ["RoleBinding"]
    # The same rights as the file, for this release's API-key Secret.
    (role,) = find(docs, "ClusterRole")
    (shipped_role,) = find(shipped, "ClusterRole")
    assert shipped_role["rules"][-1]["resourceNames"] == ["wandb-api-key-launch-agent"]
    shipped_role["rules"][-1]["resourceNames"] = ["wandb-api-key-rel"]
    assert role["rules"] == shipped_role["rules"]
    # One binding per namespace runs can be placed in, to the reader in the agent's namespace.
    bindings = find(docs, "RoleBinding")
    assert {b["metadata"]["namespace"] for b in bindings} == {"agents", "ml-training"}
    (account,) = find(docs, "ServiceAccount")
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "rel-worker-reader", "namespace": "agents"}
        ]
    assert account["metadata"] == {"name": "rel-worker-reader", "namespace": "agents"}
    (token,) = find(docs, "Secret")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "rel-worker-reader"
    }
    # Nothing of it is an object on the manager.
    assert not [
        m for m in manifests if m["kind"] == "ServiceAccount" and "worker" in m["metadata"]["name"]
    ]


def test_the_worker_rbac_names_an_existing_secret(helm: Helm, tmp_path: Any) -> None:
    manifests = render(
        helm,
        tmp_path,
        {
            "existingSecret": "team-wandb-key",
            "agent": {"apiKey": ""},
            "additionalTargetNamespaces": ["team-a"],
            "multikueue": {"workers": WORKERS[:1]},
        },
    )
    docs = worker_rbac(manifests)
    (role,) = find(docs, "ClusterRole")
    assert role["rules"][-1]["resourceNames"] == ["team-wandb-key"]
    assert {b["metadata"]["namespace"] for b in find(docs, "RoleBinding")} == {"agents", "team-a"}


def test_notes_say_what_to_apply_on_each_worker(helm: Helm) -> None:
    text = notes(helm, MULTIKUEUE)
    assert (
        "MultiKueue workers: worker-1 (kubeconfig from Secret worker-1-reader, key kubeconfig)"
        in text
    )
    assert (
        "worker-2.eu-west (kubeconfig from Secret worker-2-reader, key config, context"
        " reader@worker-2)"
    ) in text
    assert (
        "kubectl -n agents get configmap rel-multikueue-worker-rbac"
        " -o jsonpath='{.data.worker-rbac\\.yaml}' \\\n    | kubectl --context WORKER apply -f -"
    ) in text
    assert "and get on wandb-api-key-rel, in agents, ml-training" in text
    assert "in the worker's Secret agents/rel-worker-reader-token" in text
    assert (
        "kubectl -n agents create secret generic worker-2-reader"
        " --from-file=config=<worker-2.eu-west kubeconfig>"
    ) in text
    assert "MultiKueue" not in notes(helm, DEFAULT)


@pytest.mark.parametrize("mode", ["off", "agent"])
def test_with_workers_the_agent_may_read_the_managers_workloads_whatever_the_quota_mode(
    helm: Helm, tmp_path: Any, mode: str
) -> None:
    """The agent watches the manager's Workloads of MultiKueue queue specs under every quota
    mode (docs/multicluster.md); without the grant that watch is refused."""

    def kueue_rules(values: dict[str, Any]) -> list[dict[str, Any]]:
        roles = find(render(helm, tmp_path, {"quota": {"mode": mode}, **values}), "Role")
        return [
            rule
            for role in roles
            for rule in role.get("rules") or []
            if "kueue.x-k8s.io" in rule.get("apiGroups", [])
        ]

    assert kueue_rules({}) == []
    granted = kueue_rules({"multikueue": {"workers": WORKERS}})
    assert granted, "no Kueue read with MultiKueue workers listed"
    assert all(sorted(r["verbs"]) == ["get", "list", "watch"] for r in granted), granted
    assert {res for r in granted for res in r["resources"]} == {"localqueues", "workloads"}
