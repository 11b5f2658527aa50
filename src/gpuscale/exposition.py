"""Parse a Prometheus exposition (text 0.0.4 or OpenMetrics 1.0: an engine's, a gateway's) into the samples
gpuscale reads.

Why not just prometheus_client's parsers: they are the well-kept, tolerant reference, and this module defers
to them for every line it does not parse itself; but on a vLLM exposition with two models (641 lines, 67 kB)
``prometheus_client.parser.text_string_to_metric_families`` (with the mapping) takes about 9 ms of CPU here,
27 times this module (``bench/engine_scrape.py``), and the agent scrapes every engine pod every second. Three
things make it fast while keeping the reference's answers:

1. **Only the families read are parsed** (``Selection``): a line whose metric name is not one of them is
   skipped with a C-level ``str.startswith`` (about 0.1 ms for the whole body). Garbage in a family gpuscale
   does not read therefore does not cost the pod its signals; garbage where a signal is read is an error.
2. **A line in the common form** (``name{label="value",…} value [timestamp]``, no escapes, a value written
   as Prometheus writes one) is split by one compiled regular expression; **any other line** (escapes,
   exemplars, quoted names, odd spacing or values) is parsed alone by prometheus_client's own parser
   (``text_string_to_metric_families``, or ``openmetrics.parser`` for OpenMetrics), which decides.
   ``tests/agent/test_engine_parse.py`` holds both paths to the reference on generated expositions.
3. **Label sets are kept between scrapes** (bounded): an engine writes the same label text every second.

What is refused (``ExpositionError``): a read line that neither path parses; the same series (name and
label set) twice; a label given twice in one series; OpenMetrics without its closing ``# EOF`` (a truncated
body).

The result maps each sample name, exactly as written (``vllm:prompt_tokens_total``, ``…_bucket``), to its
``(labels, value)`` pairs; the label dicts are shared between scrapes (read them, never change them).
prometheus_client renames the samples of a counter family written without ``_total``; this does not (the
mapping reads both spellings).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as _openmetrics
from prometheus_client.parser import text_string_to_metric_families as text_families

from .errors import ExpositionError

__all__ = ["SUFFIXES", "Exposition", "Labels", "Selection", "parse", "reference_parse"]

Labels = dict[str, str]
Exposition = dict[str, list[tuple[Labels, float]]]

# the sample names a family's samples go by (histogram, summary, counter)
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")

_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LABELS = rf'(?:{_LABEL_NAME}="[^"\\\n]*"(?:,{_LABEL_NAME}="[^"\\\n]*")*,?)?'
_VALUE = r"(?:NaN|[+-]?Inf|[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)"
_SAMPLE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{({_LABELS})\}})? ({_VALUE})(?: [-+]?[0-9]+(?:\.[0-9]+)?)?[ \t]*"
)
_PAIR = re.compile(rf'({_LABEL_NAME})="([^"]*)"')
_PARSE_ERRORS = (ValueError, IndexError, KeyError, TypeError)
_BLANKS = (" ", "\t")
# label text -> its labels: an engine writes the same few hundred label sets every scrape. Shared between
# scrapes, so an Exposition's label dicts are read-only; bounded, so no engine can grow it without limit.
_LABELS_OF: dict[str, tuple[Labels, frozenset[tuple[str, str]]]] = {}
_LABEL_SETS = 8192
# prometheus_client's OpenMetrics parser is not annotated; its text parser is
openmetrics_families = cast(Callable[[str], Iterable[Metric]], _openmetrics.text_string_to_metric_families)


@dataclass(frozen=True, slots=True)
class Selection:
    """The families to read, by name (``vllm:num_requests_waiting``, ``vllm:prompt_tokens``)."""

    families: frozenset[str]
    families_first: tuple[str, ...]  # the family names, as line prefixes
    prefixes: tuple[str, ...]  # and the blanks an indented line starts with
    names: frozenset[str]

    @classmethod
    def of(cls, families: Iterable[str]) -> Selection:
        fams = frozenset(families)
        names = frozenset(f + s for f in fams for s in SUFFIXES)
        first = tuple(sorted(fams))
        return cls(fams, first, (*first, *_BLANKS), names)


def _without_exemplar(line: str) -> str:
    """An OpenMetrics sample line without its exemplar (`` # {…} value [timestamp]``), found outside
    quotes: parsed alone, as an untyped sample, a line may not carry one (gpuscale reads no exemplar)."""
    quoted = escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = quoted
        elif ch == '"':
            quoted = not quoted
        elif not quoted and line.startswith(" # ", i):
            return line[:i]
    return line


def _slow(line: str, number: Callable[[], int], openmetrics: bool) -> list[tuple[str, Labels, float]]:
    """One line, parsed by prometheus_client's parser: the reference decides what the fast path does not."""
    try:
        if openmetrics:
            families = list(openmetrics_families(_without_exemplar(line) + "\n# EOF\n"))
        else:
            families = list(text_families(line + "\n"))
    except _PARSE_ERRORS as e:
        shown = line if len(line) <= 120 else line[:119] + "\u2026"
        raise ExpositionError(f"line {number()} does not parse ({e or type(e).__name__}): {shown!r}") from e
    return [(s.name, dict(s.labels), float(s.value)) for f in families for s in f.samples]


def _number(text: str, line: str) -> int:
    """The line number of ``line`` in ``text``, its last occurrence (a series given twice is wrong the second
    time); looked up only when a message is written."""
    found = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw == line or raw.strip() == line:
            found = number
    return found


def parse(text: str, selection: Selection, *, openmetrics: bool = False) -> Exposition:
    """The samples of ``selection``'s families in ``text``. ``ExpositionError`` when a line of them does not
    parse, a series is given twice, or an OpenMetrics body lacks its ``# EOF``."""
    if openmetrics and not text.rstrip().endswith("# EOF"):
        raise ExpositionError('an OpenMetrics body must end with "# EOF" (truncated?)')
    prefixes, names = selection.prefixes, selection.names
    out: Exposition = {}
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    match, pairs_of, labels_of = _SAMPLE.fullmatch, _PAIR.findall, _LABELS_OF
    for line in [raw for raw in text.splitlines() if raw.startswith(prefixes)]:
        if line[0] in _BLANKS:  # an indented line (rare): read if it is one of ours
            line = line.strip()
            if not line.startswith(selection.families_first):
                continue
        m = match(line)
        if m is None:
            # the line's number only for a message: finding it reads the whole body
            for name, labels, value in _slow(line, functools.partial(_number, text, line), openmetrics):
                if name in names:
                    _add(out, seen, name, labels, value, text, line)
            continue
        name = m.group(1)
        if name not in names:
            continue
        labels_text = m.group(2) or ""
        known = labels_of.get(labels_text)
        if known is None:
            pairs = pairs_of(labels_text)
            labels = dict(pairs)
            if len(labels) != len(pairs):
                raise ExpositionError(f"line {_number(text, line)}: a label is given twice in {line[:120]!r}")
            known = (labels, frozenset(pairs))
            if len(labels_of) < _LABEL_SETS:
                labels_of[labels_text] = known
        labels, label_set = known
        key = (name, label_set)
        if key in seen:
            raise ExpositionError(
                f"line {_number(text, line)}: series {_series(name, labels)} is given twice"
            )
        seen.add(key)
        samples = out.get(name)
        if samples is None:
            out[name] = [(labels, float(m.group(3)))]
        else:
            samples.append((labels, float(m.group(3))))
    return out


def _add(
    out: Exposition,
    seen: set[tuple[str, frozenset[tuple[str, str]]]],
    name: str,
    labels: Labels,
    value: float,
    text: str,
    line: str,
) -> None:
    key = (name, frozenset(labels.items()))
    if key in seen:
        raise ExpositionError(f"line {_number(text, line)}: series {_series(name, labels)} is given twice")
    seen.add(key)
    samples = out.get(name)
    if samples is None:
        out[name] = [(labels, value)]
    else:
        samples.append((labels, value))


def reference_parse(text: str, selection: Selection, *, openmetrics: bool = False) -> Exposition:
    """``parse``'s answer as prometheus_client's parser alone gives it (the whole body parsed, then the
    selection kept; counter samples under the names as written): the reference the tests and
    ``bench/engine_scrape.py`` hold ``parse`` to."""
    try:
        families = list(openmetrics_families(text) if openmetrics else text_families(text))
    except _PARSE_ERRORS as e:
        raise ExpositionError(f"does not parse ({e or type(e).__name__})") from e
    written = set(_written_names(text))
    out: Exposition = {}
    for family in families:
        for s in family.samples:
            name = s.name
            if name not in written and name.endswith("_total") and name[:-6] in written:
                name = name[:-6]  # prometheus_client added _total to a counter written without it
            if name in selection.names:
                out.setdefault(name, []).append((dict(s.labels), float(s.value)))
    return out


def _written_names(text: str) -> Iterable[str]:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield re.split(r"[{ \t]", line, maxsplit=1)[0]


def _series(name: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"
