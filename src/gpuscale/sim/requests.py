"""Request logs as demand: one row per request (its arrival, prompt and output tokens), read as a stream.

Two formats, told apart by the header (``format: auto``) or named:

- ``azure``: the Azure LLM inference trace's columns ``TIMESTAMP,ContextTokens,GeneratedTokens``; a
  timestamp as the file writes it (``2023-11-16 18:15:46.6805900``), second 0 the first row's;
- ``plain``: ``seconds,prompt_tokens,output_tokens``, seconds from 0 as written.

Either may have a ``model`` column (``model: NAME`` keeps only its rows); other columns are ignored. Rows are
in arrival order. ``time_scale`` stretches time (2: the same requests over twice as long); ``rate_scale``
resamples the requests: each row is kept ``floor(r)`` times, and once more with probability ``r - floor(r)``
drawn in file order from ``random.Random(seed)``, so the same file, scale and seed give the same requests.

Nothing holds the whole log: ``read_requests`` yields one ``Request`` at a time from the lines it is given,
``per_second`` groups them a second at a time, and ``log_stats`` keeps per-second counts and sums. The first
bad row stops the read with a ``RequestLogError`` whose one line names the file, the line, the column, the
value and what is allowed.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, NamedTuple

from .errors import SimError

__all__ = [
    "FORMATS",
    "LogStats",
    "Request",
    "RequestLog",
    "RequestLogError",
    "RequestsDemand",
    "log_stats",
    "per_second",
    "read_requests",
]

Format = Literal["auto", "azure", "plain"]
FORMATS: tuple[Format, ...] = ("auto", "azure", "plain")
_COLUMNS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "plain": ("seconds", "prompt_tokens", "output_tokens"),
}


class RequestLogError(SimError):
    """A request log cannot be read: ``str(e)`` is one line naming the file, the line, the column, the value
    and what is allowed."""


class Request(NamedTuple):
    arrival: float  # seconds from the start of the run, scaled
    prompt: int  # prompt tokens
    output: int  # output tokens


@dataclass(frozen=True)
class RequestLog:
    """How to read a request log: ``file`` (as the scenario names it) and the options of ``demand``."""

    file: str
    format: Format = "auto"
    rate_scale: float = 1.0
    time_scale: float = 1.0
    seed: int = 0
    model: str | None = None


def _bad(source: str, line: int, column: str, value: str, allowed: str) -> RequestLogError:
    shown = value if len(value) <= 40 else value[:40] + "..."
    return RequestLogError(f'"{source}" line {line}, column "{column}": value "{shown}" must be {allowed}')


def _format(source: str, header: list[str], wanted: Format) -> Literal["azure", "plain"]:
    names = set(header)
    found = [f for f in ("azure", "plain") if set(_COLUMNS[f]) <= names]
    if wanted != "auto":
        if wanted not in found:
            need = ",".join(_COLUMNS[wanted])
            raise RequestLogError(
                f'"{source}" line 1: the {wanted} format needs the columns {need}; found '
                f"[{', '.join(header)}]"
            )
        return wanted
    if not found:
        raise RequestLogError(
            f'"{source}" line 1: header [{", ".join(header)[:120]}] is neither the azure format '
            "(TIMESTAMP,ContextTokens,GeneratedTokens) nor the plain one "
            "(seconds,prompt_tokens,output_tokens)"
        )
    return "azure" if "azure" in found else "plain"


def _tokens(source: str, line: int, column: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or value > 10**9:
        raise _bad(source, line, column, text, "a whole number of tokens >= 0")
    return value


def _rows(lines: Iterable[str], source: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each CSV row; unreadable bytes and broken CSV are one ``RequestLogError``."""
    reader = csv.reader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise RequestLogError(f'"{source}" line {reader.line_num}: not CSV ({e})') from None
        except UnicodeDecodeError as e:
            raise RequestLogError(
                f'"{source}" line {reader.line_num + 1}: not UTF-8 text (byte 0x{e.object[e.start]:02x})'
            ) from None
        except OSError as e:
            raise RequestLogError(f'cannot read "{source}": {e.strerror or e}') from None
        yield reader.line_num, row


