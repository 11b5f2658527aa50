"""YAML text of manifests, each document preceded by its comment lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

__all__ = ["Document", "dump"]

Document = tuple[str, dict[str, Any]]  # (comment, object)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(documents: Sequence[Document]) -> str:
    """``---``-separated documents; keys in the order built (as ``kubectl`` users read them)."""
    parts = []
    for comment, obj in documents:
        lines = [f"# {line}".rstrip() for line in comment.strip().splitlines()] if comment.strip() else []
        body = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
        parts.append("\n".join([*lines, body.rstrip("\n")]) + "\n")
    return "---\n" + "---\n".join(parts)
