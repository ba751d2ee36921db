"""The Kaniko build Job: strict Kubernetes schema, flags, credentials per registry, overlay."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from launch_agent.model.build import BuildRequest, BuildSource, SourceKind, parse_destination
from launch_agent.model.config import BuilderConfig
from launch_agent.render.kaniko import IMAGE_TAG, KanikoSettings, job_name, kaniko_job

SHA = "a" * 40
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/train"
GAR = "europe-west4-docker.pkg.dev/proj/repo/train"
ACR = "myreg01.azurecr.io/ml/train"
GENERIC = "registry.example:5000/ml/train"
CONTEXT = "s3://ctx-bucket/builds/run-1.tgz"


def request(dest: str = GENERIC, run_id: str = "run-1") -> BuildRequest:
    return BuildRequest(
        run_id,
        BuildSource(SourceKind.GIT, "https://git.example/ml.git", SHA),
        "FROM python:3.11\n",
        dest,
        build_args=(("PIP_INDEX", "https://pypi.example/simple"),),
        agent="agent-a",
        run_queue_item="UnVuUXVldWVJdGVtOjE=",
    )


def render(dest: str = GENERIC, docker_secret: str | None = None, **builder: Any) -> dict[str, Any]:
    config = BuilderConfig.model_validate(
        {"type": "kaniko", "build-context-store": "s3://ctx-bucket/builds", **builder}
    )
    settings = KanikoSettings(config, "kaniko", "kaniko-builder", docker_secret)
    return kaniko_job(request(dest), parse_destination(dest), CONTEXT, settings)


def container(job: dict[str, Any]) -> dict[str, Any]:
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def args(job: dict[str, Any]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in container(job)["args"] if not a.startswith("--build-arg"))


CASES: dict[str, dict[str, Any]] = {
    "generic": {"dest": GENERIC},
    "generic-docker-secret": {"dest": GENERIC, "docker_secret": "push-creds"},
    "ecr-irsa": {"dest": ECR},
    "ecr-secret": {"dest": ECR, "secret-name": "aws", "secret-key": "credentials"},
    "gar-wi": {"dest": GAR},
    "gar-secret": {"dest": GAR, "secret-name": "gcp", "secret-key": "key.json"},
    "acr": {"dest": ACR},
    "overlay": {
        "dest": GENERIC,
        "kaniko-config": {
            "metadata": {"name": "ignored", "annotations": {"team": "ml"}},
            "spec": {
                "activeDeadlineSeconds": 600,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "args": ["--cache=false", "--verbosity=debug"],
                                "resources": {"limits": {"cpu": "4", "memory": "8Gi"}},
                            }
                        ],
                        "tolerations": [{"key": "build", "operator": "Exists"}],
                    }
                },
            },
        },
    },
}


def _render_case(case: dict[str, Any]) -> dict[str, Any]:
    case = dict(case)
    dest = case.pop("dest")
    docker = case.pop("docker_secret", None)
    return render(dest, docker, **case)


@pytest.mark.parametrize("version", ["1.28", "1.33", "1.37"])
@pytest.mark.parametrize("case", CASES)
def test_job_validates_strictly(case: str, version: str) -> None:
    kubernetes_validate.validate(_render_case(CASES[case]), version, strict=True)


def test_the_validator_catches_a_bad_job() -> None:
    job = render()
    container(job)["argz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.33", strict=True)


def test_flags_and_identity() -> None:
    job = render()
    req = request()
    assert job["metadata"]["name"] == f"wandb-launch-container-build-{req.tag}"
    assert job["metadata"]["namespace"] == "kaniko"
    assert job["metadata"]["labels"][IMAGE_TAG] == req.tag
    assert job["metadata"]["labels"]["launch-agent.io/run-id"] == "run-1"
    assert job["metadata"]["labels"]["launch-agent.io/agent"] == "agent-a"
    assert job["metadata"]["annotations"]["launch-agent.io/run-queue-item-id"] == (
        "UnVuUXVldWVJdGVtOjE="
    )
    assert args(job) == {
        "--context": CONTEXT,
        "--dockerfile": "Dockerfile",
        "--destination": req.image,
        "--cache": "true",
        "--cache-repo": f"{GENERIC}/cache",
        "--snapshot-mode": "redo",
        "--compressed-caching": "false",
        "--digest-file": "/dev/termination-log",
    }
    assert container(job)["terminationMessagePath"] == "/dev/termination-log"
    assert container(job)["terminationMessagePolicy"] == "File"
    assert "--build-arg=PIP_INDEX=https://pypi.example/simple" in container(job)["args"]
    spec = job["spec"]
    assert (
        spec["backoffLimit"],
        spec["activeDeadlineSeconds"],
        spec["ttlSecondsAfterFinished"],
    ) == (0, 1800, 600)
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "kaniko-builder"
    assert pod["automountServiceAccountToken"] is False
    assert container(job)["image"] == "gcr.io/kaniko-project/executor:v1.23.2"
    assert container(job)["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}


@pytest.mark.parametrize(
    ("case", "env", "mounts", "pod_label"),
    [
        ("generic", {}, {}, None),
        ("generic-docker-secret", {}, {"docker-config": "/kaniko/.docker"}, None),
        ("ecr-irsa", {"AWS_REGION": "us-east-1"}, {}, None),
        (
            "ecr-secret",
            {"AWS_REGION": "us-east-1", "AWS_SHARED_CREDENTIALS_FILE": "/kaniko/.aws/credentials"},
            {"aws-credentials": "/kaniko/.aws"},
            None,
        ),
        ("gar-wi", {}, {}, None),
        (
            "gar-secret",
            {"GOOGLE_APPLICATION_CREDENTIALS": "/secret/gcp/key.json"},
            {"gcp-credentials": "/secret/gcp"},
            None,
        ),
        ("acr", {}, {}, "azure.workload.identity/use"),
    ],
)
def test_credentials_per_registry(
    case: str, env: dict[str, str], mounts: dict[str, str], pod_label: str | None
) -> None:
    job = _render_case(CASES[case])
    c = container(job)
    assert {e["name"]: e["value"] for e in c.get("env", [])} == env
    assert {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])} == mounts
    volumes = job["spec"]["template"]["spec"].get("volumes", [])
    # Credentials come only from Secrets, never from ConfigMaps.
    assert all(set(v) == {"name", "secret"} for v in volumes)
    assert "ConfigMap" not in str(job) and "configMap" not in str(job)
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert (pod_label in labels) if pod_label else "azure.workload.identity/use" not in labels


def test_overlay_tunes_but_cannot_change_identity() -> None:
    job = _render_case(CASES["overlay"])
    assert job["metadata"]["name"].startswith("wandb-launch-container-build-")
    assert job["metadata"]["annotations"]["team"] == "ml"
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["backoffLimit"] == 0
    assert args(job)["--cache"] == "false"
    assert "--verbosity=debug" in container(job)["args"]
    assert container(job)["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "build", "operator": "Exists"}
    ]


def test_the_digest_file_cannot_be_moved_by_the_overlay() -> None:
    """The agent reads the digest Kaniko pushed from the termination message: an overlay that
    moved the file (or the container's termination message path) would hide it."""
    overlay: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "args": ["--digest-file=/tmp/elsewhere", "--digest-file"],
                            "terminationMessagePath": "/tmp/x",
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ]
                }
            }
        }
    }
    job = _render_case({"dest": GENERIC, "kaniko-config": overlay})
    flags = [a for a in container(job)["args"] if a.startswith("--digest-file")]
    assert flags == ["--digest-file=/dev/termination-log"]
    assert container(job)["terminationMessagePath"] == "/dev/termination-log"
    assert container(job)["terminationMessagePolicy"] == "File"
    kubernetes_validate.validate(job, "1.33", strict=True)


@pytest.mark.parametrize(
    ("prefix", "tag"),
    [("wandb-launch-container-build", "a" * 20), ("x" * 80, "b" * 20), ("build-", "c" * 20)],
)
def test_job_names_are_valid(prefix: str, tag: str) -> None:
    name = job_name(prefix, tag)
    assert len(name) <= 63
    assert name.endswith(tag)
    assert "--" not in name[: -len(tag)] or prefix.endswith("-")
    assert name[0].isalnum()


def test_same_image_same_job_name_different_runs() -> None:
    settings = KanikoSettings(BuilderConfig(), "kaniko")
    a = kaniko_job(request(run_id="run-a"), parse_destination(GENERIC), CONTEXT, settings)
    b = kaniko_job(request(run_id="run-b"), parse_destination(GENERIC), CONTEXT, settings)
    assert a["metadata"]["name"] == b["metadata"]["name"]
