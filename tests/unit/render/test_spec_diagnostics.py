"""Queue-spec errors as precise as the launch config's: line and column, path, did-you-mean,
globs that can match nothing, and the template's types checked against the kind's schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch_agent.cli import main
from launch_agent.model.queue_spec import InvalidInput, Problem
from launch_agent.model.safe_load import compose_yaml
from launch_agent.render.spec_load import load_queue_spec, node_positions

EXAMPLES = Path(__file__).resolve().parents[3] / "queue-specs"


def problems(text: str) -> list[Problem]:
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(text)
    return list(exc.value.problems)


def example(name: str) -> str:
    return (EXAMPLES / name).read_text()


def line_of(text: str, needle: str, nth: int = 0) -> int:
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return lines[nth]


def test_unknown_key_has_line_column_and_suggestion() -> None:
    text = example("job.yaml").replace("  overridable:", "  overridabel:")
    (problem,) = problems(text)
    assert problem.path == "spec.overridabel"
    assert problem.reason == "unknown key 'overridabel'; did you mean 'overridable'?"
    assert (problem.line, problem.column) == (line_of(text, "overridabel"), 3)


def test_wrong_type_in_a_crd_template_is_refused_at_load() -> None:
    text = example("pytorchjob.yaml").replace("replicas: 1", "replicas: four")
    (problem,) = problems(text)
    assert problem.path == "spec.template.spec.pytorchReplicaSpecs.Master.replicas"
    assert "'four' is not of type 'integer'" in problem.reason
    assert problem.line == line_of(text, "replicas: four")


def test_unknown_field_in_a_template_is_refused_with_suggestion() -> None:
    text = example("job.yaml").replace("image:", "imag:", 1)
    found = problems(text)
    assert [p.reason for p in found] == ["unknown key 'imag'; did you mean 'image'?"]
    assert found[0].path.endswith(".containers[0].imag")
    assert found[0].line == line_of(text, "imag:")


@pytest.mark.parametrize("name", ["job.yaml", "pytorchjob.yaml"])
def test_glob_that_can_match_nothing_is_refused(name: str) -> None:
    text = example(name).replace('"**.containers[*].resources"', '"**.contaners[*].resources"')
    (problem,) = problems(text)
    assert problem.path.startswith("spec.overridable[")
    assert "'**.contaners[*].resources' can match nothing" in problem.reason
    assert "did you mean 'containers'?" in problem.reason
    assert problem.line == line_of(text, "contaners")


def test_glob_under_a_map_of_the_schema_is_accepted() -> None:
    # `pytorchReplicaSpecs` is a map (additionalProperties): any replica name is a path.
    text = example("pytorchjob.yaml").replace(
        "spec.pytorchReplicaSpecs.Worker.replicas", "spec.pytorchReplicaSpecs.Evaluator.replicas"
    )
    spec, _ = load_queue_spec(text)
    assert "spec.pytorchReplicaSpecs.Evaluator.replicas" in spec.overridable


def test_list_selector_on_a_scalar_is_refused() -> None:
    text = example("job.yaml").replace('"**.containers[*].env"', '"spec.parallelism[*]"')
    (problem,) = problems(text)
    assert "can match nothing" in problem.reason
    assert "no list" in problem.reason


def test_unknown_override_pseudo_path_is_refused() -> None:
    text = example("job.yaml").replace("overrides.run_config", "overrides.run_confg")
    (problem,) = problems(text)
    assert "'overrides.run_confg' can match nothing" in problem.reason


def test_validate_prints_file_line_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = example("pytorchjob.yaml").replace("replicas: 1", "replicas: four")
    spec = tmp_path / "pt.yaml"
    spec.write_text(text)
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    line = line_of(text, "replicas: four")
    assert (
        f"error: {spec}:{line}:13: spec.template.spec.pytorchReplicaSpecs.Master.replicas:" in err
    )


def test_render_refuses_a_template_of_the_wrong_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "pt.yaml"
    spec.write_text(example("pytorchjob.yaml").replace("replicas: 2", "replicas: four"))
    item = tmp_path / "item.json"
    item.write_text('{"runSpec": {"job": "e/p/j:v0"}}')
    assert main(["render", "--spec", str(spec), "--item", str(item)]) != 0
    assert "Worker.replicas: 'four' is not of type 'integer'" in capsys.readouterr().err


def test_positions_stay_linear_in_nested_named_lists() -> None:
    # Each list item is registered by index and by name, never by every mix of the two: a
    # spec of 40 nested named lists would otherwise need 2**40 entries.
    depth = 40
    text = "a:\n" + "".join(f"{'  ' * i}- name: n{i}\n{'  ' * i}  x:\n" for i in range(1, depth))
    _data, node = compose_yaml(text)
    assert node is not None
    positions = node_positions(node)
    assert len(positions) <= 6 * depth
    deepest = "a" + "".join(f"[n{i}].x" for i in range(1, depth))
    assert deepest in positions
