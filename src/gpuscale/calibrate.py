"""The token model's figures (``sim.tokens.TokenParams``) from a vLLM engine's own metrics: the arithmetic of
``gpuscale calibrate``.

Why: the simulator models a replica by five figures, and each preset cites a benchmark for every one; for
your model on your GPUs the engine measures them itself while it serves. Each figure here comes from how
vLLM's counters and histograms moved over a *window* (two ``/metrics`` bodies: the start and the end of a
load) and says where it came from; a figure the windows cannot give honestly is *missing*, with the one
flag or window that gives it, never guessed.

How, per window (``measure``), from the model's series summed over vLLM's ``engine`` label:

- **prefill tokens/s**: the prompt tokens of the requests that finished in the window
  (``vllm:request_prompt_tokens_sum``) over their time in prefill (``vllm:request_prefill_time_seconds_sum``),
  both observed as a request finishes; without that histogram, the mean prompt per first token over the
  mean time to first token less the mean queue time (holds at concurrency 1 only: the figure says so);
- **the step at the window's batch**: the mean inter-token latency (``vllm:inter_token_latency_seconds``,
  else ``vllm:time_per_output_token_seconds``: ``_sum / _count``), at the batch an average token of the
  window saw: the readings of ``vllm:num_requests_running`` (every second with ``--engine``; a saved
  window's two ends, or the readings ``--save`` kept) weighted by themselves, ``sum(b^2) / sum(b)``, so
  readings of an idle engine count for nothing.

Across windows (``calibrate``): the prefill of the window at the lowest batch; ``decodeStepSeconds`` and
``decodeStepSecondsPerSequence`` from the line through the windows' steps against their batches (two windows
at least one sequence apart; one window at a batch under 1.5 gives ``decodeStepSeconds`` alone; a step that
falls by at most 20 % as the batch grows did not grow: a slope of 0);
``maxNumSeqs`` and ``kvCacheTokens`` from the flags, else from vLLM's ``vllm:*_config_info`` labels
(``kv_cache_size_tokens``, or ``num_gpu_blocks`` x ``block_size``; ``max_num_seqs``) where they hold a number.

Pure: text in, figures and YAML text out. Fetching the bodies is the CLI's (``cli/calibrate.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from .errors import ExpositionError, UsageError
from .exposition import Exposition, Selection, parse, reference_parse
from .sim.tokens import TOKEN_KEYS

__all__ = [
    "KEYS",
    "Calibration",
    "CalibrationError",
    "Figure",
    "Given",
    "Measured",
    "Reading",
    "Window",
    "calibrate",
    "check_window",
    "measure",
    "preset_yaml",
    "read_body",
    "readings_line",
    "saved_running",
    "scraped_at",
]

KEYS = TOKEN_KEYS[1:]  # the parameters, in the order workload.tokens documents them
PREFILL, STEP, SLOPE, SEQS, KV = KEYS

RUNNING = "vllm:num_requests_running"
PROMPT = "vllm:prompt_tokens_total"
FINISHED = "vllm:request_success_total"
CREATED = "vllm:request_success_created"
PROMPT_HIST = "vllm:request_prompt_tokens"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
TTFT = "vllm:time_to_first_token_seconds"
QUEUE = "vllm:request_queue_time_seconds"
ITLS = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
_HISTOGRAMS = (PROMPT_HIST, PREFILL_TIME, TTFT, QUEUE, *ITLS)
_SUMMED = (PROMPT, FINISHED, *(h + s for h in _HISTOGRAMS for s in ("_sum", "_count")))
_FAMILIES = (RUNNING, "vllm:prompt_tokens", "vllm:request_success", CREATED, *_HISTOGRAMS)
_CONFIG_INFO = re.compile(r"^(vllm:\w*config_info)[{ ]", re.M)
_SCRAPED_AT = re.compile(r"# gpuscale calibrate: scraped at ([0-9]+(?:\.[0-9]+)?)")
_READINGS = "# gpuscale calibrate: vllm:num_requests_running readings:"
ONE = 1.5  # a window whose batch is under this measures the step of one sequence
FLAT = 0.2  # a step that falls by at most this share across the batches measured did not grow: slope 0


class CalibrationError(UsageError):
    """A body or a window that cannot be calibrated from; the message is one line naming the flag or file."""


@dataclass(frozen=True)
class Reading:
    """One ``/metrics`` body, for one model: ``values`` per sample name (``vllm:prompt_tokens_total``,
    ``…_sum``, ``…_count``) summed over the model's series; ``config`` the labels of ``vllm:*config_info``."""

    source: str
    at: float | None
    model: str
    values: Mapping[str, float]
    running: float | None
    created: float | None
    config: Mapping[str, str]


