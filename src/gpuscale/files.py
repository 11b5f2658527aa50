"""Reading the text files a user names: kubeconfigs, profiles, scenarios and the CSVs they name, mock traces.

``read_text`` is the one way gpuscale reads such a file, so every one of them fails alike: a missing or
unreadable file, a directory, or bytes that are not UTF-8 (a binary file, a Latin-1 export) is one
``UnreadableFile`` naming the flag and the file, never a ``UnicodeDecodeError`` from deep inside a parser. A
UTF-8 byte-order mark (as some Windows editors write) is dropped.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UnreadableFile

__all__ = ["read_text"]


def read_text(path: str | Path, what: str) -> str:
    """The text of ``path``, decoded as UTF-8; ``UnreadableFile`` naming ``what`` (the flag, key or argument
    that names the file) and ``path`` when it cannot be read or is not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UnreadableFile(what, str(path), e.strerror or str(e)) from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        reason = f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line {line})"
        raise UnreadableFile(what, str(path), reason) from None
