"""The one loader: every rule refuses with a place and a reason, before anything recursive runs."""

from __future__ import annotations

import pytest

from launch_agent.model.safe_load import (
    ITEM_LIMITS,
    InputError,
    Limits,
    Refused,
    check_value,
    compose_yaml,
    decode_response,
    load_json,
    load_yaml,
)

DEFAULT = Limits()


def _yaml_error(text: str, limits: Limits = DEFAULT) -> InputError:
    with pytest.raises(InputError) as caught:
        load_yaml(text, source="f.yaml", limits=limits)
    return caught.value


def _json_error(text: str | bytes, limits: Limits = ITEM_LIMITS) -> InputError:
    with pytest.raises(InputError) as caught:
        load_json(text, source="f.json", limits=limits)
    return caught.value


def test_duplicate_keys_are_refused_at_any_depth_with_both_lines() -> None:
    text = (
        "spec:\n  template:\n    a: 1\n  security:\n    x: 1\n  security:\n    privileged: true\n"
    )
    error = _yaml_error(text)
    assert (error.line, error.column) == (6, 3)
    assert error.path == "spec.security"
    assert error.reason == "duplicate key 'security' (first at line 4)"
    assert str(error) == "f.yaml:6:3: spec.security: duplicate key 'security' (first at line 4)"


def test_duplicate_keys_inside_lists_name_the_index() -> None:
    error = _yaml_error("items:\n  - name: a\n    name: b\n")
    assert error.path == "items[0].name"
    assert error.line == 3


def test_quoted_and_plain_spellings_of_one_key_are_duplicates() -> None:
    error = _yaml_error('a: 1\n"a": 2\n')
    assert "duplicate key 'a'" in error.reason


def test_a_billion_laughs_fails_on_the_alias_bound() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    error = _yaml_error("\n".join(lines) + "\n")
    assert error.reason == "aliases expand to more than 10,000 nodes"
    # The bound is hit while composing the fourth level (10**4 nodes), long before the tenth.
    assert error.line is not None and error.line <= 5


def test_aliases_under_the_bound_load() -> None:
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}
    error = _yaml_error("a: &x [1, 2, 3]\nb: [*x, *x]\n", Limits(max_alias_nodes=5))
    assert "more than 5 nodes" in error.reason


def test_aliases_cannot_nest_past_the_depth_bound() -> None:
    # Each anchor is shallow, but each holds an alias to the previous: the data gets deep.
    lines = ["a0: &a0 " + "[" * 8 + "]" * 8]
    for i in range(1, 30):
        lines.append(f"a{i}: &a{i} " + "[" * 7 + f"*a{i - 1}" + "]" * 7)
    error = _yaml_error("\n".join(lines) + "\n")
    assert error.reason.startswith("nested deeper than 100 levels (through alias *a")
    assert error.line == 15  # a14: its alias is 8 levels down, and a13 is 99 levels deep


def test_recursive_aliases_are_refused() -> None:
    assert "recursive alias" in _yaml_error("a: &a [1, *a]\n").reason
    assert "recursive alias" in _yaml_error("a: &a {b: *a}\n").reason


def test_yaml_depth_is_bounded_before_python_recursion() -> None:
    error = _yaml_error("[" * 50_000)
    assert error.reason == "nested deeper than 100 levels"
    assert (error.line, error.column) == (1, 101)
    assert load_yaml("[" * 100 + "]" * 100) is not None
    assert "deeper than 3" in _yaml_error("a: {b: {c: {d: 1}}}", Limits(max_depth=3)).reason


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: !!binary aGVsbG8=\n", "tag !!binary is not allowed"),
        ("a: !!set {x: null}\n", "tag !!set is not allowed"),
        ("a: !!omap [{x: 1}]\n", "tag !!omap is not allowed"),
        ("a: !!python/object:os.system x\n", "tag !!python/object:os.system is not allowed"),
        ("a: !Ref x\n", "tag !Ref is not allowed"),
        ("<<: {a: 1}\nb: 2\n", "merge keys ('<<') are not supported"),
        ("base: &b {a: 1}\nc:\n  <<: *b\n  a: 2\n", "merge keys ('<<') are not supported"),
        ("1: a\n", "mapping key '1' is not a string"),
        ("on: a\n", "mapping key 'on' is not a string"),
        ("~: a\n", "mapping key '~' is not a string"),
        ("? [a, b]\n: c\n", "is not a string"),
        ("a: .nan\n", "'.nan' is not a finite number"),
        ("a: -.inf\n", "'-.inf' is not a finite number"),
        ("a: " + "9" * 5000 + "\n", "integer of 5,000 digits is too long"),
        ("a: 1\n---\nb: 2\n", "exactly one YAML document, found 2"),
        ("a: [1\n", "invalid YAML"),
    ],
)
def test_yaml_rules(text: str, fragment: str) -> None:
    assert fragment in str(_yaml_error(text))


def test_yaml_values_stay_json_shaped() -> None:
    data = load_yaml("a: 2024-01-01\nb: 1_000\nc: !!str 5\nd: '='\ne: yes\n")
    assert data == {"a": "2024-01-01", "b": 1000, "c": "5", "d": "=", "e": True}
    assert load_yaml("---\na: 1\n---\n") == {"a": 1}
    assert load_yaml("") is None


