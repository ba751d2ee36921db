"""Kubernetes quantities: exact parsing, canonical formatting, precise errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.model.quantity import (
    QuantityError,
    format_nanos,
    format_quantity,
    parse_quantity,
    to_nanos,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("64Mi", 64 * 2**20),
        ("1G", 10**9),
        ("2Ki", 2048),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1.5e-3", Fraction(3, 2000)),
        ("1E", 10**18),
        ("5", 5),
        ("0", 0),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("+3", 3),
        ("-2", -2),
        ("250u", Fraction(1, 4000)),
        ("7n", Fraction(7, 10**9)),
        ("3k", 3000),
        ("1Ei", 2**60),
        (" 2Gi ", 2 * 2**30),
        (5, 5),
        (0.1, Fraction(1, 10)),
        (2.5, Fraction(5, 2)),
    ],
)
def test_parse(text: object, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


def test_sums_are_exact() -> None:
    assert parse_quantity("0.1") + parse_quantity("0.2") == parse_quantity("300m")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty string"),
        ("5 cores", "unknown unit 'cores'"),
        ("5Q", "unknown unit 'Q'"),
        ("1e", "unknown unit 'e'"),
        ("abc", "is not a Kubernetes quantity"),
        ("1e999", "exponent in '1e999' is out of range"),
        ("--1", "is not a Kubernetes quantity"),
        (True, "got True"),
        (None, "got NoneType None"),
        ([1], "got list"),
        (float("inf"), "finite"),
    ],
)
def test_errors_say_why(text: object, reason: str) -> None:
    with pytest.raises(QuantityError) as error:
        parse_quantity(text)
    assert reason in str(error.value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (40, "40"),
        (Fraction(5, 2), "2500m"),
        (Fraction(1, 10), "100m"),
        (1000, "1k"),
        (20000, "20k"),
        (10**9, "1G"),
        (64 * 2**20, "64Mi"),
        (192 * 2**20, "192Mi"),
        (2048, "2Ki"),
        (1500, "1500"),
        (Fraction(1, 4000), "250u"),
        (Fraction(7, 10**9), "7n"),
        (Fraction(1, 10**10), "1n"),  # Kubernetes rounds sub-nano values up
        (-3, "-3"),
    ],
)
def test_format_is_canonical_kubernetes(value: Fraction | int, text: str) -> None:
    assert format_quantity(value) == text
    assert parse_quantity(text) == to_nanos(Fraction(value)) / Fraction(10**9)


@given(st.integers(min_value=0, max_value=10**25))
def test_format_then_parse_round_trips_every_nanounit_count(nanos: int) -> None:
    assert to_nanos(parse_quantity(format_nanos(nanos))) == nanos


@given(st.fractions(min_value=0, max_value=10**12))
def test_to_nanos_rounds_up_never_down(value: Fraction) -> None:
    nanos = to_nanos(value)
    assert Fraction(nanos, 10**9) >= value > Fraction(nanos - 1, 10**9)
