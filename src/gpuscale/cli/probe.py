"""``gpuscale probe``: the GPUs this machine has and what they read now, like ``nvidia-smi``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

from ..backends import Backend, DeviceError
from ..errors import UsageError
from ..model import DeviceInfo, GpuSample
from ._options import add_backend_arguments, backend_from_args, positive_seconds

__all__ = ["gpu_record", "register"]

GIB = 1024**3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "probe",
        help="show the GPUs and their current readings",
        description="Show the GPUs and their current readings.",
    )
    add_backend_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object with a `gpus` list")
    p.add_argument(
        "--watch",
        metavar="SECONDS",
        help="read again every SECONDS (at least 0.1) until Ctrl-C or SIGTERM: a live table on a terminal, "
        "else one plain-text table per interval (with --json: one JSON object per line)",
    )
    p.set_defaults(func=run)


def gpu_record(
    device: DeviceInfo, sample: GpuSample | None, error: DeviceError | None = None
) -> dict[str, Any]:
    """One GPU as plain JSON data: its identity, then its reading (``null`` fields: not supported)."""
    rec: dict[str, Any] = dataclasses.asdict(device)
    rec["vendor"] = device.vendor.value
    rec["device"] = device.device_name
    rec["vendor_labels"] = dict(device.vendor_labels)  # as the vendor's exporter labels it: an object
    if sample is not None:
        reading = dataclasses.asdict(sample)
        reading.pop("uuid")
        reading["memory_free_bytes"] = sample.memory_free_bytes
        rec.update(reading)
    if error is not None:
        rec["error"] = {"kind": error.kind, "message": error.detail}
    return rec


def _read_all(backend: Backend, *, prime: bool = False) -> list[dict[str, Any]]:
    """Every GPU read once. ``prime``: read them once before, a quarter second earlier, so that activity
    measured over an interval (NVML's GPM) has one."""
    if prime:
        for dev in backend.devices():
            with contextlib.suppress(DeviceError):
                backend.sample(dev)
        time.sleep(0.25)
    out = []
    for dev in backend.devices():
        try:
            out.append(gpu_record(dev, backend.sample(dev)))
        except DeviceError as e:
            out.append(gpu_record(dev, None, e))
    return out


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


_COLUMNS = (
    ("GPU", "right"),
    ("Name", "left"),
    ("UUID", "left"),
    ("Util", "right"),
    ("SM act", "right"),
    ("Mem util", "right"),
    ("Memory used / total", "right"),
    ("Temp", "right"),
    ("Power / limit", "right"),
    ("SM clock", "right"),
    ("Procs", "right"),
)


def _rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """Each GPU's cells, in the order of ``_COLUMNS``; a GPU that could not be read: its error after its
    UUID."""
    rows = []
    for r in records:
        gpu = str(r["index"]) + (f"/{r['gpu_instance_id']}" if r["parent_uuid"] else "")
        if "error" in r:
            rows.append(
                [gpu, r["name"], r["uuid"], f"[red]{r['error']['kind']}: {r['error']['message']}[/red]"]
            )
            continue
        used, total = r.get("memory_used_bytes"), r.get("memory_total_bytes")
        mem = "-" if used is None or total is None else f"{used / GIB:.1f} / {total / GIB:.1f} GiB"
        power = f"{_fmt(r.get('power_watts'), '.0f')} / {_fmt(r.get('power_limit_watts'), '.0f')} W"
        rows.append(
            [
                gpu,
                r["name"],
                r["uuid"],
                _fmt(r.get("gpu_utilization"), ".0f", " %"),
                _fmt(r.get("sm_active"), ".0f", " %"),
                _fmt(r.get("memory_utilization"), ".0f", " %"),
                mem,
                _fmt(r.get("temperature_celsius"), ".0f", " °C"),
                power,
                _fmt(r.get("sm_clock_mhz"), ".0f", " MHz"),
                str(len(r.get("processes") or ())),
            ]
        )
    return rows


def _table(backend_name: str, records: list[dict[str, Any]], *, plain: bool = False) -> Any:
    """The table of ``records``; ``plain``: ASCII rules, for a pipe or a file."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=f"gpuscale probe — backend {backend_name} — {time.strftime('%H:%M:%S')}",
        title_justify="left",
        box=box.ASCII if plain else box.HEAVY_HEAD,
    )
    for col, justify in _COLUMNS:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in _rows(records):
        table.add_row(*row)
    return table


def _per_gpu(backend_name: str, records: list[dict[str, Any]]) -> Any:
    """The table's cells one GPU after the other, a line each: for a terminal too narrow for the table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    title = f"gpuscale probe — backend {backend_name} — {time.strftime('%H:%M:%S')}"
    parts: list[Any] = [Text(title, style="italic")]
    for record, row in zip(records, _rows(records), strict=True):
        names = [name for name, _ in _COLUMNS]
        if "error" in record:
            names[3] = "Error"
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")  # a value longer than the terminal folds: nothing is cut off
        for name, cell in zip(names, row, strict=False):
            grid.add_row(name, cell)
        parts += ["", grid]
    return Group(*parts)


def _width(console: Any, table: Any) -> int:
    """The columns ``table`` needs for every cell on one line."""
    from rich.measure import Measurement

    return int(Measurement.get(console, console.options.update_width(1_000_000), table).maximum)


def _view(console: Any, backend_name: str, records: list[dict[str, Any]]) -> Any:
    """The table when ``console`` (a terminal) is wide enough for it, else the GPUs one after the other."""
    table = _table(backend_name, records)
    if _width(console, table) <= console.width:
        return table
    return _per_gpu(backend_name, records)


def _print_frame(backend_name: str, records: list[dict[str, Any]]) -> None:
    """One frame on stdout. A terminal gets the table, or the GPUs one after the other where it is too narrow
    for it; a pipe or a file the table in ASCII as wide as its rows need, whatever $COLUMNS says (a pipe has
    no width: $COLUMNS is the terminal's the shell was started in), so that no value is cut."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        console.print(_view(console, backend_name, records))
        return
    table = _table(backend_name, records, plain=True)
    plain = Console(no_color=True, highlight=False)
    plain.width = _width(plain, table)
    plain.print(table)


def run(args: argparse.Namespace) -> int:
    interval = None if args.watch is None else watch_interval(args.watch)
    backend = backend_from_args(args)
    try:
        if interval is None:
            records = _read_all(backend, prime=backend.name != "mock")
            if args.json:
                print(json.dumps({"backend": backend.name, "gpus": records}, indent=2))
            else:
                _print_frame(backend.name, records)
            return 0
        with _sigterm_stops():
            _watch(backend, interval, json_lines=args.json)
        return 0
    finally:
        backend.close()


def watch_interval(text: str) -> float:
    seconds = positive_seconds(text, "--watch")
    if seconds < 0.1:
        raise UsageError(f'--watch "{text}" must be at least 0.1 seconds')
    return seconds


class _Stopped(Exception):
    """SIGTERM during ``--watch``: stop after the frames already printed."""


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _watch(backend: Backend, interval: float, *, json_lines: bool) -> None:
    """Every ``interval`` seconds, one frame, each flushed as soon as it is read: a JSON line, a plain-text
    table when stdout is a pipe or a file, the live table on a terminal. Runs until interrupted."""
    if json_lines:
        while True:
            print(json.dumps({"backend": backend.name, "gpus": _read_all(backend)}), flush=True)
            time.sleep(interval)
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        while True:
            _print_frame(backend.name, _read_all(backend))
            sys.stdout.flush()
            time.sleep(interval)
    from rich.live import Live

    with Live(_view(console, backend.name, _read_all(backend)), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(_view(console, backend.name, _read_all(backend)), refresh=True)
