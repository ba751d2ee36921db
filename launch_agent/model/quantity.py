"""Kubernetes resource quantities (`100m`, `1.5`, `64Mi`, `1G`, `2Ki`, `1e3`) as exact rationals.

`parse_quantity` follows the grammar of `k8s.io/apimachinery/pkg/api/resource.Quantity`:

    <quantity>    ::= <sign>? <number> <suffix>?
    <number>      ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>      ::= Ki | Mi | Gi | Ti | Pi | Ei          (binary, powers of 1024)
                    | n | u | m | k | M | G | T | P | E    (decimal SI)
                    | e<int> | E<int>                      (decimal exponent)

and returns a `fractions.Fraction`, so `0.1 + 0.2` is exactly `3/10` and sums of requests never
drift the way floats do. Floats are never used internally; a YAML float is converted through its
shortest decimal repr (`0.1` → 1/10), which is the number the author wrote.

Kubernetes stores quantities with at most nanounit precision and rounds finer values *up*
(`0.1n` becomes `1n`): `to_nanos` does the same when an exact value must become an integer
count of nanounits, which is how the quota engine keeps its ledgers (integer arithmetic is exact
and fast).

`format_quantity` prints the canonical Kubernetes form of a value: whole numbers divisible by
1024 use the largest binary suffix (`192Mi`), other whole numbers the largest decimal suffix
that keeps the mantissa whole (`40`, `1k`, `1G`), and fractions use `m`, `u` or `n`
(`2500m`). Kubernetes picks binary or decimal from the format the value was written in; a sum
has no single format, so the divisibility rule is used instead (documented in docs/quota.md).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

NANO = 10**9

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_POWER = {0: "", 1: "k", 2: "M", 3: "G", 4: "T", 5: "P", 6: "E"}
_BINARY_BY_POWER = {power: suffix for suffix, power in _BINARY.items()}
# A bound on `1e<exp>` so a hostile or mistyped file cannot ask for a number with a billion
# digits; Kubernetes itself caps quantities far below this.
MAX_EXPONENT = 60

_QUANTITY = re.compile(
    r"""^(?P<sign>[+-])?
        (?P<number>\d+\.\d*|\.\d+|\d+)
        (?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$""",
    re.VERBOSE,
)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message says why."""


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity given as a string, int or float (from YAML or JSON)."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity like 500m, 2 or 64Mi, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"expected a finite quantity, got {value!r}")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise QuantityError(
            f"expected a quantity like 500m, 2 or 64Mi, got {type(value).__name__} {value!r}"
        )
    text = value.strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(_explain(value))
    number = Fraction(
        match["number"] if not match["number"].endswith(".") else match["number"][:-1]
    )
    if match["exp"] is not None:
        exponent = int(match["exp"][1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"exponent in {value!r} is out of range (|e| <= {MAX_EXPONENT})")
        number *= Fraction(10) ** exponent
    elif match["suffix"] in _BINARY:
        number *= 1024 ** _BINARY[match["suffix"]]
    elif match["suffix"] is not None:
        number *= Fraction(10) ** _DECIMAL[match["suffix"]]
    return -number if match["sign"] == "-" else number


def _explain(value: str) -> str:
    if value.strip() == "":
        return "expected a quantity like 500m, 2 or 64Mi, got an empty string"
    if re.match(r"^[+-]?(\d+\.?\d*|\.\d+)\s*[A-Za-z]+$", value.strip()):
        unit = re.sub(r"^[+-]?[\d.]+\s*", "", value.strip())
        return (
            f"unknown unit {unit!r} in {value!r}: use n, u, m, k, M, G, T, P, E,"
            " Ki, Mi, Gi, Ti, Pi, Ei or an exponent like 1e3"
        )
    return f"{value!r} is not a Kubernetes quantity (examples: 500m, 2, 1.5, 64Mi, 1G, 1e3)"


def to_nanos(value: Fraction) -> int:
    """`value` as a whole number of nanounits, rounded up as Kubernetes rounds (0.1n → 1n)."""
    return math.ceil(value * NANO)


def format_quantity(value: Fraction | int) -> str:
    """The canonical Kubernetes notation of `value` (rounded up to whole nanounits)."""
    return format_nanos(to_nanos(Fraction(value)))


def format_nanos(nanos: int) -> str:
    """The canonical Kubernetes notation of a count of nanounits."""
    if nanos < 0:
        return "-" + format_nanos(-nanos)
    if nanos % NANO == 0:
        whole = nanos // NANO
        if whole == 0:
            return "0"
        if whole % 1024 == 0:
            power = 0
            while power < 6 and whole % 1024 ** (power + 1) == 0:
                power += 1
            return f"{whole // 1024**power}{_BINARY_BY_POWER[power]}"
        power = 0
        while power < 6 and whole % 1000 ** (power + 1) == 0:
            power += 1
        return f"{whole // 1000**power}{_DECIMAL_BY_POWER[power]}"
    for divisor, suffix in ((10**6, "m"), (10**3, "u")):
        if nanos % divisor == 0:
            return f"{nanos // divisor}{suffix}"
    return f"{nanos}n"
