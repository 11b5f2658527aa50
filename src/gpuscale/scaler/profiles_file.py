"""Reading a profiles file: the one piece of I/O behind profiles (their rules are ``gpuscale.scaling``'s)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UnreadableFile
from ..files import read_text
from ..scaling.errors import ProfileError
from ..scaling.profiles import ProfileSet, parse_profiles_text

__all__ = ["load_profiles"]


def load_profiles(path: str | Path, *, base: ProfileSet | None = None) -> ProfileSet:
    """Read a profiles YAML file; its profiles add to or replace those of ``base`` (default: the built-ins).
    Raise ``ProfileError`` naming every bad profile and field."""
    source = str(path)
    try:
        text = read_text(path, "--profiles")
    except UnreadableFile as e:
        raise ProfileError((f"cannot read the file: {e.reason}",), source=source) from e
    return parse_profiles_text(text, source=source, base=base)
