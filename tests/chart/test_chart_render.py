"""The chart lints, and everything it renders is valid Kubernetes for 1.28 through 1.37.

Validation is `kubernetes_validate.validate(obj, version, strict=True)`: the published OpenAPI
schemas with unknown fields rejected, the same check as `kubernetes-validate --strict` without a
process per object. Objects of a CRD kind with no core schema are allowed only from a short list,
and then checked for the fields the CRD requires, or, for a CRD vendored in tests/fixtures/crds,
validated against its schema with unknown fields rejected (scripts/extract_crd_schemas.py's
`strictify`, the same rule the agent's rendered CRs are held to).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.chart.helm import (
    CHART,
    CI_VALUES,
    KUBERNETES_VERSIONS,
    ROOT,
    Helm,
    Manifest,
)

# Kinds the chart may render that are CRDs (no core schema): what each must carry.
CRD_KINDS = {"ServiceMonitor": ("monitoring.coreos.com/v1", ("selector", "endpoints"))}
# Kinds validated against a vendored upstream CRD: (apiVersion, kind) -> the CRD file.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml"
}


@functools.cache
def crd_schema(file: str, version: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        "extract_crd_schemas", ROOT / "scripts" / "extract_crd_schemas.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    crd = yaml.safe_load((ROOT / "tests" / "fixtures" / "crds" / file).read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return module.strictify(served["schema"]["openAPIV3Schema"])


def validate_crd_object(manifest: Manifest, file: str) -> str | None:
    name = f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}"
    version = str(manifest.get("apiVersion")).rpartition("/")[2]
    errors = sorted(
        jsonschema.Draft7Validator(crd_schema(file, version)).iter_errors(manifest),
        key=lambda e: list(e.path),
    )
    if errors:
        path = ".".join(str(p) for p in errors[0].path)
        return f"{name}: {path}: {errors[0].message}"
    return None


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint_strict(helm: Helm, values: Path) -> None:
    result = helm.run("lint", "--strict", str(CHART), "--values", str(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_lint_fails_without_an_api_key_source(helm: Helm) -> None:
    # W&B's chart passed lint without a key and failed only at install; the schema catches it.
    result = helm.run("lint", "--strict", str(CHART))
    assert result.returncode != 0
    assert "/agent/apiKey" in result.stdout + result.stderr


def validate_manifest(manifest: Manifest, version: str) -> str | None:
    """None if valid for `version`, else a one-line reason naming the object and field."""
    name = f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}"
    crd_file = CRD_SCHEMAS.get((str(manifest.get("apiVersion")), str(manifest.get("kind"))))
    if crd_file is not None:
        return validate_crd_object(manifest, crd_file)
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        expected = CRD_KINDS.get(str(manifest.get("kind")))
        if expected is None:
            return f"{name}: no schema for {manifest.get('apiVersion')} in Kubernetes {version}"
        api_version, required = expected
        missing = [key for key in required if key not in manifest.get("spec", {})]
        if manifest.get("apiVersion") != api_version or missing:
            return f"{name}: expected {api_version} with spec keys {required}"
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return f"{name}: {path}: {exc.message}"
    return None


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_rendered_objects_validate_strictly(
    rendered: dict[str, list[Manifest]], values: Path, version: str
) -> None:
    manifests = rendered[values.name]
    problems = [p for m in manifests if (p := validate_manifest(m, version))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("manifest", "fragment"),
    [
        # Unquoted env values, W&B's defect 1: YAML reads them as a bool and an int.
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": True}]}]},
            },
            "is not of type 'string'",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c"},
                "dataa": {},
            },
            "Additional properties are not allowed",
        ),
        (
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
            "no schema",
        ),
        (
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": {"name": "m"},
                "spec": {"selector": {}},
            },
            "expected monitoring.coreos.com/v1",
        ),
        (
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": {"name": "r"},
                "spec": {
                    "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "x": 1}]}]
                },
            },
            "Additional properties are not allowed ('x' was unexpected)",
        ),
    ],
)
def test_the_validator_rejects_bad_objects(manifest: Manifest, fragment: str) -> None:
    problem = validate_manifest(manifest, "1.37")
    assert problem is not None and fragment in problem


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_rendered_text_has_no_whitespace_only_lines(
    rendered_text: dict[str, str], values: Path
) -> None:
    text = rendered_text[values.name]
    bad = [n for n, line in enumerate(text.splitlines(), 1) if line and not line.strip()]
    bad += [n for n, line in enumerate(text.splitlines(), 1) if line != line.rstrip()]
    assert not bad, f"whitespace-only or trailing-space lines at {sorted(set(bad))[:10]}"


def test_values_and_ci_files_pass_yamllint() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "yamllint",
            "--strict",
            "-c",
            str(ROOT / ".yamllint"),
            str(CHART / "Chart.yaml"),
            str(CHART / "values.yaml"),
            str(CHART / "ci"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# A value action printed after "key: " must be quoted, serialised (toYaml/toJson) or one of the
# integer fields Kubernetes requires as numbers.
_VALUE_ACTION = re.compile(r":\s+\{\{-?\s*(?P<expr>.*?)\s*-?\}\}\s*$")
_NUMERIC_KEYS = re.compile(
    r"^\s*-?\s*(port|containerPort|terminationGracePeriodSeconds|minAvailable|maxUnavailable|replicas):"
)


def unquoted_values(text: str) -> list[str]:
    """Template lines that print a scalar value without `quote` (pure, for the test below)."""
    bad = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _VALUE_ACTION.search(line)
        if not match or _NUMERIC_KEYS.match(line):
            continue
        if not any(
            word in match.group("expr") for word in ("quote", "toYaml", "toJson", "nindent")
        ):
            bad.append(f"{number}: {line.strip()}")
    return bad


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        ("  name: {{ .Values.name }}", True),
        ('  name: {{ include "x" . }}', True),
        ("  name: {{ .Values.name | quote }}", False),
        ("  port: {{ .Values.port }}", False),
        ("    {{- toYaml . | nindent 8 }}", False),
        ('  image: {{ required "msg" .Values.image | quote }}', False),
    ],
)
def test_unquoted_value_check(line: str, flagged: bool) -> None:
    assert bool(unquoted_values(line)) is flagged


@pytest.mark.parametrize(
    "template", sorted((CHART / "templates").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_templated_scalar_is_quoted(template: Path) -> None:
    text = template.read_text()
    assert not unquoted_values(text), "\n".join(unquoted_values(text))
