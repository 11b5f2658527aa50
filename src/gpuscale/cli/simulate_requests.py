"""``gpuscale simulate --requests LOG --profile NAME --out DIR``: the standard policies on a request log.

The log is checked in one pass (a bad row is one line: the file, the line, the column, the value and what is
allowed), the scenario is built around it (``sim.requests_scenario``), written to ``DIR/scenario.yaml`` and
then read back from there, so that what ran is what the file says."""

from __future__ import annotations

import argparse
import functools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from ..errors import UsageError
from ..scaling.profiles import ProfileSet
from ..sim import Scenario, ScenarioError, parse_scenario
from ..sim._keda_manifest import SIM_METRICS
from ..sim.requests import FORMATS, Format, RequestLog, RequestLogError, log_stats, read_requests
from ..sim.requests_scenario import plan_for, scenario_text
from ..sim.tokens import PRESETS

__all__ = ["add_arguments", "iter_lines", "open_beside", "requests_scenario"]

DEFAULT_PRESET = "llama-3.3-70b-fp8-2xh100"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests",
        type=Path,
        metavar="LOG",
        help="a request log (one row per request: arrival, prompt and output tokens; the Azure trace's "
        "columns or seconds,prompt_tokens,output_tokens): run the standard policies on it, each replica "
        "modelled by tokens; writes the scenario it used to --out/scenario.yaml",
    )
    parser.add_argument(
        "--profile", metavar="NAME", help="with --requests: the gpuscale profile (llm-serving)"
    )
    parser.add_argument(
        "--preset", metavar="NAME", help=f"with --requests: the replica's model and GPUs ({DEFAULT_PRESET})"
    )
    parser.add_argument("--rate-scale", metavar="X", help="with --requests: multiply the request rate (1)")
    parser.add_argument("--time-scale", metavar="X", help="with --requests: stretch time (1)")
    parser.add_argument("--seed", metavar="N", help="with --requests: the resampling's seed (0)")
    parser.add_argument(
        "--format", metavar="F", dest="log_format_", help="with --requests: auto, azure or plain"
    )


def iter_lines(path: Path) -> Iterator[str]:
    """The lines of ``path`` as UTF-8 (a byte-order mark dropped), read as they are needed, each decoded
    alone so that bytes that are not UTF-8 are reported on their line (``UnicodeDecodeError``)."""
    with path.open("rb") as f:
        for i, line in enumerate(f):
            text = line.decode("utf-8")
            yield text.removeprefix("\ufeff") if i == 0 else text


def _number(flag: str, text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise UsageError(f'{flag} "{text}": must be a number > 0')
    return value


def _options(args: argparse.Namespace, profiles: ProfileSet) -> tuple[RequestLog, str, str]:
    """The log's options, the preset and the profile, from the flags; a bad one is one line."""
    if args.scenario is not None or args.set_dir is not None:
        raise UsageError("simulate: --requests runs its own scenario; give no scenario file and no --set")
    if args.jobs is not None:
        raise UsageError(f"--jobs {args.jobs}: only with --set")
    seed_text = args.seed if args.seed is not None else "0"
    if not seed_text.isdigit():
        raise UsageError(f'--seed "{seed_text}": must be a whole number >= 0')
    fmt = args.log_format_ or "auto"
    if fmt not in FORMATS:
        raise UsageError(f'--format "{fmt}": must be one of [{", ".join(FORMATS)}]')
    preset = args.preset or DEFAULT_PRESET
    if preset not in PRESETS:
        raise UsageError(f'--preset "{preset}": must be one of [{", ".join(sorted(PRESETS))}]')
    profile = args.profile or "llm-serving"
    runnable = sorted(p.name for p in profiles.values() if p.metric in SIM_METRICS)
    if profile not in runnable:
        raise UsageError(
            f'--profile "{profile}": must be one of [{", ".join(runnable)}] (the profiles on a '
            "metric the simulator feeds)"
        )
    log = RequestLog(
        file=str(args.requests),
        format=cast(Format, fmt),
        rate_scale=_number("--rate-scale", args.rate_scale, 1.0),
        time_scale=_number("--time-scale", args.time_scale, 1.0),
        seed=int(seed_text),
    )
    return log, preset, profile


def requests_scenario(args: argparse.Namespace, profiles: ProfileSet) -> tuple[Scenario, Path]:
    """The scenario around ``--requests``, written to ``--out/scenario.yaml`` and read back from it."""
    log, preset, profile = _options(args, profiles)
    path: Path = args.requests
    source = f"--requests {path}"
    try:
        last = 0.0
        for r in read_requests(iter_lines(path), log, str(path)):
            last = r.arrival
        stats = log_stats(iter_lines(path), log, max(60, math.ceil(last) + 1), str(path))
    except RequestLogError as e:
        raise UsageError(f"{source}: {e}") from None
    if stats.requests == 0:
        raise UsageError(f'{source}: no request in "{path}" (a header and no row)')
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
        relative = os.path.relpath(path.resolve(), out.resolve())
        text = scenario_text(relative, log, plan_for(stats, preset), preset, profile)
        written = out / "scenario.yaml"
        written.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f'--out "{out}": cannot write there: {e.strerror or e}') from None

    try:
        scenario = parse_scenario(
            text, source=str(written), profiles=profiles, open_lines=functools.partial(open_beside, out)
        )
    except ScenarioError as e:
        raise UsageError(str(e)) from None
    return scenario, written


def open_beside(folder: Path, name: str) -> Iterator[str]:
    """``name``'s lines, ``name`` relative to ``folder`` (a scenario's folder)."""
    return iter_lines(folder / name)
