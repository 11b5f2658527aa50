"""``gpuscale calibrate``: the simulator's ``workload.tokens`` block from a running vLLM or saved bodies.

``--engine URL`` scrapes the engine's ``/metrics`` at the start and at the end of ``--seconds`` while the
user's load runs; ``--before FILE --after FILE`` (repeatable, paired in order) are windows saved earlier
(``--save DIR`` keeps an ``--engine`` window's bodies, each with the time it was scraped on its first line).
The arithmetic is ``gpuscale.calibrate``'s; this module reads the flags, the files and the engine (one
bounded GET each, ``gpuscale.httpfetch``), and writes the block. Bad input is one line and exit code 2; a
figure that cannot be derived is one line each and exit code 2, unless ``--partial``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from .. import __version__
from ..calibrate import (
    Calibration,
    Given,
    Reading,
    Window,
    calibrate,
    preset_yaml,
    read_body,
    readings_line,
    saved_running,
    scraped_at,
)
from ..errors import UsageError
from ..files import read_text
from ..httpfetch import Fetched, FetchRefused, fetch
from ._options import positive_seconds

__all__ = ["EngineWindow", "measure_engine", "register", "run", "run_async"]

log = logging.getLogger(__name__)

ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"  # the text format: a saved body takes a comment line
MAX_BODY_BYTES = 16 * 1024 * 1024
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="write the simulator's workload.tokens block from a running vLLM's metrics",
        description="Derive a replica's token-model figures (workload.tokens of a scenario) from a vLLM "
        "engine's /metrics over a window of load: scraped now (--engine) or saved (--before/--after). "
        "Each figure's comment says where it came from. A figure that cannot be derived is named with "
        "the flag that gives it, and the command exits 2 unless --partial.",
    )
    p.add_argument(
        "--engine",
        metavar="URL",
        help="the engine's metrics URL (http://HOST:PORT, /metrics added): scraped now, every --interval "
        "and after --seconds; run your load meanwhile",
    )
    p.add_argument(
        "--seconds",
        metavar="S",
        help="the window: with --engine how long to measure (default 60); without, the length of each "
        "--before/--after window whose files do not say when they were scraped",
    )
    p.add_argument(
        "--before",
        action="append",
        default=[],
        metavar="FILE",
        help="a saved /metrics body: a window's start",
    )
    p.add_argument(
        "--after", action="append", default=[], metavar="FILE", help="a saved /metrics body: a window's end"
    )
    p.add_argument(
        "--save", metavar="DIR", help="with --engine: keep its bodies (DIR/before.txt, DIR/after.txt)"
    )
    p.add_argument("--model", metavar="NAME", help="the model to calibrate, when the engine serves several")
    p.add_argument(
        "--max-num-seqs", metavar="N", help="the engine's --max-num-seqs (vLLM does not expose it)"
    )
    p.add_argument(
        "--kv-cache-tokens", metavar="N", help="the KV cache in tokens (default: from vllm:cache_config_info)"
    )
    p.add_argument(
        "--partial", action="store_true", help="write the figures derived even if some are missing"
    )
    p.add_argument("--out", metavar="FILE", help="write the block there (default: stdout)")
    p.add_argument(
        "--interval",
        default="1",
        metavar="S",
        help="with --engine: seconds between its readings of vllm:num_requests_running (default 1)",
    )
    p.add_argument("--timeout", default="10", metavar="S", help="seconds for one scrape (default 10)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Options:
    engine: str | None
    seconds: float | None
    files: tuple[tuple[str, str], ...]
    save: Path | None
    model: str | None
    given: Given
    timeout: float
    interval: float


def _whole(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f'{flag} "{text}" must be a whole number >= 1')
    return int(text)


def engine_url(text: str) -> str:
    """``text`` as a metrics URL (``/metrics`` when it names no path); ``UsageError`` if it is not one."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f'--engine "{text}" must be an http:// or https:// URL, e.g. http://10.0.0.5:8000')
    return text if parts.path not in ("", "/") else urllib.parse.urlunsplit(parts._replace(path="/metrics"))


def options(args: argparse.Namespace) -> Options:
    """The flags, checked; a bad one is a ``UsageError`` naming it."""
    if args.engine is None and not args.before and not args.after:
        raise UsageError(
            "calibrate: give --engine URL (and run a load while it measures), or --before FILE --after FILE "
            "(two saved /metrics bodies)"
        )
    if len(args.before) != len(args.after):
        raise UsageError(
            f"calibrate: --before and --after come in pairs (given: {len(args.before)} --before, "
            f"{len(args.after)} --after)"
        )
    if args.save is not None and args.engine is None:
        raise UsageError(f'--save "{args.save}": only with --engine (it keeps the bodies --engine scrapes)')
    seconds = positive_seconds(args.seconds, "--seconds") if args.seconds is not None else None
    return Options(
        engine=engine_url(args.engine) if args.engine is not None else None,
        seconds=seconds,
        files=tuple(zip(args.before, args.after, strict=True)),
        save=Path(args.save) if args.save is not None else None,
        model=args.model,
        given=Given(
            _whole(args.max_num_seqs, "--max-num-seqs"), _whole(args.kv_cache_tokens, "--kv-cache-tokens")
        ),
        timeout=positive_seconds(args.timeout, "--timeout"),
        interval=positive_seconds(args.interval, "--interval"),
    )


