"""``gpuscale simulate SCENARIO.yaml --out DIR``: run the offline HPA/KEDA simulator on a scenario file;
``gpuscale simulate --set scenarios/ --out DIR``: on the standard set of traces (docs/decisions.md)."""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from .. import plotting
from ..errors import UsageError
from ..files import read_text
from ..scaling.profiles import ProfileSet
from ..sim import Result, Scenario, ScenarioError, parse_scenario, run_scenario, write_outputs
from ..sim.compare import STANDARD_SET, rows, table_text
from ..sim.report import write_set
from ..sim.tokenreport import token_table
from ._options import profiles_from_option
from .simulate_requests import add_arguments, open_beside, requests_scenario

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate HPA/KEDA policies on a demand trace, offline",
        description="Run every policy of a scenario file through a faithful model of the HPA, KEDA, the "
        "metric pipeline and the workload (the engines' queue, pods starting in phases); print the "
        "comparison table and write timeline.csv, summary.json and plot.png. With --set, do it for each "
        "trace of the standard set and write table.md, table.json and set.png. With --requests, on a request "
        "log, each replica modelled by tokens, and write the scenario used. Format: docs/simulator.md.",
    )
    parser.add_argument("scenario", type=Path, nargs="?", help="scenario YAML file")
    parser.add_argument(
        "--set",
        type=Path,
        metavar="DIR",
        dest="set_dir",
        help="run the standard set of traces, DIR/<name>.yaml for each of: " + ", ".join(STANDARD_SET),
    )
    parser.add_argument("--out", type=Path, required=True, help="directory for the outputs (created)")
    parser.add_argument(
        "--profiles",
        metavar="FILE",
        help="the scaler's profiles file (the chart's scaler.profiles), for triggers that name a profile "
        "of it; the built-in profiles need none",
    )
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="with --set, simulate up to N traces at once, each in a process of its own (default: the "
        "CPUs this process may use, at most the set's size; 1: one after another in this process)",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


MAX_JOBS = 64


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f'"{text}" must be a whole number from 1 to {MAX_JOBS}')
    return n


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _timed(scenario: Scenario) -> tuple[Result, float]:
    started = time.monotonic()
    result = run_scenario(scenario)
    return result, time.monotonic() - started


def _run_set(scenarios: Sequence[Scenario], jobs: int) -> tuple[Result, ...]:
    """Every scenario's result, in the set's order; one line on stderr per trace as it finishes, with the
    seconds it took (a whole set takes minutes, the day alone most of them)."""
    n = len(scenarios)
    started = time.monotonic()
    results: dict[int, Result] = {}

    def say(i: int, seconds: float) -> None:
        print(
            f"{scenarios[i].name}: simulated in {seconds:.1f} s ({len(results)}/{n}, "
            f"{time.monotonic() - started:.0f} s in all)",
            file=sys.stderr,
            flush=True,
        )

    print(
        f"simulating {n} traces, {min(jobs, n)} at a time: {', '.join(s.name for s in scenarios)}",
        file=sys.stderr,
        flush=True,
    )
    if jobs <= 1 or n <= 1:
        for i, scenario in enumerate(scenarios):
            results[i], seconds = _timed(scenario)
            say(i, seconds)
    else:
        # spawn, not fork: the CLI's process may hold gRPC's threads, which a fork does not survive
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(jobs, n), mp_context=context) as pool:
            futures = {pool.submit(_timed, s): i for i, s in enumerate(scenarios)}
            for future in as_completed(futures):
                i = futures[future]
                results[i], seconds = future.result()
                say(i, seconds)
    return tuple(results[i] for i in range(n))


def _profiles(args: argparse.Namespace) -> ProfileSet:
    """Every profile a trigger may name: the built-in ones, and a ``--profiles`` file's."""
    return profiles_from_option(args.profiles) or ProfileSet.builtin()


def _load(path: Path, profiles: ProfileSet) -> Scenario:
    text = read_text(path, "scenario")

    def read_named(name: str) -> str:
        return read_text(path.parent / name, "demand file")

    try:
        return parse_scenario(
            text,
            source=str(path),
            read_text=read_named,
            profiles=profiles,
            open_lines=functools.partial(open_beside, path.parent),
        )
    except ScenarioError as e:
        raise UsageError(str(e)) from None


_REQUESTS_FLAGS = (
    ("--profile", "profile"),
    ("--preset", "preset"),
    ("--rate-scale", "rate_scale"),
    ("--time-scale", "time_scale"),
    ("--seed", "seed"),
    ("--format", "log_format_"),
)


def _run_one(result: Result, out: Path) -> None:
    """Write one scenario's outputs and print its table (and the token model's latencies, if it ran)."""
    try:
        outputs = write_outputs(result, out)
    except OSError as e:
        raise UsageError(f'--out "{out}": cannot write there: {e.strerror or e}') from None
    print(f"{result.scenario.name}:")
    print(table_text(rows([result]), with_trace=False))
    latencies = token_table(result.timelines)
    if latencies:
        print()
        print(latencies)
    print(f"wrote {outputs.timeline}")
    print(f"wrote {outputs.summary}")
    print(f"wrote {outputs.plot}" if outputs.plot is not None else f"no plot.png: {plotting.MISSING}")


def _run_requests(args: argparse.Namespace) -> int:
    scenario, written = requests_scenario(args, _profiles(args))
    print(f"wrote {written}")
    _run_one(run_scenario(scenario), args.out)
    return 0


def _set_paths(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise UsageError(f'--set "{directory}": not a directory (the folder of the standard set\'s files)')
    paths = [directory / f"{name}.yaml" for name in STANDARD_SET]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        names = ", ".join(STANDARD_SET)
        raise UsageError(f'--set "{directory}": {", ".join(missing)} missing; the standard set is {names}')
    return paths


def run(args: argparse.Namespace) -> int:
    if args.requests is not None:
        return _run_requests(args)
    extra = [f for f, v in _REQUESTS_FLAGS if getattr(args, v) is not None]
    if extra:
        raise UsageError(f"{extra[0]}: only with --requests")
    if (args.scenario is None) == (args.set_dir is None):
        raise UsageError("simulate: give a scenario file or --set DIR, not both and not neither")
    if args.jobs is not None and args.set_dir is None:
        raise UsageError(f"--jobs {args.jobs}: only with --set (one scenario runs in this process)")
    profiles = _profiles(args)
    out: Path = args.out
    if args.scenario is not None:
        _run_one(run_scenario(_load(args.scenario, profiles)), out)
        return 0
    scenarios = [_load(p, profiles) for p in _set_paths(args.set_dir)]
    results = _run_set(scenarios, args.jobs or _cpus())
    try:
        written = write_set(results, out)
    except OSError as e:
        raise UsageError(f'--out "{out}": cannot write there: {e.strerror or e}') from None
    print(table_text(rows(results)))
    for o in written.scenarios:
        print(f"wrote {o.timeline.parent}/ (timeline.csv, summary.json{', plot.png' if o.plot else ''})")
    print(f"wrote {written.table}")
    print(f"wrote {written.json}")
    print(f"wrote {written.plot}" if written.plot is not None else f"no set.png: {plotting.MISSING}")
    return 0
