"""The plots a person reads: each policy its own colour, the same in every plot of the set, and no legend over
the data (the step and the scale-ups of llm-step-burst are in its first minutes, where a legend used to be)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex

from gpuscale.sim import run_scenario
from gpuscale.sim.compare import STANDARD_SET, rows
from gpuscale.sim.plot import result_figure, set_figure, styles
from tests.sim.shipped import parse_shipped

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(name: str) -> Any:
    return parse_shipped((SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8"), source=name)


def _set_policies() -> list[str]:
    """Every policy of the standard set, in the order the set's table lists them."""
    return list(dict.fromkeys(p.name for name in STANDARD_SET for p in _scenario(name).policies))


def _legends_off_the_data(fig: Any) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            data = ax.get_window_extent(renderer)
            assert not box.overlaps(data), f"the legend {box} covers the data of {ax.get_title(loc='left')!r}"


def test_the_set_has_more_policies_than_ten_and_each_its_own_colour() -> None:
    policies = _set_policies()
    assert len(policies) > 10  # more than matplotlib's default cycle has colours
    colours = [styles(policies)[p].color for p in policies]
    assert len(set(colours)) == len(policies)


@pytest.fixture(scope="module")
def step_burst() -> Any:
    short = dataclasses.replace(_scenario("llm-step-burst"), duration_seconds=900)  # the step, the scale-ups
    return run_scenario(short)


def test_a_trace_plot_gives_each_policy_the_sets_colour_and_keeps_its_legend_off_the_data(
    step_burst: Any,
) -> None:
    import matplotlib.pyplot as plt

    style = styles(_set_policies())
    fig = result_figure(step_burst, style)
    try:
        top = fig.axes[0]
        capacity = {
            str(line.get_label()).split(":")[0]: to_hex(line.get_color())
            for line in top.get_lines()
            if ":" in str(line.get_label())
        }
        policies = [tl.policy for tl in step_burst.timelines]
        assert sorted(capacity) == sorted(policies)
        assert len(set(capacity.values())) == len(policies), capacity
        assert capacity == {p: style[p].color for p in policies}
        for ax in fig.axes[1:]:  # requests waiting, replicas: the same colour per policy
            for line in ax.get_lines():
                policy = str(line.get_label()).split(":")[0]
                assert to_hex(line.get_color()) == style[policy].color, (ax.get_title(), policy)
        _legends_off_the_data(fig)
    finally:
        plt.close(fig)


def test_the_set_plot_gives_each_policy_its_colour_and_keeps_its_legend_off_the_data(step_burst: Any) -> None:
    import matplotlib.pyplot as plt

    policies = _set_policies()
    style = styles(policies)
    table = rows([step_burst])
    extra = [p for p in policies if p not in {r.policy for r in table}]
    table += [dataclasses.replace(table[0], trace="other", policy=p) for p in extra]  # all the set's policies
    fig = set_figure(table, style)
    try:
        for ax in fig.axes:
            bars = {str(c.get_label()): to_hex(c[0].get_facecolor()) for c in ax.containers}
            assert sorted(bars) == sorted(policies)
            assert len(set(bars.values())) == len(policies), bars
            assert bars == {p: style[p].color for p in policies}
        _legends_off_the_data(fig)
    finally:
        plt.close(fig)
