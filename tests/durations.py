"""Every test's duration against its timeout: a pytest plugin (loaded by tests/conftest.py).

Why: a test near its timeout passes on one machine and fails on one a fifth slower. pytest-timeout's limit
covers a test's setup, call and teardown together, so that sum is what is measured here, per test id. Each
worker of pytest-xdist sends its reports to the controller, so the figures are whole under ``-n`` too.

At the end of a run the terminal summary lists the slowest tests with their timeouts and names every test
that took more than half of its timeout. ``--durations-report PATH`` also writes the whole list as a
Markdown table (committed as ``docs/test-durations.md`` from a full run).
"""

from __future__ import annotations

import os
import platform
import time
from collections import defaultdict
from pathlib import Path

import pytest

SHOWN = 15
_TIMEOUT_KEY = "timeout_s"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-report",
        metavar="PATH",
        default=None,
        help="write every test's duration (setup + call + teardown) and timeout to PATH as Markdown",
    )


def _timeout(item: pytest.Item) -> float | None:
    """The limit pytest-timeout applies to ``item``: its marker, else --timeout, else the ini value."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    else:
        value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    try:
        seconds = float(value) if value not in (None, "") else 0.0
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # user_properties travel with the reports, from an xdist worker to the controller
    item.user_properties.append((_TIMEOUT_KEY, _timeout(item)))


class _Durations:
    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.timeouts: dict[str, float | None] = {}
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        for key, value in report.user_properties:
            if key == _TIMEOUT_KEY:
                self.timeouts[report.nodeid] = value  # type: ignore[assignment]

    def ranked(self) -> list[tuple[str, float, float | None]]:
        out = [(n, s, self.timeouts.get(n)) for n, s in self.seconds.items()]
        return sorted(out, key=lambda r: r[1], reverse=True)

    def over_half(self) -> list[tuple[str, float, float | None]]:
        return [r for r in self.ranked() if r[2] is not None and r[1] > r[2] / 2]


def _share(seconds: float, timeout: float | None) -> str:
    return f"{100 * seconds / timeout:.0f} %" if timeout else "no timeout"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(_Durations(), "gpuscale-durations")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    d = config.pluginmanager.get_plugin("gpuscale-durations")
    if not isinstance(d, _Durations) or not d.seconds:
        return
    tr = terminalreporter
    ranked = d.ranked()
    tr.write_sep("=", f"slowest {min(SHOWN, len(ranked))} of {len(ranked)} tests (setup + call + teardown)")
    for nodeid, seconds, timeout in ranked[:SHOWN]:
        limit = f"{timeout:.0f} s" if timeout else "-"
        tr.write_line(f"{seconds:7.1f} s  of {limit:>5}  {_share(seconds, timeout):>10}  {nodeid}")
    over = d.over_half()
    if over:
        tr.write_sep("!", f"{len(over)} test(s) took more than half of their timeout")
        for nodeid, seconds, timeout in over:
            tr.write_line(f"{seconds:7.1f} s of {timeout:.0f} s  {nodeid}")
    path = config.getoption("durations_report")
    if path:
        _write_report(Path(path), d, config)
        tr.write_line(f"wrote {path}")


def _write_report(path: Path, d: _Durations, config: pytest.Config) -> None:
    ranked = d.ranked()
    workers = getattr(config.option, "numprocesses", None)
    lines = [
        "# Test durations",
        "",
        "Every test's setup + call + teardown against the timeout pytest-timeout gives it, slowest first.",
        "Written by `scripts/test --durations-report=docs/test-durations.md` (the plugin in",
        "`tests/durations.py`); the terminal summary of every run shows the slowest and names any test over",
        "half of its timeout.",
        "",
        f"- Machine: {platform.machine()}, {_cpus()} CPUs, Python {platform.python_version()}; "
        f"pytest-xdist workers: {workers if workers else 'none'}",
        f"- Tests: {len(ranked)}; wall time of the run: {time.monotonic() - d.started:.0f} s; "
        f"sum of the tests' durations: {sum(s for _, s, _ in ranked):.0f} s",
        f"- Over half of their timeout: {len(d.over_half())}",
        "",
        "| seconds | timeout s | share | test |",
        "|---:|---:|---:|---|",
    ]
    for nodeid, seconds, timeout in ranked:
        if seconds < 1.0:
            break
        limit = f"{timeout:.0f}" if timeout else "-"
        lines.append(f"| {seconds:.1f} | {limit} | {_share(seconds, timeout)} | `{nodeid}` |")
    fast = sum(1 for _, s, _ in ranked if s < 1.0)
    lines += ["", f"{fast} more tests took under 1 s each.", ""]
    if os.environ.get("GPUSCALE_PHASE") == "engine" and path.is_file():
        # scripts/test's second run: the engine tier's table after the rest's
        lines[0:6] = ["## The engine tier (run after the rest, alone)", ""]
        path.write_text(path.read_text(encoding="utf-8") + "\n" + "\n".join(lines), encoding="utf-8")
        return
    path.write_text("\n".join(lines), encoding="utf-8")


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