def _file_reading(path: str, flag: str, model: str | None) -> tuple[Reading, str]:
    text = read_text(path, flag)
    om = text.rstrip().endswith("# EOF")
    return read_body(text, f'{flag} "{path}"', at=scraped_at(text), model=model, openmetrics=om), text


def file_windows(opts: Options) -> list[Window]:
    """The ``--before``/``--after`` windows, each file read and parsed (``--seconds`` the length of a window
    whose files carry no scrape time; the readings of the running requests ``--save`` kept, where it did)."""
    out = []
    for i, (before, after) in enumerate(opts.files, 1):
        b, _ = _file_reading(before, "--before", opts.model)
        a, text = _file_reading(after, "--after", opts.model)
        if (b.at is None or a.at is None) and opts.seconds is not None:
            b, a = replace(b, at=0.0), replace(a, at=opts.seconds)
        what = f'--before "{before}" --after "{after}"'
        out.append(Window(f"window {i}", what, b, a, saved_running(text)))
    return out


@dataclass(frozen=True)
class EngineWindow:
    """An ``--engine`` window and the bodies it was measured from, with their scrape times."""

    window: Window
    bodies: tuple[tuple[float, Fetched], tuple[float, Fetched]]


async def _scrape(
    session: aiohttp.ClientSession, url: str, timeout: float, clock: Clock
) -> tuple[float, Fetched]:
    at = clock()
    try:
        return at, await fetch(session, url, timeout=timeout, max_body_bytes=MAX_BODY_BYTES)
    except FetchRefused as e:
        raise UsageError(f'--engine "{url}": cannot scrape it: {e.detail}') from None


async def measure_engine(
    url: str,
    seconds: float,
    label: str,
    *,
    model: str | None,
    timeout: float,
    interval: float = 1.0,
    clock: Clock,
    sleep: Sleep,
) -> EngineWindow:
    """Scrape ``url`` now, every ``interval`` (for ``vllm:num_requests_running``) and ``seconds`` after the
    first scrape; each body is read as it comes, so a bad one fails at once, not after the window."""
    source = f'--engine "{url}"'
    headers = {
        "Accept": ACCEPT,
        "Accept-Encoding": "identity",
        "User-Agent": f"gpuscale-calibrate/{__version__}",
    }
    async with aiohttp.ClientSession(headers=headers) as session:
        start = await _scrape(session, url, timeout, clock)
        first = read_body(start[1].text, source, at=start[0], model=model, openmetrics=start[1].openmetrics)
        log.info("measuring %s for %g s: run the load now", url, seconds)
        readings, end, deadline = [first], start, start[0] + seconds
        while end[0] < deadline:
            await sleep(max(0.0, min(end[0] + interval, deadline) - clock()))
            end = await _scrape(session, url, timeout, clock)
            body = end[1]
            readings.append(
                read_body(body.text, source, at=end[0], model=first.model, openmetrics=body.openmetrics)
            )
    running = tuple(r.running for r in readings if r.running is not None)
    window = Window(label, source, first, readings[-1], running if len(running) == len(readings) else ())
    return EngineWindow(window, (start, end))


def _save(folder: Path, url: str, measured: EngineWindow) -> None:
    """The window's bodies, each with its scrape time on its first line (the end's readings of the running
    requests on its second), so that ``--before``/``--after`` read them back as this window."""
    (start, first), (end, last) = measured.bodies
    texts = {
        "before.txt": (start, first, ""),
        "after.txt": (end, last, readings_line(measured.window.running)),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, (at, body, readings) in texts.items():
            head = (
                ""
                if body.openmetrics
                else f"# gpuscale calibrate: scraped at {at:.3f} from {url}\n" + readings
            )
            (folder / name).write_text(head + body.text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f'--save "{folder}": cannot write there: {e.strerror or e}') from None


def _write(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f'--out "{out}": cannot write it: {e.strerror or e}') from None


def report(cal: Calibration, partial: bool, out: str | None) -> int:
    """Write the block (or, with a figure missing and no ``--partial``, one line per missing figure)."""
    if cal.missing and not partial:
        for key, why in cal.missing.items():
            print(f"gpuscale: error: calibrate: {key} is missing: {why}", file=sys.stderr)
        return 2
    _write(preset_yaml(cal), out)
    return 0


async def run_async(args: argparse.Namespace, *, clock: Clock, sleep: Sleep) -> int:
    opts = options(args)
    windows = file_windows(opts)
    if opts.engine is not None:
        measured = await measure_engine(
            opts.engine,
            opts.seconds if opts.seconds is not None else 60.0,
            f"window {len(windows) + 1}",
            model=opts.model,
            timeout=opts.timeout,
            interval=opts.interval,
            clock=clock,
            sleep=sleep,
        )
        if opts.save is not None:
            _save(opts.save, opts.engine, measured)
        windows.append(measured.window)
    return report(calibrate(windows, opts.given), args.partial, args.out)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(run_async(args, clock=time.time, sleep=asyncio.sleep))