@dataclass(frozen=True)
class Window:
    """Two readings of one engine: ``what`` names them as the user gave them (for messages); ``running``
    the values of ``vllm:num_requests_running`` read in the window, its ends included (empty: only the
    ends')."""

    label: str
    what: str
    before: Reading
    after: Reading
    running: tuple[float, ...] = ()

    @property
    def seconds(self) -> float | None:
        b, a = self.before.at, self.after.at
        return a - b if a is not None and b is not None else None

    def delta(self, name: str) -> float | None:
        b, a = self.before.values.get(name), self.after.values.get(name)
        return a - b if a is not None and b is not None else None


@dataclass(frozen=True)
class Measured:
    """What one window says: its batch and step (``None``: not measured) and its prefill, each with where it
    came from."""

    window: Window
    requests: float
    batch: float | None
    batch_from: str
    step: float | None
    step_from: str
    prefill: float | None
    prefill_from: str


@dataclass(frozen=True)
class Given:
    """Figures the user gave as flags (they win over what the engine says)."""

    max_num_seqs: int | None = None
    kv_cache_tokens: int | None = None


@dataclass(frozen=True)
class Figure:
    value: float
    source: str


@dataclass(frozen=True)
class Calibration:
    """The figures derived (by ``KEYS``), and for each missing one the line that says how to give it."""

    model: str
    measured: tuple[Measured, ...]
    figures: Mapping[str, Figure]
    missing: Mapping[str, str]


def scraped_at(text: str) -> float | None:
    """The Unix time a body was scraped, where ``gpuscale calibrate --save`` wrote it on its first line."""
    m = _SCRAPED_AT.match(text)
    return float(m.group(1)) if m else None


def saved_running(text: str) -> tuple[float, ...]:
    """The readings of ``vllm:num_requests_running`` in a window, where ``--save`` wrote them (the end's
    second line); empty where none were."""
    for line in text.splitlines()[:2]:
        if line.startswith(_READINGS):
            try:
                return tuple(float(v) for v in line.removeprefix(_READINGS).split())
            except ValueError:
                return ()
    return ()


def readings_line(running: Sequence[float]) -> str:
    """The comment ``saved_running`` reads back."""
    return f"{_READINGS} {' '.join(f'{v:g}' for v in running)}\n"


def _exposition(text: str, source: str, openmetrics: bool) -> Exposition:
    configs = sorted(set(_CONFIG_INFO.findall(text)))
    try:
        expo = parse(text, Selection.of((*_FAMILIES, *configs)), openmetrics=openmetrics)
    except ExpositionError as e:
        raise CalibrationError(f"{source}: not a metrics exposition where vLLM's series are: {e}") from None
    if any(expo.values()):
        return expo
    if not text.strip():
        raise CalibrationError(f"{source}: empty: not a metrics exposition")
    try:
        reference_parse(text, Selection.of(()), openmetrics=openmetrics)
    except ExpositionError as e:
        shown = str(e) if len(str(e)) <= 120 else str(e)[:119] + "\u2026"
        raise CalibrationError(f"{source}: not a metrics exposition: {shown}") from None
    raise CalibrationError(
        f"{source}: no vLLM series (vllm:num_requests_running, vllm:request_success_total, …): calibrate "
        "reads a vLLM engine's /metrics"
    )


def _model(expo: Exposition, source: str, wanted: str | None) -> str:
    models = sorted(
        {labels["model_name"] for samples in expo.values() for labels, _ in samples if "model_name" in labels}
    )
    if wanted is not None:
        if wanted not in models:
            raise CalibrationError(
                f'--model "{wanted}": {source} serves no such model (it serves [{", ".join(models)}])'
            )
        return wanted
    if len(models) != 1:
        raise CalibrationError(f"{source}: serves models [{', '.join(models)}]: name one with --model")
    return models[0]


