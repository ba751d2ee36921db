"""The hostile corpus as a whole: every area's cases are well formed, and there are enough.

Each area has its own runner (`test_<area>.py`), which feeds its cases through the entry point
the agent and the CLI use; this file checks what they share: one case per `NNN-name.yaml`, a
one-sentence `description`, and an `expect` that is either an error (with the substrings it
must contain) or a safe result. Raw inputs (`*.input.*`) are not cases.
"""

from __future__ import annotations

from pathlib import Path

import yaml

CORPUS = Path(__file__).parent
MINIMUM = 250  # issue 12: "at least 250 cases in tests/corpus/"


def cases() -> list[Path]:
    return sorted(
        p for p in CORPUS.glob("*/*.yaml") if ".input." not in p.name and p.name[:3].isdigit()
    )


def test_every_area_has_a_runner_and_a_readme() -> None:
    areas = {p.parent.name for p in cases()}
    assert areas, "no corpus cases found"
    for area in sorted(areas):
        assert (CORPUS / area / "README.md").is_file(), f"{area}: no README.md"
        module = area.replace("-", "_")  # `audit-items` is run by `test_audit_items.py`
        runners = list(CORPUS.glob(f"test_{module}.py")) or list(CORPUS.glob(f"test_*{module}*.py"))
        assert runners, f"{area}: no runner tests/corpus/test_{area}.py"


def test_every_case_has_a_description_and_an_expectation() -> None:
    for path in cases():
        case = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(case, dict), path
        description = case.get("description")
        assert isinstance(description, str) and description.strip(), f"{path}: no description"
        expect = case.get("expect")
        assert isinstance(expect, dict), f"{path}: no expect"
        # Either refused or safe, never both; areas may add checks beside (`not_in_error`).
        kinds = {"error", "safe"} & set(expect)
        assert len(kinds) == 1, f"{path}: expect needs exactly one of error, safe"
        if "error" in expect:
            value = expect["error"]
            assert isinstance(value, list) and value, f"{path}: an error names what it must say"
            assert all(isinstance(v, str) and v for v in value), path


def test_the_corpus_is_large_enough() -> None:
    found = cases()
    by_area: dict[str, int] = {}
    for path in found:
        by_area[path.parent.name] = by_area.get(path.parent.name, 0) + 1
    assert len(found) >= MINIMUM, by_area
