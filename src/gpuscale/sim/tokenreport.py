"""What the token model adds to a run's outputs: its columns in ``timeline.csv``, its figures in
``summary.json``, and the latency table ``simulate`` prints. Only for a run of the token model, so every
other scenario's outputs stay as they were. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .policy import Timeline
from .summary import weighted_percentile

__all__ = ["TOKEN_COLUMNS", "token_cells", "token_summary", "token_table"]

TOKEN_COLUMNS = ("running", "finished", "itl_seconds", "output_tokens_per_second")


def _fmt(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6g}"


def token_cells(tl: Timeline, t: int) -> tuple[str, ...]:
    """Second ``t``'s token columns (``TOKEN_COLUMNS``)."""
    tk = tl.tokens
    if tk is None:
        return ()
    return (str(tk.running[t]), str(tk.finished[t]), _fmt(tk.itl[t]), _fmt(tk.output_tokens[t]))


def token_summary(tl: Timeline) -> dict[str, object]:
    """The token model's figures over the run: TTFT (p50, p95, nearest rank over requests, whole ms),
    inter-token latency (p50, p95 over tokens), requests finished, mean output tokens/s."""
    tk = tl.tokens
    if tk is None:
        return {}
    n = len(tk.output_tokens)
    return {
        "p50_ttft_seconds": weighted_percentile(tk.ttft_ms, 0.5) / 1000,
        "p95_ttft_seconds": weighted_percentile(tk.ttft_ms, 0.95) / 1000,
        "p50_itl_seconds": weighted_percentile(tk.itl_ms, 0.5) / 1000,
        "p95_itl_seconds": weighted_percentile(tk.itl_ms, 0.95) / 1000,
        "requests_finished": sum(tk.finished),
        "mean_output_tokens_per_second": round(math.fsum(tk.output_tokens) / n, 6) if n else 0.0,
    }


def token_table(timelines: Sequence[Timeline]) -> str:
    """Per policy of the token model: p95 TTFT, p95 inter-token latency, requests finished, output
    tokens/s; empty when no timeline has the token model."""
    lines = [("policy", "p95 TTFT s", "p95 ITL ms", "finished", "output tokens/s")]
    for tl in timelines:
        s = token_summary(tl)
        if not s:
            continue
        lines.append(
            (
                tl.policy,
                f"{s['p95_ttft_seconds']:.2f}",
                f"{1000 * float(str(s['p95_itl_seconds'])):.0f}",
                str(s["requests_finished"]),
                f"{float(str(s['mean_output_tokens_per_second'])):.0f}",
            )
        )
    if len(lines) == 1:
        return ""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in lines
    )