def read_body(
    text: str, source: str, *, at: float | None = None, model: str | None = None, openmetrics: bool = False
) -> Reading:
    """The reading of one body; ``CalibrationError`` (one line starting with ``source``) when it is not a
    metrics exposition, has no vLLM series, serves several models and ``model`` is not given, or holds a
    value that cannot be right."""
    expo = _exposition(text, source, openmetrics)
    name = _model(expo, source, model)
    values: dict[str, float] = {}
    for sample in (*_SUMMED, RUNNING, CREATED):
        found = [v for labels, v in expo.get(sample, ()) if labels.get("model_name") == name]
        for v in found:
            if not (v >= 0 and math.isfinite(v)):
                raise CalibrationError(f'{source}: {sample} of model "{name}" is {v:g}: cannot be right')
        if found:
            values[sample] = min(found) if sample == CREATED else math.fsum(found)
    config: dict[str, str] = {}
    for family in sorted(f for f in expo if f.endswith("config_info")):
        for labels, _ in expo[family]:
            for k, text in labels.items():
                config.setdefault(k, text)
    return Reading(source, at, name, values, values.pop(RUNNING, None), values.pop(CREATED, None), config)


def check_window(w: Window) -> None:
    """``CalibrationError`` when ``w`` cannot be measured: its ends in the wrong order, another model, a
    restart within it (a counter fell, or its series were made anew), or no request in it."""
    b, a = w.before, w.after
    seconds = w.seconds
    if seconds is not None and seconds <= 0:
        raise CalibrationError(f"{w.what}: the end was scraped {-seconds:g} s before the start: swap them")
    if a.model != b.model:
        raise CalibrationError(f'{w.what}: the bodies are of different models ("{b.model}", "{a.model}")')
    if a.created is not None and b.created is not None and a.created != b.created:
        raise CalibrationError(
            f"{w.what}: the engine restarted within the window ({CREATED} went from {b.created:.3f} to "
            f"{a.created:.3f}); measure a window without a restart"
        )
    for name in _SUMMED:
        d = w.delta(name)
        if d is not None and d < 0:
            raise CalibrationError(
                f"{w.what}: the engine restarted within the window ({name} fell from "
                f"{b.values[name]:g} to {a.values[name]:g}); measure a window without a restart"
            )
    if not (w.delta(FINISHED) or 0) > 0 and not (w.delta(TTFT + "_count") or 0) > 0:
        raise CalibrationError(
            f"{w.what}: no request in the window ({FINISHED} and {TTFT}_count did not move): run a load "
            "while calibrating"
        )


def _mean(w: Window, family: str) -> float | None:
    s, n = w.delta(family + "_sum"), w.delta(family + "_count")
    return s / n if s is not None and n is not None and n > 0 else None


def _batch(w: Window) -> tuple[float | None, str]:
    """The batch an average decoded token saw: the readings of the running requests weighted by themselves
    (sum of squares over sum), so a reading of an idle engine counts for nothing."""
    if len(w.running) > 2:
        readings, which = w.running, f"{len(w.running)} readings"
    elif w.before.running is not None and w.after.running is not None:
        readings, which = (w.before.running, w.after.running), "the start and the end"
    else:
        return None, f"no {RUNNING}"
    total = math.fsum(readings)
    if total <= 0:
        return None, f"{RUNNING} read 0 at {which}"
    return math.fsum(r * r for r in readings) / total, f"{RUNNING} over {which}, each weighted by its value"


def _prefill(w: Window, batch: str) -> tuple[float | None, str]:
    seconds, n = w.delta(PREFILL_TIME + "_sum"), w.delta(PREFILL_TIME + "_count") or 0
    hist = w.delta(PROMPT_HIST + "_sum")
    tokens, named = (hist, PROMPT_HIST + "_sum") if hist is not None else (w.delta(PROMPT), PROMPT)
    if seconds is not None and seconds > 0 and n > 0 and tokens:
        return tokens / seconds, (
            f"{w.label}: {named} over {PREFILL_TIME}_sum ({tokens:.0f} tokens in {seconds:.4g} s of "
            f"prefill, {n:.0f} requests, at a batch of {batch})"
        )
    ttft, first = _mean(w, TTFT), w.delta(TTFT + "_count") or 0
    prompt = w.delta(PROMPT)
    if ttft is None or not prompt:
        return None, f"{w.label}: neither {PREFILL_TIME} nor {TTFT} with {PROMPT} moved"
    queue = _mean(w, QUEUE)
    spent = ttft - (queue or 0.0)
    if spent <= 0:
        return None, f"{w.label}: the mean time to first token is all queue time"
    less = f"less the mean {QUEUE} ({queue:.4g} s)" if queue is not None else f"({QUEUE} not exposed)"
    return prompt / first / spent, (
        f"{w.label}: no {PREFILL_TIME}; the mean prompt ({PROMPT} per {TTFT}_count, {prompt / first:.0f} "
        f"tokens) over the mean {TTFT} {less}, {spent:.4g} s, at a batch of {batch} (holds at concurrency 1)"
    )


