"""Scenario parsing of a request log (``demand.shape: requests``) and of the token model
(``workload.replicaModel``, ``workload.tokens``), for ``scenario.parse_scenario``; every problem goes to
the ``Checker`` like any other field's."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import cast

from ._check import Checker
from .requests import FORMATS, Format, LogStats, RequestLog, RequestLogError, RequestsDemand, log_stats
from .tokens import PRESETS, TOKEN_KEYS, TokenParams, capacity_per_replica
from .workload import DemandShape, Workload

__all__ = ["REQUESTS_FIELDS", "finish_workload", "parse_requests", "parse_tokens"]

REQUESTS_FIELDS = ("file", "format", "rateScale", "timeScale", "seed", "model")

OpenLines = Callable[[str], Iterable[str]]


def parse_requests(
    c: Checker, raw: dict[str, object], path: str, open_lines: OpenLines | None, duration: int
) -> RequestsDemand:
    """The ``requests`` shape: the log read once, every row checked, its per-second counts kept."""
    file = c.string(raw, "file", path, default=None)
    fmt = cast(Format, c.string(raw, "format", path, default="auto", choices=FORMATS))
    log = RequestLog(
        file=file,
        format=fmt,
        rate_scale=c.number(raw, "rateScale", path, default=1.0, minimum=0, exclusive=True),
        time_scale=c.number(raw, "timeScale", path, default=1.0, minimum=0, exclusive=True),
        seed=c.integer(raw, "seed", path, default=0, minimum=0),
        model=c.string(raw, "model", path, default="") or None,
    )
    empty = RequestsDemand(log, LogStats((0.0,) * max(0, duration), 0, 0, 0, 0.0), lambda: ())
    if not file:
        return empty
    if open_lines is None:
        c.fail(f"{path}.file", "request logs cannot be read here")
        return empty
    try:
        stats = log_stats(open_lines(file), log, max(0, duration))
    except RequestLogError as e:
        c.fail(f"{path}.file", str(e))
        return empty
    if stats.requests == 0:
        c.fail(
            f"{path}.file", f'"{file}": no request (a header and no row, or no row of model "{log.model}")'
        )
    return RequestsDemand(log, stats, functools.partial(open_lines, file))


def parse_tokens(c: Checker, raw: dict[str, object], path: str) -> TokenParams | None:
    """``workload.tokens``: a ``preset`` and/or each parameter (a parameter given wins over the preset's)."""
    here = f"{path}.tokens"
    t = c.mapping(raw, "tokens", path, required=False)
    if t is None:
        return None
    c.known(t, here, TOKEN_KEYS)
    base: TokenParams | None = None
    if t.get("preset") is not None:
        name = c.string(t, "preset", here, default=None, choices=tuple(sorted(PRESETS)))
        base = PRESETS.get(name)

    def number(key: str, attr: str, *, exclusive: bool = True) -> float:
        default = cast(float, getattr(base, attr)) if base is not None else None
        return c.number(t, key, here, default=default, minimum=0, exclusive=exclusive)

    def integer(key: str, attr: str) -> int:
        default = cast(int, getattr(base, attr)) if base is not None else None
        return c.integer(t, key, here, default=default, minimum=1)

    overridden = any(k in t for k in TOKEN_KEYS[1:])
    return TokenParams(
        prefill_tokens_per_second=number("prefillTokensPerSecond", "prefill_tokens_per_second"),
        decode_step_seconds=number("decodeStepSeconds", "decode_step_seconds"),
        decode_step_seconds_per_sequence=number(
            "decodeStepSecondsPerSequence", "decode_step_seconds_per_sequence", exclusive=False
        ),
        max_num_seqs=integer("maxNumSeqs", "max_num_seqs"),
        kv_cache_tokens=integer("kvCacheTokens", "kv_cache_tokens"),
        preset=base.preset if base is not None and not overridden else None,
    )


def finish_workload(c: Checker, workload: Workload, demand: DemandShape) -> Workload:
    """The workload once the demand is known: the token model needs a request log and its parameters, and
    its ``capacityPerReplica`` (when not given) is what a saturated replica finishes of the log's mean
    request (``tokens.capacity_per_replica``)."""
    if workload.replica_model != "tokens":
        return workload
    ok = True
    if not isinstance(demand, RequestsDemand):
        c.bad(
            "workload.replicaModel",
            "tokens",
            "requests with this demand (the token model needs demand.shape: requests, a request log)",
        )
        ok = False
    if workload.demand_unit != "requests/s":
        c.bad("workload.demandUnit", workload.demand_unit, "requests/s with replicaModel tokens")
        ok = False
    if workload.tokens is None:
        c.fail(
            "workload.tokens",
            "is required with replicaModel tokens: a preset (one of "
            f"[{', '.join(sorted(PRESETS))}]) or prefillTokensPerSecond, decodeStepSeconds, "
            "decodeStepSecondsPerSequence, maxNumSeqs and kvCacheTokens",
        )
        ok = False
    if not ok or not isinstance(demand, RequestsDemand) or workload.tokens is None:
        return (
            replace(workload, capacity_per_replica=1.0)
            if math.isnan(workload.capacity_per_replica)
            else workload
        )
    if math.isnan(workload.capacity_per_replica):
        stats = demand.stats
        derived = capacity_per_replica(workload.tokens, stats.mean_prompt, stats.mean_output)
        return replace(workload, capacity_per_replica=round(derived, 3))
    return workload
