"""What the API server and KEDA accept in the numbers and addresses ``render`` writes: a manifest the API
server would refuse is a ``UsageError`` here, naming the flag, the value and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from ..errors import UsageError

__all__ = ["INT32_MAX", "MAX_STABILIZATION_S", "check_ints", "check_url"]

INT32_MAX = 2**31 - 1  # replica counts and seconds are int32 in the HPA's and KEDA's schemas
MAX_STABILIZATION_S = 3600  # the HPA's limit on behavior.scale{Up,Down}.stabilizationWindowSeconds


def check_ints(values: Iterable[tuple[str, int, int, int]]) -> None:
    """Each ``(flag, value, least, most)``: ``value`` from ``least`` to ``most``."""
    for flag, value, least, most in values:
        if not least <= value <= most:
            raise UsageError(f'{flag} "{value}" must be from {least} to {most}')


def check_url(text: str, flag: str) -> None:
    """An ``http://`` or ``https://`` URL with a host (and a port, if any, from 1 to 65535), no spaces."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    spaced = any(c.isspace() for c in text)
    if parts is None or spaced or parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise UsageError(
            f'{flag} "{text}" must be an http:// or https:// URL with a host, '
            "e.g. http://prometheus-operated.monitoring.svc:9090"
        )
