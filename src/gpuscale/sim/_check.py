"""Field checks for scenario parsing that collect every problem instead of stopping at the first.

Each problem names the field by its path (``policies[1].scaledObject.spec.maxReplicaCount``), the value, and
what is allowed, e.g. ``value "-3" must be an integer >= 0``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .quantity import parse_quantity_milli

__all__ = ["Checker"]

_MISSING = object()


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Checker:
    """Collects problems; each getter returns a usable value (the default) even when the input is bad."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def bad(self, path: str, value: object, allowed: str) -> None:
        self.fail(path, f'value "{_show(value)}" must be {allowed}')

    def mapping(
        self, parent: dict[str, object], key: str, path: str, *, required: bool
    ) -> dict[str, object] | None:
        value = parent.get(key, _MISSING)
        here = f"{path}.{key}" if path else key
        if value is _MISSING or value is None:
            if required:
                self.fail(here, "is required")
            return None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self.bad(here, value, "a mapping")
            return None
        return value

    def sequence(self, parent: dict[str, object], key: str, path: str, *, required: bool) -> list[object]:
        value = parent.get(key, _MISSING)
        here = f"{path}.{key}" if path else key
        if value is _MISSING or value is None:
            if required:
                self.fail(here, "is required")
            return []
        if not isinstance(value, list) or (required and not value):
            self.bad(here, value, "a non-empty list")
            return []
        return value

    def known(self, m: dict[str, object], path: str, allowed: Sequence[str]) -> None:
        for key in m:
            if key not in allowed:
                self.fail(
                    f"{path}.{key}" if path else key,
                    f"unknown field; allowed: [{', '.join(sorted(allowed))}]",
                )

    def integer(
        self,
        m: dict[str, object],
        key: str,
        path: str,
        *,
        default: int | None,
        minimum: int,
        maximum: int | None = None,
    ) -> int:
        here = f"{path}.{key}" if path else key
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is None:
                self.fail(here, "is required")
                return minimum
            return default
        allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < minimum
            or (maximum is not None and value > maximum)
        ):
            self.bad(here, value, allowed)
            return default if default is not None else minimum
        return value

    def number(
        self,
        m: dict[str, object],
        key: str,
        path: str,
        *,
        default: float | None,
        minimum: float,
        exclusive: bool = False,
        text: bool = False,
    ) -> float:
        """A number; ``text`` also accepts a numeric string (KEDA metadata values are strings)."""
        here = f"{path}.{key}" if path else key
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is None:
                self.fail(here, "is required")
                return minimum
            return default
        parsed: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            parsed = float(value)
        elif text and isinstance(value, str):
            try:
                parsed = float(value)
            except ValueError:
                parsed = None
        ok = (
            parsed is not None
            and math.isfinite(parsed)
            and (parsed > minimum if exclusive else parsed >= minimum)
        )
        if parsed is None or not ok:
            self.bad(here, value, f"a number {'>' if exclusive else '>='} {minimum:g}")
            return default if default is not None else minimum
        return parsed

    def string(
        self,
        m: dict[str, object],
        key: str,
        path: str,
        *,
        default: str | None,
        choices: Sequence[str] | None = None,
    ) -> str:
        here = f"{path}.{key}" if path else key
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is None:
                self.fail(here, "is required")
                return choices[0] if choices else ""
            return default
        if not isinstance(value, str) or not value.strip():
            self.bad(here, value, "a non-empty string")
            return default or (choices[0] if choices else "")
        if choices is not None and value not in choices:
            self.bad(here, value, f"one of [{', '.join(choices)}]")
            return default or choices[0]
        return value

    def boolean(
        self, m: dict[str, object], key: str, path: str, *, default: bool, text: bool = False
    ) -> bool:
        here = f"{path}.{key}" if path else key
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if isinstance(value, bool):
            return value
        if text and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.bad(here, value, "true or false")
        return default

    def quantity(self, m: dict[str, object], key: str, path: str, *, required: bool) -> int | None:
        """A Kubernetes quantity in milli-units, > 0."""
        here = f"{path}.{key}" if path else key
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                self.fail(here, "is required")
            return None
        milli = parse_quantity_milli(value)
        if milli is None or milli <= 0:
            self.bad(here, value, 'a positive quantity such as "70", "0.5" or "500m"')
            return None
        return milli