def test_yaml_size_is_refused_before_parsing() -> None:
    error = _yaml_error("a: " + "x" * 2000, Limits(max_bytes=1000))
    assert error.reason == "is 2,003 bytes; the limit is 1,000"


def test_compose_returns_the_nodes_for_line_numbers() -> None:
    data, node = compose_yaml("a:\n  b: 1\n")
    assert data == {"a": {"b": 1}}
    assert node is not None and node.value[0][0].start_mark.line == 0


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ('{"a": 1, "a": 2}', "(root)", "duplicate key 'a'"),
        ('{"a": {"b": [0, {"c": 1, "c": 2}]}}', "a.b[1]", "duplicate key 'c'"),
        ('{"a": NaN}', "line 1, column 7", "NaN is not JSON"),
        ('{"a": -Infinity}', "line 1, column 7", "-Infinity is not JSON"),
        ('{"a": [1e999999]}', "a[0]", "number 1e999999 is out of range"),
        ('{"a": ' + "1" * 4301 + "}", "a", "integer of 4,301 digits is too long"),
        ('{"a": "x\\ud800y"}', "a", "lone surrogate \\ud800"),
        ('{"\\udfff": 1}', "\\udfff", "lone surrogate \\udfff"),
        ('{"a": [1,}', "line 1, column 10", "invalid JSON: Expecting value"),
        ("[" * 100_000, "line 1, column 101", "nested deeper than 100 levels"),
    ],
)
def test_json_rules(text: str, where: str, reason: str) -> None:
    error = _json_error(text)
    assert error.where == where
    assert reason in error.reason


def test_json_depth_counts_containers_and_ignores_brackets_in_strings() -> None:
    limits = Limits(max_depth=3)
    text = '{"a": {"b": ["[[[[{{{{"]}}'
    assert load_json(text, limits=limits) == {"a": {"b": ["[[[[{{{{"]}}
    assert _json_error('{"a": {"b": [[]]}}', limits).where == "line 1, column 14"


def test_json_valid_surrogate_pairs_and_big_ints_load() -> None:
    assert load_json('{"a": "\\ud83d\\ude00", "b": 123456789012345678901234567890}') == {
        "a": "\U0001f600",
        "b": 123456789012345678901234567890,
    }


def test_json_bytes_must_be_utf8_and_within_size() -> None:
    assert "not UTF-8" in _json_error(b'{"a": "\xff"}').reason
    assert "the limit is 10" in _json_error('{"a": "long text"}', Limits(max_bytes=10)).reason


def test_decode_response_marks_refused_values_in_place() -> None:
    deep = "[" * 5_000 + "]" * 5_000
    body = (
        '{"data": {"p0": {"id": "a", "spec": ' + deep + '}, "p1": {"id": "b", "spec": '
        '{"x": NaN, "y": {"k": 1, "k": 2}, "z": 1e400}}, "p2": {"id": "c", "spec": {"ok": 1}}}}'
    )
    value = decode_response(body, cut=10, limit=7)
    data = value["data"]
    assert data["p2"] == {"id": "c", "spec": {"ok": 1}}
    assert check_value(data["p0"]["spec"], 7, "spec") == (
        "spec[0][0][0][0][0][0][0]",
        "nested deeper than 7 levels",
    )
    spec = data["p1"]["spec"]
    assert [type(spec[k]) for k in "xyz"] == [Refused, Refused, Refused]
    assert check_value(spec, 7, "spec") == ("spec.x", "NaN is not JSON")
    assert spec["y"].reason == "duplicate key 'k'"
    assert spec["z"].reason == "number 1e400 is out of range"


def test_decode_response_cut_values_hold_their_own_reason_in_order() -> None:
    # A cut span and a real NaN after it: each NaN the parser meets maps to its own reason.
    value = decode_response("[[[[1]]], NaN, [[[[2]]]]]", cut=2, limit=2)
    assert [v if not isinstance(v, list) else "list" for v in value] == ["list", value[1], "list"]
    assert value[0][0].reason == "nested deeper than 2 levels"
    assert value[1].reason == "NaN is not JSON"
    assert value[2][0].reason == "nested deeper than 2 levels"


def test_decode_response_refuses_only_texts_that_are_not_json() -> None:
    with pytest.raises(InputError, match="invalid JSON"):
        decode_response("<html>", cut=10, limit=5)
    with pytest.raises(InputError, match="not UTF-8"):
        decode_response(b"\xff{}", cut=10, limit=5)
    unbalanced = "[" * 50_000
    with pytest.raises(InputError, match="invalid JSON"):
        decode_response(unbalanced, cut=10, limit=5)


@pytest.mark.parametrize("char", ["\x1f", "\x7f", "\x9b", "\ufffe"])
def test_a_character_yaml_refuses_is_an_input_error_with_its_line(char: str) -> None:
    # The reader refuses these while it is being built: that used to escape as a traceback
    # (`launch-agent validate` on a file with a stray control character).
    with pytest.raises(InputError) as exc:
        load_yaml(f"a: 1\nb: 2 # {char}\n", source="spec.yaml")
    assert exc.value.line == 2 and f"U+{ord(char):04X}" in exc.value.reason
