"""Kubernetes quantities as the HPA reads them: integer milli-units.

The HPA converts every quantity with ``Quantity.MilliValue()``, which rounds *up* to a whole milli-unit.
KEDA (2.20+) builds metric values and targets from float64 by parsing ``fmt.Sprintf("%.3f", value)``: the
value rounded to the nearest milli-unit (2.19 and older truncated, ``int64(value * 1000)``).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["keda_milli", "parse_quantity_milli"]

_SUFFIX: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+))?(n|u|m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def parse_quantity_milli(value: object) -> int | None:
    """``value`` (a quantity string such as ``"70"``, ``"500m"``, ``"1.5k"``, or a YAML number) in
    milli-units, rounded up as ``MilliValue()`` does; ``None`` when it is not a quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return math.ceil(Fraction(value) * 1000)
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number = Fraction(match.group(1))
    if match.group(2) is not None:
        number *= Fraction(10) ** int(match.group(2))
    number *= _SUFFIX[match.group(3) or ""]
    return math.ceil(number * 1000)


def keda_milli(value: float) -> int:
    """A float metric value or threshold as KEDA 2.20 hands it to the HPA: ``%.3f``, parsed (the nearest
    milli-unit; Python's and Go's ``%.3f`` both round the exact binary value correctly); NaN, Inf and
    negative values become 0 (``quantityFromFloat64``, kedacore/keda#7534)."""
    if not math.isfinite(value) or value < 0:
        return 0
    return int(Fraction(f"{value:.3f}") * 1000)
