"""Log lines as text (the default) or as JSON objects, one per line (``--log-format json``), for log
pipelines that parse them (Loki, Elasticsearch, Cloud Logging) without a regular expression.

A JSON line holds ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``message`` and, for a
record with a traceback, ``exception``; ``fields`` adds constant ones (an ingest worker says ``process``).
Written with the standard library's ``logging.Formatter`` and ``json``: a dependency for these twenty lines
would add to every agent's image.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

__all__ = ["LOG_FORMATS", "JsonFormatter", "configure_logging"]

LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s{suffix}: %(message)s"


class JsonFormatter(logging.Formatter):
    def __init__(self, fields: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, object] = {
            "time": when.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str, *, process: str | None = None) -> None:
    """The root logger at ``level`` (debug, info, warning, error) writing ``log_format`` lines to stderr;
    ``process`` names a child process (``ingest``) in each line."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter({"process": process} if process else None))
    else:
        handler.setFormatter(logging.Formatter(_TEXT.format(suffix=f"[{process}]" if process else "")))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])
