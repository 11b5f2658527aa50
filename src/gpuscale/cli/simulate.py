"""``gpuscale simulate SCENARIO.yaml --out DIR``: run the offline HPA/KEDA simulator on a scenario file."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import plotting
from ..errors import UsageError
from ..scaling.profiles import ProfileSet
from ..sim import ScenarioError, parse_scenario, run_scenario, write_outputs
from ._options import profiles_from_option

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate HPA/KEDA policies on a demand trace, offline",
        description="Run every policy of a scenario file through a faithful model of the HPA, KEDA and the "
        "metric pipeline; write timeline.csv, summary.json and plot.png. Format: docs/simulator.md.",
    )
    parser.add_argument("scenario", type=Path, help="scenario YAML file")
    parser.add_argument("--out", type=Path, required=True, help="directory for the outputs (created)")
    parser.add_argument(
        "--profiles",
        metavar="FILE",
        help="the scaler's profiles file (the chart's scaler.profiles), for triggers that name a profile "
        "of it; the built-in profiles need none",
    )
    parser.set_defaults(func=run)


def _profiles(args: argparse.Namespace) -> ProfileSet:
    """Every profile a trigger may name: the built-in ones, and a ``--profiles`` file's."""
    return profiles_from_option(args.profiles) or ProfileSet.builtin()


def run(args: argparse.Namespace) -> int:
    path: Path = args.scenario
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f'scenario "{path}": cannot read it: {e.strerror or e}') from None

    def read_text(name: str) -> str:
        return (path.parent / name).read_text(encoding="utf-8")

    try:
        scenario = parse_scenario(text, source=str(path), read_text=read_text, profiles=_profiles(args))
    except ScenarioError as e:
        raise UsageError(str(e)) from None
    result = run_scenario(scenario)
    out: Path = args.out
    try:
        outputs = write_outputs(result, out)
    except OSError as e:
        raise UsageError(f'--out "{out}": cannot write there: {e.strerror or e}') from None
    for s in result.summaries:
        up = "-" if s.time_to_first_scale_up is None else f"{s.time_to_first_scale_up}s"
        print(
            f"{s.policy}: {s.gpu_hours:.2f} GPU-hours, {100 * s.share_of_demand_unserved:.1f}% of demand "
            f"unserved, p95 utilization {s.p95_utilization or 0:.0f}%, {s.scale_events} scale events, "
            f"{s.direction_changes} direction changes, first scale-up after the step {up}"
        )
    print(f"wrote {outputs.timeline}")
    print(f"wrote {outputs.summary}")
    print(f"wrote {outputs.plot}" if outputs.plot is not None else f"no plot.png: {plotting.MISSING}")
    return 0