def measure(w: Window) -> Measured:
    """What the window ``w`` (checked) says."""
    batch, batch_from = _batch(w)
    shown = f"{batch:.3g}" if batch is not None else "unknown"
    step, step_from = None, f"{' and '.join(ITLS)} did not move"
    for family in ITLS:
        step = _mean(w, family)
        if step is not None:
            step_from = f"{family} mean"
            break
    prefill, prefill_from = _prefill(w, shown)
    return Measured(w, w.delta(FINISHED) or 0.0, batch, batch_from, step, step_from, prefill, prefill_from)


def _config_number(config: Mapping[str, str], key: str) -> float | None:
    try:
        value = float(config.get(key, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _kv(config: Mapping[str, str], source: str) -> Figure | str:
    tokens = _config_number(config, "kv_cache_size_tokens")
    if tokens is not None:
        return Figure(int(tokens), f"vllm:cache_config_info kv_cache_size_tokens ({source})")
    blocks, size = _config_number(config, "num_gpu_blocks"), _config_number(config, "block_size")
    if blocks is not None and size is not None:
        return Figure(
            int(blocks * size),
            f"vllm:cache_config_info num_gpu_blocks {blocks:g} x block_size {size:g} ({source})",
        )
    said = config.get("num_gpu_blocks")
    why = f'num_gpu_blocks "{said}"' if said is not None else "no num_gpu_blocks"
    return (
        f"vllm:cache_config_info has {why}; give --kv-cache-tokens N (vLLM logs it at start: "
        '"GPU KV cache size: N tokens")'
    )


def _engine_figures(measured: Sequence[Measured], given: Given) -> dict[str, Figure | str]:
    last = measured[-1].window.after
    out: dict[str, Figure | str] = {}
    if given.max_num_seqs is not None:
        out[SEQS] = Figure(given.max_num_seqs, "--max-num-seqs")
    elif (seqs := _config_number(last.config, "max_num_seqs")) is not None:
        out[SEQS] = Figure(int(seqs), f"vllm:*config_info max_num_seqs ({last.source})")
    else:
        out[SEQS] = (
            "vLLM does not expose it; give --max-num-seqs N (the engine's --max-num-seqs, the most "
            "sequences it runs at once)"
        )
    if given.kv_cache_tokens is not None:
        out[KV] = Figure(given.kv_cache_tokens, "--kv-cache-tokens")
    else:
        out[KV] = _kv(last.config, last.source)
    return out


def _points(measured: Sequence[Measured]) -> list[tuple[float, float, str]]:
    return sorted((m.batch, m.step, m.window.label) for m in measured if m.batch is not None and m.step)


def _sources(measured: Sequence[Measured], field: str) -> str:
    """Where the windows' ``field`` came from: once if alike, else per window."""
    said = {m.window.label: str(getattr(m, field)) for m in measured}
    if len(set(said.values())) == 1:
        return next(iter(said.values()))
    return ", ".join(f"{label}: {text}" for label, text in said.items())


def _decode(measured: Sequence[Measured]) -> dict[str, Figure | str]:
    """``decodeStepSeconds`` and its slope from the windows' (batch, step) points."""
    points = _points(measured)
    more = (
        "a window at another concurrency (--before and --after of a saved window, or --engine under "
        "another load; --save DIR keeps an --engine window's bodies)"
    )
    if not points:
        why = "; ".join(f"{m.window.label}: {m.step_from if not m.step else m.batch_from}" for m in measured)
        return {STEP: f"no window measured a step ({why})", SLOPE: f"no window measured a step ({why})"}
    seen = ", ".join(f"step({b:.3g}) = {s:.4g} s in {label}" for b, s, label in points)
    how = f"step: {_sources(measured, 'step_from')}; batch: {_sources(measured, 'batch_from')}"
    out: dict[str, Figure | str] = {}
    low_b, low_s, low_label = points[0]
    if low_b < ONE:
        out[STEP] = Figure(low_s, f"{low_label}: the step at a batch of {low_b:.3g} ({how})")
    if points[-1][0] - low_b < 1:
        out.setdefault(STEP, f"one concurrency measured ({seen}): the step of one sequence needs {more}")
        out[SLOPE] = f"one concurrency measured ({seen}): the slope needs {more}"
        return out
    mb = math.fsum(b for b, _, _ in points) / len(points)
    ms = math.fsum(s for _, s, _ in points) / len(points)
    slope = math.fsum((b - mb) * (s - ms) for b, s, _ in points) / math.fsum(
        (b - mb) ** 2 for b, _, _ in points
    )
    line = "the line through " + seen + (" (least squares)" if len(points) > 2 else "")
    if slope < 0:
        fall = -slope * (points[-1][0] - low_b) / ms
        if fall > FLAT:
            why = f"the step fell by {fall:.0%} as the batch grew ({seen}): measure steadier windows"
            out.setdefault(STEP, why)
            out[SLOPE] = why
            return out
        line = f"{seen}: the step did not grow with the batch (it fell by {fall:.0%}), so a slope of 0 and"
        line += " the mean step"
        slope = 0.0
    at_one = ms + slope * (1 - mb)
    if STEP not in out:
        out[STEP] = (
            Figure(at_one, f"{line}, at a batch of 1 ({how})")
            if at_one > 0
            else f"{line} is at {at_one:.4g} s at a batch of 1: measure a window nearer concurrency 1"
        )
    out[SLOPE] = Figure(slope, f"the slope of {line}")
    return out


def calibrate(windows: Sequence[Window], given: Given) -> Calibration:
    """The figures of ``windows`` (each checked) and ``given``; what cannot be derived is missing."""
    for w in windows:
        check_window(w)
    models = sorted({w.before.model for w in windows})
    if len(models) > 1:
        raise CalibrationError(
            f"the windows are of different models [{', '.join(models)}]: name one with --model"
        )
    measured = tuple(measure(w) for w in windows)
    derived: dict[str, Figure | str] = {}
    by_batch = sorted(measured, key=lambda m: math.inf if m.batch is None else m.batch)
    prefills = [m for m in by_batch if m.prefill is not None]
    derived[PREFILL] = (
        Figure(prefills[0].prefill, prefills[0].prefill_from)
        if prefills and prefills[0].prefill is not None
        else "; ".join(m.prefill_from for m in measured)
    )
    derived |= _decode(measured)
    derived |= _engine_figures(measured, given)
    figures = {k: v for k in KEYS if isinstance(v := derived[k], Figure)}
    missing = {k: v for k in KEYS if isinstance(v := derived[k], str)}
    return Calibration(models[0], measured, figures, missing)


def _number(key: str, value: float) -> str:
    """As YAML reads it back: whole numbers for the counts, five significant digits, never an exponent."""
    if key in (SEQS, KV):
        return str(int(value))
    return format(Decimal(f"{value:.5g}"), "f")


def preset_yaml(cal: Calibration) -> str:
    """The ``tokens`` block (for a scenario's ``workload``), a comment per figure; the missing ones as
    comments."""
    lines = [
        f'# gpuscale calibrate: a replica of model "{cal.model}" (vLLM), measured by its /metrics; put this',
        "# block under a scenario's workload: (replicaModel: tokens)",
    ]
    for m in cal.measured:
        w = m.window
        seconds = f"{w.seconds:.4g} s" if w.seconds is not None else "length not known"
        batch = f"batch {m.batch:.3g}" if m.batch is not None else "batch not known"
        step = f"step {m.step:.4g} s" if m.step is not None else "no step"
        lines.append(
            f"# {w.label}: {w.what} ({seconds}): {m.requests:.0f} requests finished, {batch}, {step}"
        )
    lines.append("tokens:")
    for key in KEYS:
        figure = cal.figures.get(key)
        if figure is not None:
            lines.append(f"  {key}: {_number(key, figure.value)}  # {figure.source}")
        else:
            lines.append(f"  # {key}: missing: {cal.missing[key]}")
    return "\n".join(lines) + "\n"
