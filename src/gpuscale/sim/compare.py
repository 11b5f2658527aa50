"""The comparison table: policy x unserved share, seconds over capacity, p95 queueing delay, GPU-hours,
direction changes, for one scenario or for the standard set of traces (docs/decisions.md).

Pure: rows from results, text from rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report import Result

__all__ = [
    "STANDARD_POLICIES",
    "STANDARD_SET",
    "Row",
    "rows",
    "table_markdown",
    "table_text",
]

# The standard set of traces, each a file ``scenarios/<name>.yaml`` (docs/decisions.md).
STANDARD_SET = (
    "llm-step-burst",
    "flash-crowd",
    "steep-ramp",
    "burst-train",
    "diurnal-day",
    "spike-after-idle",
    "bursts-after-idle",
    "azure-conv",
    "azure-conv-tokens",
    "llm-step-slow-replica",
)
# The policies every trace of the set compares.
STANDARD_POLICIES = (
    "prometheus-dcgm",
    "prometheus-vllm-queue",
    "gpuscale-gpu",
    "gpuscale-engine",
    "gpuscale-engine-ahead",
    "oracle",
)

HEADERS = (
    "trace",
    "policy",
    "unserved %",
    "s over capacity",
    "p95 queueing delay s",
    "GPU-hours",
    "direction changes",
)


@dataclass(frozen=True)
class Row:
    trace: str
    policy: str
    unserved_percent: float
    seconds_over_capacity: int
    p95_queueing_delay: float
    gpu_hours: float
    direction_changes: int

    def cells(self) -> tuple[str, ...]:
        return (
            self.trace,
            self.policy,
            f"{self.unserved_percent:.2f}",
            str(self.seconds_over_capacity),
            f"{self.p95_queueing_delay:.0f}",
            f"{self.gpu_hours:.2f}",
            str(self.direction_changes),
        )


def rows(results: Sequence[Result]) -> list[Row]:
    """One row per policy of each result, in file order."""
    out: list[Row] = []
    for result in results:
        for s in result.summaries:
            out.append(
                Row(
                    result.scenario.name,
                    s.policy,
                    100 * s.share_of_demand_unserved,
                    s.seconds_over_capacity,
                    s.p95_queueing_delay,
                    s.gpu_hours,
                    s.direction_changes,
                )
            )
    return out


def table_text(table: Sequence[Row], *, with_trace: bool = True) -> str:
    """The table aligned for a terminal (numbers right-aligned)."""
    first = 0 if with_trace else 1
    cells = [HEADERS[first:], *(r.cells()[first:] for r in table)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    text_cols = 2 - first  # trace and policy are text, the rest numbers

    def line(row: Sequence[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        return "  ".join(c.ljust(w) if i < text_cols else c.rjust(w) for i, (c, w) in pairs).rstrip()

    return "\n".join(line(row) for row in cells)


def table_markdown(table: Sequence[Row]) -> str:
    """The table as Markdown; a trace's name is written on its first row only."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * 2 + "---:|" * (len(HEADERS) - 2)]
    last = ""
    for r in table:
        cells = list(r.cells())
        cells[0] = f"`{r.trace}`" if r.trace != last else ""
        last = r.trace
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