def read_requests(lines: Iterable[str], log: RequestLog, source: str | None = None) -> Iterator[Request]:
    """The log's requests in arrival order, scaled and resampled as ``log`` says; ``source`` names the file
    in errors (default: ``log.file``)."""
    source = source or log.file
    rows = _rows(lines, source)
    first = next(rows, None)
    if first is None:
        raise RequestLogError(
            f'"{source}": empty; a request log starts with a header, e.g. seconds,prompt_tokens,output_tokens'
        )
    header = [h.strip().lstrip("\ufeff") for h in first[1]]
    fmt = _format(source, header, log.format)
    time_col, prompt_col, output_col = _COLUMNS[fmt]
    at = {name: header.index(name) for name in (time_col, prompt_col, output_col)}
    model_at = header.index("model") if "model" in header else None
    if log.model is not None and model_at is None:
        raise RequestLogError(
            f'"{source}" line 1: demand.model is "{log.model}" but the log has no model column'
        )
    rng = random.Random(log.seed)
    whole, part = divmod(log.rate_scale, 1.0)
    start: datetime | None = None
    last = 0.0
    for line, cells in rows:
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) < len(header):
            raise RequestLogError(
                f'"{source}" line {line}: {len(cells)} columns, the header has {len(header)}'
            )
        if model_at is not None and log.model is not None and cells[model_at].strip() != log.model:
            continue
        text = cells[at[time_col]].strip()
        if fmt == "azure":
            try:
                stamp = datetime.fromisoformat(text)
            except ValueError:
                raise _bad(
                    source, line, time_col, text, "a timestamp such as 2023-11-16 18:15:46.6805900"
                ) from None
            start = stamp if start is None else start
            seconds = (stamp - start).total_seconds()
        else:
            try:
                seconds = float(text)
            except ValueError:
                seconds = -1.0
            if not (0 <= seconds < math.inf):
                raise _bad(source, line, time_col, text, "a number of seconds >= 0")
        if seconds < last:
            raise _bad(
                source, line, time_col, text, f"in arrival order: not before the row above ({last:g} s)"
            )
        last = seconds
        prompt = _tokens(source, line, prompt_col, cells[at[prompt_col]].strip())
        output = _tokens(source, line, output_col, cells[at[output_col]].strip())
        copies = int(whole) + (1 if part > 0 and rng.random() < part else 0)
        request = Request(seconds * log.time_scale, prompt, output)
        for _ in range(copies):
            yield request


def per_second(requests: Iterable[Request], duration: int) -> Iterator[list[Request]]:
    """The requests arriving in each second ``0 .. duration - 1``, one list a second; later ones are
    dropped."""
    pending: Request | None = None
    it = iter(requests)
    for t in range(duration):
        batch: list[Request] = []
        if pending is not None:
            if int(pending.arrival) > t:
                yield batch
                continue
            batch.append(pending)
            pending = None
        for r in it:
            if int(r.arrival) > t:
                pending = r
                break
            batch.append(r)
        yield batch


@dataclass(frozen=True)
class LogStats:
    """What one pass over a log leaves: requests per second (to ``duration``), and the token totals."""

    counts: tuple[float, ...]
    requests: int  # in the whole log, scaled, also past the duration
    prompt_tokens: int
    output_tokens: int
    last_arrival: float  # seconds, scaled

    @property
    def mean_prompt(self) -> float:
        return self.prompt_tokens / self.requests if self.requests else 0.0

    @property
    def mean_output(self) -> float:
        return self.output_tokens / self.requests if self.requests else 0.0


def log_stats(lines: Iterable[str], log: RequestLog, duration: int, source: str | None = None) -> LogStats:
    """One pass over the log: every row checked, and the per-second counts up to ``duration``."""
    counts = [0.0] * duration
    n = prompt = output = 0
    last = 0.0
    for r in read_requests(lines, log, source):
        n += 1
        prompt += r.prompt
        output += r.output
        last = r.arrival
        if int(r.arrival) < duration:
            counts[int(r.arrival)] += 1
    return LogStats(tuple(counts), n, prompt, output, last)


@dataclass(frozen=True)
class RequestsDemand:
    """The ``requests`` demand shape: the log's requests per second (``at``), and the log itself, read again
    as a stream for each run (``open_lines``: a fresh iterator over its lines each call)."""

    log: RequestLog
    stats: LogStats
    open_lines: Callable[[], Iterable[str]] = field(compare=False, repr=False)

    def at(self, t: int) -> float:
        return self.stats.counts[t] if 0 <= t < len(self.stats.counts) else 0.0

    def per_second(self, duration: int) -> Iterator[list[Request]]:
        return per_second(read_requests(self.open_lines(), self.log), duration)
