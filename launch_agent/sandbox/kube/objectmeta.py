"""Object metadata validation, in kube-apiserver's words.

`staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go` (`ValidateObjectMeta`,
`ValidateAnnotations`) and `.../apis/meta/v1/validation/validation.go` (`ValidateLabels`),
with the messages of `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`:
names are RFC 1123 subdomains (Namespaces: labels, at most 63 characters), label keys are
qualified names (an optional DNS-subdomain prefix, `/`, a name part of at most 63 characters),
label values at most 63 characters, and all annotations together at most 256 KiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + ")*"
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = "(" + QUALIFIED_NAME + ")?"
TOTAL_ANNOTATION_SIZE = 256 * 1024

_LABEL_RE = re.compile(f"^{DNS1123_LABEL}$")
_SUBDOMAIN_RE = re.compile(f"^{DNS1123_SUBDOMAIN}$")
_QUALIFIED_RE = re.compile(f"^{QUALIFIED_NAME}$")
_VALUE_RE = re.compile(f"^{LABEL_VALUE}$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or"
    " '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex"
    f" used for validation is '{DNS1123_SUBDOMAIN}')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and"
    " must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex"
    f" used for validation is '{DNS1123_LABEL}')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end"
    " with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used"
    f" for validation is '{QUALIFIED_NAME}')"
)
VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or"
    " '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or"
    f" 'my_value',  or '12345', regex used for validation is '{LABEL_VALUE}')"
)

Causes = list[tuple[str, str]]


def _name(value: str, label: bool) -> list[str]:
    """`IsDNS1123Subdomain` / `IsDNS1123Label`."""
    problems = []
    limit = 63 if label else 253
    if len(value) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not (_LABEL_RE if label else _SUBDOMAIN_RE).match(value):
        problems.append(LABEL_MSG if label else SUBDOMAIN_MSG)
    return problems


def _qualified(key: str) -> list[str]:
    """`IsQualifiedName`."""
    prefix, slash, name = key.rpartition("/")
    problems = []
    if slash:
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix):
            problems.append("prefix part " + SUBDOMAIN_MSG)
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_RE.match(name):
        problems.append(NAME_PART_MSG)
    return problems


def validate_meta(kind: str, meta: Mapping[str, Any], *, check_name: bool = True) -> Causes:
    """(field path, message) pairs, empty when the metadata is valid."""
    causes: Causes = []
    name = meta.get("name")
    if check_name and isinstance(name, str):
        for problem in _name(name, label=kind == "Namespace"):
            causes.append(("metadata.name", f'Invalid value: "{name}": {problem}'))
    labels = meta.get("labels") or {}
    if isinstance(labels, Mapping):
        for key, value in labels.items():
            for problem in _qualified(str(key)):
                causes.append(("metadata.labels", f'Invalid value: "{key}": {problem}'))
            text = "" if value is None else str(value)
            if len(text) > 63:
                causes.append(
                    (
                        "metadata.labels",
                        f'Invalid value: "{text}": must be no more than 63 characters',
                    )
                )
            if not _VALUE_RE.match(text):
                causes.append(("metadata.labels", f'Invalid value: "{text}": {VALUE_MSG}'))
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, Mapping):
        total = 0
        for key, value in annotations.items():
            for problem in _qualified(str(key).lower()):
                causes.append(("metadata.annotations", f'Invalid value: "{key}": {problem}'))
            total += len(str(key)) + len("" if value is None else str(value))
        if total > TOTAL_ANNOTATION_SIZE:
            causes.append(
                (
                    "metadata.annotations",
                    f"Too long: must have at most {TOTAL_ANNOTATION_SIZE} bytes",
                )
            )
    return causes
