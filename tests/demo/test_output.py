"""The demo's plot: what its panels show (the replicas readable beside a large queue, how the scaler decided),
and that matplotlib's first-use notice stays out of the demo's output."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from gpuscale.demo.output import Row, plot_timeline, timeline_figure, write_timeline

pytest.importorskip("matplotlib")

LABELS = ("node-a/0", "node-a/1")


def burst_rows() -> list[Row]:
    """An llm-serving run as the demo records it: the KV-cache guard while low, a queue of 375 (75 times the
    target of 5) with scaleAhead in the burst, 1 → 6 replicas."""
    rows = []
    for t in range(40):
        burst = 12 <= t < 30
        value = 375.0 if burst else 5.0
        decided = "ahead 4 s" if 15 <= t < 25 else ("KV-cache guard" if 2 <= t < 12 else "")
        decision = decided.removesuffix(" 4 s")
        desired = 1 if t < 16 else 6
        ready = 1 if t < 20 else 6
        rows.append(
            Row(
                t=float(t),
                phase="burst" if burst else "low",
                demand=42.0 if burst else 8.0,
                capacity=10.0 * ready,
                desired=desired,
                pods=desired,
                ready=ready,
                value=value,
                target=5.0,
                active=burst,
                stream_active=burst,
                gpu_util=(80.0, 0.0),
                queue=value - 5.0,
                decided=decided,
                decision=decision,
            )
        )
    return rows


def test_the_replicas_have_their_own_axis_beside_a_queue_75_times_the_target() -> None:
    rows = burst_rows()
    fig = timeline_figure(rows, LABELS, "demo")
    (replicas,) = [ax for ax in fig.axes if ax.get_title(loc="left").startswith("replicas")]
    low, high = replicas.get_ylim()
    assert low == 0 and 6 < high <= 8  # 1 → 6 replicas fill the panel, not its bottom 10 %
    lines = {line.get_label(): list(line.get_ydata()) for line in replicas.get_lines()}
    assert max(lines["desired"]) == 6 and max(lines["Ready"]) == 6
    assert all(max(line.get_ydata(), default=0) <= 6 for line in replicas.get_lines())  # nothing else on it


def test_the_plot_marks_each_answer_ahead_and_each_held_by_the_kv_cache_guard() -> None:
    rows = burst_rows()
    fig = timeline_figure(rows, LABELS, "demo")
    marks: dict[str, list[float]] = {}
    for ax in fig.axes:
        for collection in ax.collections:
            label = str(collection.get_label())
            if label.startswith(("ahead", "KV-cache guard")):
                marks[label.split(":")[0]] = sorted(float(x) for x, _ in collection.get_offsets())
    assert marks == {
        "ahead": [float(t) for t in range(15, 25)],
        "KV-cache guard": [float(t) for t in range(2, 12)],
    }
    legends = [text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
    assert any(text.startswith("ahead") for text in legends), legends
    assert any(text.startswith("KV-cache guard") for text in legends), legends


def test_the_font_cache_notice_is_held_back_and_other_warnings_are_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plot_timeline(burst_rows(), LABELS, "demo", tmp_path / "demo.png")
    assert (tmp_path / "demo.png").read_bytes().startswith(b"\x89PNG")
    font_manager = logging.getLogger("matplotlib.font_manager")
    with caplog.at_level(logging.WARNING):
        # what matplotlib logs 5 s into building its font cache, on a first run
        font_manager.warning("Matplotlib is building the font cache; this may take a moment.")
        font_manager.warning("findfont: Font family 'Nope' not found.")
    assert [r.getMessage() for r in caplog.records] == ["findfont: Font family 'Nope' not found."]


def wake_rows() -> list[Row]:
    """A wake behind the gateway: idle at zero, then requests held while the first pods load, the HPA's
    scale-up decided by the request path, then the engines' queue."""
    rows = []
    for t in range(20):
        burst = t >= 4
        held = 42.0 * (t - 4) if 4 <= t < 9 else 0.0
        desired = 0 if t < 5 else (1 if t < 7 else 5)
        ready = 0 if t < 9 else 5
        rows.append(
            Row(
                t=float(t),
                phase="burst" if burst else "idle",
                demand=42.0 if burst else 0.0,
                capacity=10.0 * ready,
                desired=desired,
                pods=desired,
                ready=ready,
                value=25.0 if 5 <= t < 9 else 0.0,
                target=5.0,
                active=burst,
                stream_active=burst,
                gpu_util=(0.0, 0.0),
                queue=150.0 if t == 9 else 0.0,
                decided="request path 42.8 req/s" if 5 <= t < 9 else "",
                decision="request path" if 5 <= t < 9 else "",
                held=held,
                path_demand=42.8 if burst else 0.0,
            )
        )
    return rows


def test_the_timeline_says_what_the_gateway_held_and_the_request_paths_demand(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    write_timeline(wake_rows(), LABELS, path)
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["gateway_held"], r["path_demand_rps"], r["scaler_decided"]) for r in rows[4:7]] == [
        ("0.000", "42.800", ""),
        ("42.000", "42.800", "request path 42.8 req/s"),
        ("84.000", "42.800", "request path 42.8 req/s"),
    ]
    no_gateway = tmp_path / "plain.csv"
    write_timeline(burst_rows(), LABELS, no_gateway)
    with no_gateway.open() as f:
        assert {r["gateway_held"] for r in csv.DictReader(f)} == {""}  # GPU profiles: no gateway


def test_the_plot_shows_the_held_requests_and_marks_the_answers_the_request_path_decided() -> None:
    fig = timeline_figure(wake_rows(), LABELS, "demo")
    lines = {str(line.get_label()): list(line.get_ydata()) for ax in fig.axes for line in ax.get_lines()}
    (held,) = [values for label, values in lines.items() if label.startswith("held at the gateway")]
    assert max(held) == 168.0
    marks = {
        str(c.get_label()).split(":")[0]: sorted(float(x) for x, _ in c.get_offsets())
        for ax in fig.axes
        for c in ax.collections
        if str(c.get_label()).startswith("request path")
    }
    assert marks == {"request path": [5.0, 6.0, 7.0, 8.0]}
