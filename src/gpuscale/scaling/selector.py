"""Kubernetes label selectors in their string form (``app=llm,tier in (a,b),!canary``).

Grammar (the set-based syntax of ``k8s.io/apimachinery/pkg/labels.Parse``, without ``<``/``>``)::

    selector    := requirement ("," requirement)*        the empty string selects everything
    requirement := key | "!" key
                 | key ("=" | "==" | "!=") value
                 | key ("in" | "notin") "(" value ("," value)* ")"

Keys are ``[prefix/]name`` (name: up to 63 of ``[A-Za-z0-9_.-]``, starting and ending alphanumeric; prefix: a
DNS subdomain of up to 253 characters); values are empty or like a name. As in Kubernetes, ``!=`` and
``notin`` also match objects that lack the key. Parsing collects every bad requirement before raising
``SelectorError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .errors import SelectorError

__all__ = ["LabelSelector", "Operator", "Requirement", "parse_selector"]

Operator = Literal["=", "!=", "in", "notin", "exists", "!exists"]

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TOKEN = r"[^\s=!(),<>]+"
_NOT_EXISTS = re.compile(rf"^!\s*({_TOKEN})$")
_EQUALITY = re.compile(rf"^({_TOKEN})\s*(==|=|!=)\s*([^\s=!(),<>]*)$")
_SET = re.compile(rf"^({_TOKEN})\s+(in|notin)\s*\((.*)\)$")
_EXISTS = re.compile(rf"^({_TOKEN})$")
_FORMS = "key, !key, key=value, key!=value, key in (v1,v2) or key notin (v1,v2)"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement. ``values`` is sorted and deduplicated; empty for ``exists``/``!exists``."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "exists":
            return value is not None
        if self.operator == "!exists":
            return value is None
        if self.operator in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # "!=", "notin"

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!exists":
            return f"!{self.key}"
        if self.operator in ("=", "!="):
            return f"{self.key}{self.operator}{self.values[0]}"
        return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """All requirements must match (logical AND). No requirements: matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        """The canonical string form; ``parse_selector(str(s)) == s``."""
        return ",".join(str(r) for r in self.requirements)


def parse_selector(text: str) -> LabelSelector:
    """Parse ``text``; raise ``SelectorError`` naming every bad requirement."""
    problems: list[str] = []
    parts = _split(text, problems)
    requirements: list[Requirement] = []
    for part in parts:
        requirement = _requirement(part, problems)
        if requirement is not None:
            requirements.append(requirement)
    if problems:
        raise SelectorError(text, tuple(problems))
    return LabelSelector(tuple(requirements))


def _split(text: str, problems: list[str]) -> list[str]:
    """Split at the commas outside parentheses; report unbalanced parentheses."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                problems.append(f'unmatched ")" at position {i}')
                return []
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth > 0:
        problems.append('unclosed "("')
        return []
    parts.append(text[start:].strip())
    if parts == [""]:
        return []
    return parts


def _requirement(part: str, problems: list[str]) -> Requirement | None:
    if not part:
        problems.append("empty requirement (two commas in a row, or a leading or trailing comma)")
        return None
    before = len(problems)
    req: Requirement | None = None
    if m := _NOT_EXISTS.match(part):
        req = Requirement(_key(m[1], part, problems), "!exists")
    elif m := _EQUALITY.match(part):
        op: Operator = "!=" if m[2] == "!=" else "="
        req = Requirement(_key(m[1], part, problems), op, (_value(m[3], part, problems),))
    elif m := _SET.match(part):
        raw = [v.strip() for v in m[3].split(",")]
        if raw == [""]:
            problems.append(f'requirement "{part}": "{m[2]}" needs at least one value')
            raw = []
        values = tuple(sorted({_value(v, part, problems) for v in raw}))
        req = Requirement(_key(m[1], part, problems), "in" if m[2] == "in" else "notin", values)
    elif m := _EXISTS.match(part):
        req = Requirement(_key(m[1], part, problems), "exists")
    else:
        problems.append(f'requirement "{part}" must have one of the forms {_FORMS}')
    return req if len(problems) == before else None


def _key(key: str, part: str, problems: list[str]) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        problems.append(
            f'requirement "{part}": key prefix "{prefix}" must be a DNS subdomain '
            "(lowercase alphanumerics, '-' and '.', at most 253 characters)"
        )
    elif not _NAME.match(name):
        problems.append(
            f'requirement "{part}": key "{key}" must be at most 63 characters of [A-Za-z0-9_.-], '
            "starting and ending with a letter or digit"
        )
    return key


def _value(value: str, part: str, problems: list[str]) -> str:
    if value and not _NAME.match(value):
        problems.append(
            f'requirement "{part}": value "{value}" must be empty or at most 63 characters of '
            "[A-Za-z0-9_.-], starting and ending with a letter or digit"
        )
    return value
