"""Scenario files: parse and validate once, at the edge, into a frozen ``Scenario``.

``parse_scenario(text, read_text=...)`` is the only place that reads YAML (or a demand CSV, through the
injected ``read_text``). Every problem is collected and raised together as one ``ScenarioError``. The format
is documented field by field in docs/simulator.md.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import yaml

from ..errors import UnreadableFile
from ..scaling.profiles import ProfileSet
from ._check import Checker
from ._requests_scenario import REQUESTS_FIELDS, OpenLines, finish_workload, parse_requests, parse_tokens
from .errors import ScenarioError
from .hpa import ControllerConfig
from .manifests import parse_policy
from .policy import Policy
from .workload import (
    BurstsDemand,
    ConstantDemand,
    DemandShape,
    DiurnalDemand,
    PointsDemand,
    SpikeDemand,
    StepDemand,
    Workload,
)

__all__ = ["Scenario", "parse_scenario"]

MAX_DURATION = 7 * 86400
_SHAPES = ("constant", "step", "spike", "diurnal", "points", "csv", "bursts", "requests")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    duration_seconds: int
    timeline_step_seconds: int
    controller: ControllerConfig
    workload: Workload
    demand: DemandShape
    step_at_seconds: int | None
    policies: tuple[Policy, ...]


def _cluster(c: Checker, doc: dict[str, object]) -> ControllerConfig:
    raw = c.mapping(doc, "cluster", "", required=False) or {}
    c.known(
        raw,
        "cluster",
        ("hpaSyncPeriodSeconds", "hpaTolerance", "downscaleStabilizationSeconds", "configurableTolerance"),
    )
    return ControllerConfig(
        sync_period_seconds=c.integer(raw, "hpaSyncPeriodSeconds", "cluster", default=15, minimum=1),
        tolerance=c.number(raw, "hpaTolerance", "cluster", default=0.1, minimum=0),
        downscale_stabilization_seconds=c.integer(
            raw, "downscaleStabilizationSeconds", "cluster", default=300, minimum=0
        ),
        configurable_tolerance=c.boolean(raw, "configurableTolerance", "cluster", default=True),
    )


def _workload(c: Checker, doc: dict[str, object]) -> Workload:
    raw = c.mapping(doc, "workload", "", required=True) or {}
    p = "workload"
    c.known(
        raw,
        p,
        (
            "name",
            "demandUnit",
            "capacityPerReplica",
            "gpusPerReplica",
            "provisioningSeconds",
            "loadSeconds",
            "initialReplicas",
            "terminationSeconds",
            "maxQueueSeconds",
            "requestSeconds",
            "abortsCounted",
            "baseTtftSeconds",
            "gpuMemoryGiB",
            "modelMemoryGiB",
            "replicaModel",
            "tokens",
        ),
    )
    unit = c.string(raw, "demandUnit", p, default="requests/s", choices=("requests/s", "gpu-seconds/s"))
    gpus = c.integer(raw, "gpusPerReplica", p, default=1, minimum=1)
    demand = doc.get("demand")
    log = isinstance(demand, dict) and demand.get("shape") == "requests"
    replica_model = c.string(
        raw, "replicaModel", p, default="tokens" if log else "requests", choices=("requests", "tokens")
    )
    default_capacity = float(gpus) if unit == "gpu-seconds/s" else None
    if replica_model == "tokens":
        default_capacity = math.nan  # derived from the log and the model (finish_workload)
    memory = c.number(raw, "gpuMemoryGiB", p, default=80.0, minimum=0, exclusive=True)
    model: float | None = None
    if raw.get("modelMemoryGiB") is not None:
        model = c.number(raw, "modelMemoryGiB", p, default=0.9 * memory, minimum=0)
        if model > memory:
            c.bad(f"{p}.modelMemoryGiB", raw["modelMemoryGiB"], f"a number <= gpuMemoryGiB ({memory:g})")
            model = None
    return Workload(
        name=c.string(raw, "name", p, default="workload"),
        demand_unit=cast(Literal["requests/s", "gpu-seconds/s"], unit),
        capacity_per_replica=c.number(
            raw, "capacityPerReplica", p, default=default_capacity, minimum=0, exclusive=True
        ),
        gpus_per_replica=gpus,
        provisioning_seconds=c.integer(raw, "provisioningSeconds", p, default=0, minimum=0),
        load_seconds=c.integer(raw, "loadSeconds", p, default=60, minimum=0),
        initial_replicas=c.integer(raw, "initialReplicas", p, default=1, minimum=0),
        termination_seconds=c.integer(raw, "terminationSeconds", p, default=0, minimum=0, maximum=86400),
        max_queue_seconds=c.integer(raw, "maxQueueSeconds", p, default=0, minimum=0, maximum=86400),
        request_seconds=c.number(raw, "requestSeconds", p, default=4.0, minimum=0, exclusive=True),
        aborts_counted=c.boolean(raw, "abortsCounted", p, default=False),
        base_ttft_seconds=c.number(raw, "baseTtftSeconds", p, default=0.1, minimum=0),
        gpu_memory_gib=memory,
        model_memory_gib=model,
        replica_model=cast(Literal["requests", "tokens"], replica_model),
        tokens=parse_tokens(c, raw, p),
    )


def _points(c: Checker, items: list[object], path: str) -> tuple[tuple[int, float], ...]:
    points: list[tuple[int, float]] = []
    for i, item in enumerate(items):
        ok = (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], int)
            and isinstance(item[1], int | float)
            and not isinstance(item[0], bool)
            and item[1] >= 0
        )
        if not ok:
            c.bad(f"{path}[{i}]", item, "a pair [seconds, value >= 0]")
            continue
        assert isinstance(item, list)
        points.append((int(item[0]), float(item[1])))
    if [t for t, _ in points] != sorted({t for t, _ in points}):
        c.fail(path, "times must be strictly increasing")
    return tuple(points) or ((0, 0.0),)


def _csv_points(
    c: Checker, raw: dict[str, object], path: str, read_text: Callable[[str], str] | None
) -> tuple[tuple[int, float], ...]:
    file = c.string(raw, "file", path, default=None)
    time_col = c.string(raw, "timeColumn", path, default="t")
    value_col = c.string(raw, "valueColumn", path, default="demand")
    if not file or read_text is None:
        if file:
            c.fail(f"{path}.file", "CSV files cannot be read here")
        return ((0, 0.0),)
    try:
        text = read_text(file)
    except UnreadableFile as e:
        c.fail(f"{path}.file", f'cannot read "{file}": {e.reason}')
        return ((0, 0.0),)
    except OSError as e:
        c.fail(f"{path}.file", f'cannot read "{file}": {e.strerror or e}')
        return ((0, 0.0),)
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or time_col not in reader.fieldnames or value_col not in reader.fieldnames:
        c.fail(
            f"{path}.file",
            f'"{file}" needs columns "{time_col}" and "{value_col}"; '
            f"found [{', '.join(reader.fieldnames or [])}]",
        )
        return ((0, 0.0),)
    items: list[object] = []
    for row in reader:
        try:
            items.append([int(row[time_col]), float(row[value_col])])
        except (TypeError, ValueError):
            items.append([row.get(time_col), row.get(value_col)])
    return _points(c, items, f"{path}.file({file}) rows")


def _range(
    c: Checker, raw: dict[str, object], key: str, path: str, *, minimum: int, whole: bool
) -> tuple[float, float]:
    """A ``[low, high]`` pair of numbers >= ``minimum`` (``whole``: integers), low <= high; required."""
    here = f"{path}.{key}"
    value = raw.get(key)
    if value is None:
        c.fail(here, "is required")
        return (minimum, minimum)
    kind = int if whole else int | float
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, kind) and not isinstance(v, bool) and minimum <= v < math.inf for v in value)
        and value[0] <= value[1]
    )
    if not ok:
        numbers = "integers" if whole else "numbers"
        c.bad(here, value, f"a pair [low, high] of {numbers} >= {minimum}, low <= high")
        return (minimum, minimum)
    assert isinstance(value, list)
    return (value[0], value[1])


def _bursts(c: Checker, raw: dict[str, object], path: str, until: int) -> BurstsDemand:
    base = c.number(raw, "base", path, default=None, minimum=0)
    burst_seconds = _range(c, raw, "burstSeconds", path, minimum=1, whole=True)
    burst_multiple = _range(c, raw, "burstMultiple", path, minimum=0, whole=False)
    gap_seconds = _range(c, raw, "gapSeconds", path, minimum=0, whole=True)
    gap_demand = _range(c, raw, "gapDemand", path, minimum=0, whole=False)
    start = (
        c.integer(raw, "startSeconds", path, default=0, minimum=0)
        if raw.get("startSeconds") is not None
        else None
    )
    seed = c.integer(raw, "seed", path, default=0, minimum=0)
    return BurstsDemand.draw(
        base,
        (int(burst_seconds[0]), int(burst_seconds[1])),
        burst_multiple,
        (int(gap_seconds[0]), int(gap_seconds[1])),
        gap_demand,
        until=until,
        start_seconds=start,
        seed=seed,
    )


def _demand(
    c: Checker,
    doc: dict[str, object],
    read_text: Callable[[str], str] | None,
    duration: int,
    open_lines: OpenLines | None = None,
) -> tuple[DemandShape, int | None]:
    raw = c.mapping(doc, "demand", "", required=True) or {"shape": "constant", "value": 0}
    p = "demand"
    shape = c.string(raw, "shape", p, default=None, choices=_SHAPES)
    fields = {
        "constant": ("value",),
        "step": ("before", "after", "atSeconds", "untilSeconds"),
        "spike": ("base", "value", "atSeconds", "durationSeconds"),
        "diurnal": ("min", "max", "periodSeconds", "peakAtSeconds"),
        "points": ("points", "interpolation"),
        "csv": ("file", "timeColumn", "valueColumn", "interpolation"),
        "bursts": (
            "base",
            "burstSeconds",
            "burstMultiple",
            "gapSeconds",
            "gapDemand",
            "startSeconds",
            "seed",
        ),
        "requests": REQUESTS_FIELDS,
    }[shape]
    c.known(raw, p, ("shape", "stepAtSeconds", *fields))
    step_at = raw.get("stepAtSeconds")
    step = c.integer(raw, "stepAtSeconds", p, default=0, minimum=0) if step_at is not None else None

    def num(key: str, default: float | None = None) -> float:
        return c.number(raw, key, p, default=default, minimum=0)

    def sec(key: str, default: int | None = None, minimum: int = 0) -> int:
        return c.integer(raw, key, p, default=default, minimum=minimum)

    interpolation = cast(
        Literal["step", "linear"],
        c.string(raw, "interpolation", p, default="step", choices=("step", "linear")),
    )
    result: DemandShape
    if shape == "constant":
        result = ConstantDemand(num("value"))
    elif shape == "step":
        until = sec("untilSeconds", -1) if raw.get("untilSeconds") is not None else None
        result = StepDemand(num("before"), num("after"), sec("atSeconds"), until)
    elif shape == "spike":
        result = SpikeDemand(
            num("base", 0.0), num("value"), sec("atSeconds"), sec("durationSeconds", None, 1)
        )
    elif shape == "diurnal":
        low, high = num("min"), num("max")
        if high < low:
            c.bad(f"{p}.max", high, f"a number >= min ({low:g})")
        result = DiurnalDemand(low, high, sec("periodSeconds", 86400, 60), sec("peakAtSeconds", 50400))
    elif shape == "bursts":
        result = _bursts(c, raw, p, duration)
    elif shape == "requests":
        result = parse_requests(c, raw, p, open_lines, duration)
    elif shape == "points":
        result = PointsDemand(
            _points(c, c.sequence(raw, "points", p, required=True), f"{p}.points"), interpolation
        )
    else:
        result = PointsDemand(_csv_points(c, raw, p, read_text), interpolation)
    return result, step


def parse_scenario(
    text: str,
    *,
    source: str = "scenario",
    read_text: Callable[[str], str] | None = None,
    profiles: ProfileSet | None = None,
    open_lines: OpenLines | None = None,
) -> Scenario:
    """Parse a scenario; ``read_text(path)`` reads files it names (demand CSVs), relative to the scenario
    (raising ``UnreadableFile``, as ``gpuscale.files.read_text`` does, or ``OSError``); ``open_lines(path)``
    streams a request log's lines (each call a fresh iterator; ``OSError`` and ``UnicodeDecodeError`` while
    iterating are reported as the log's); ``profiles`` are what a gpuscale trigger's ``profile`` may name
    (default: the built-in ones)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError(
            (f"not valid YAML{where}: {getattr(e, 'problem', None) or e}",), source=source
        ) from None
    if not isinstance(doc, dict):
        raise ScenarioError(
            ("the file must be a YAML mapping with name, workload, demand, policies",), source=source
        )
    c = Checker()
    c.known(
        doc,
        "",
        (
            "name",
            "description",
            "durationSeconds",
            "timelineStepSeconds",
            "cluster",
            "workload",
            "demand",
            "policies",
        ),
    )
    name = c.string(doc, "name", "", default=None)
    duration = c.integer(doc, "durationSeconds", "", default=None, minimum=1, maximum=MAX_DURATION)
    step_out = c.integer(doc, "timelineStepSeconds", "", default=1, minimum=1)
    controller = _cluster(c, doc)
    workload = _workload(c, doc)
    demand, step_at = _demand(c, doc, read_text, duration, open_lines)
    workload = finish_workload(c, workload, demand)
    policies = [
        parse_policy(c, raw, f"policies[{i}]", profiles)
        for i, raw in enumerate(c.sequence(doc, "policies", "", required=True))
    ]
    names = [p.name for p in policies if p is not None]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        c.fail("policies", f'name "{dup}" is used more than once; names must be unique')
    if c.problems:
        raise ScenarioError(tuple(c.problems), source=source)
    return Scenario(
        name=name,
        description=str(doc.get("description") or ""),
        duration_seconds=duration,
        timeline_step_seconds=step_out,
        controller=controller,
        workload=workload,
        demand=demand,
        step_at_seconds=step_at,
        policies=tuple(p for p in policies if p is not None),
    )
