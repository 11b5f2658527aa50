"""Run a scenario and write what it produced: ``timeline.csv``, ``summary.json``, ``plot.png``; for several
scenarios (the standard set) each one's in a folder of its own, plus ``table.md``, ``table.json`` and
``set.png``.

``run_scenario`` is pure; ``write_outputs`` and ``write_set`` are the only functions here that touch the file
system.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import plotting
from .loop import simulate
from .policy import Timeline
from .requests import RequestsDemand
from .scenario import Scenario
from .summary import Summary, summarize
from .tokenreport import TOKEN_COLUMNS, token_cells, token_summary
from .workload import demand_series, step_time

__all__ = ["Outputs", "Result", "SetOutputs", "run_scenario", "write_outputs", "write_set"]

TIMELINE_COLUMNS = (
    "t",
    "policy",
    "demand",
    "capacity",
    "replicas_desired",
    "replicas_ready",
    "pods",
    "metric_value",
    "utilization_pct",
    "served",
    "unserved",
    "waiting",
    "kv_cache_pct",
    "ttft_seconds",
)


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    timelines: tuple[Timeline, ...]
    summaries: tuple[Summary, ...]


@dataclass(frozen=True)
class Outputs:
    timeline: Path
    summary: Path
    plot: Path | None  # None without matplotlib (the ``plots`` extra)


@dataclass(frozen=True)
class SetOutputs:
    scenarios: tuple[Outputs, ...]
    table: Path  # table.md
    json: Path  # table.json
    plot: Path | None  # set.png; None without matplotlib


def run_scenario(scenario: Scenario) -> Result:
    demand = demand_series(scenario.demand, scenario.duration_seconds)
    step_at = scenario.step_at_seconds
    if step_at is None:
        step_at = step_time(scenario.demand, demand)
    shape = scenario.demand
    duration = scenario.duration_seconds
    timelines = tuple(
        simulate(
            p,
            scenario.workload,
            demand,
            scenario.controller,
            shape.per_second(duration) if isinstance(shape, RequestsDemand) else None,
        )
        for p in scenario.policies
    )
    summaries = tuple(summarize(tl, scenario.workload.gpus_per_replica, step_at) for tl in timelines)
    return Result(scenario, timelines, summaries)


def _fmt(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6g}"


def write_outputs(result: Result, out_dir: Path, policies: Sequence[str] = ()) -> Outputs:
    """``timeline.csv``, ``summary.json`` and ``plot.png`` in ``out_dir``; ``policies``: those of a set of
    traces, so that each policy has one colour in every plot of the set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    step = result.scenario.timeline_step_seconds
    timeline_path = out_dir / "timeline.csv"
    tokens = any(tl.tokens is not None for tl in result.timelines)
    with timeline_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(TIMELINE_COLUMNS + (TOKEN_COLUMNS if tokens else ()))
        for tl in result.timelines:
            for t in range(0, len(tl.demand), step):
                writer.writerow(
                    (
                        t,
                        tl.policy,
                        _fmt(tl.demand[t]),
                        _fmt(tl.capacity[t]),
                        tl.desired[t],
                        tl.ready[t],
                        tl.pods[t],
                        _fmt(tl.metric[t]),
                        _fmt(tl.utilization[t]),
                        _fmt(tl.served[t]),
                        _fmt(tl.unserved[t]),
                        _fmt(tl.waiting[t]),
                        _fmt(tl.kv_cache[t]),
                        _fmt(tl.ttft[t]),
                        *token_cells(tl, t),
                    )
                )
    summary_path = out_dir / "summary.json"
    doc = {
        "scenario": result.scenario.name,
        "durationSeconds": result.scenario.duration_seconds,
        "workload": result.scenario.workload.name,
        "policies": {
            s.policy: s.as_dict() | token_summary(tl)
            for s, tl in zip(result.summaries, result.timelines, strict=True)
        },
    }
    summary_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if not plotting.available():
        return Outputs(timeline_path, summary_path, None)
    from .plot import plot_result  # matplotlib is imported only when plotting

    plot_path = out_dir / "plot.png"
    plot_result(result, plot_path, policies)
    return Outputs(timeline_path, summary_path, plot_path)


def write_set(results: tuple[Result, ...], out_dir: Path) -> SetOutputs:
    """Each result's outputs in ``out_dir/<scenario name>/``, and the comparison of them all."""
    from .compare import rows, table_markdown

    policies = [tl.policy for r in results for tl in r.timelines]
    each = tuple(write_outputs(r, out_dir / r.scenario.name, policies) for r in results)
    table = rows(results)
    table_path = out_dir / "table.md"
    table_path.write_text(table_markdown(table), encoding="utf-8")
    json_path = out_dir / "table.json"
    doc = [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.__dict__.items()} for r in table]
    json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if not plotting.available():
        return SetOutputs(each, table_path, json_path, None)
    from .plot import plot_set

    plot_path = out_dir / "set.png"
    plot_set(table, plot_path)
    return SetOutputs(each, table_path, json_path, plot_path)
