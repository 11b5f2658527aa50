"""PromQL over the agent's series (dcgm-exporter's names for NVIDIA, AMD's exporter's for AMD).

``workload_query`` returns ONE series: the aggregate over the GPUs of a workload's pods, each GPU first
averaged over ``window`` seconds. ``per_pod_query`` is the same with ``by (<pod label>)``: one series per pod,
what Prometheus Adapter needs. Both take the label matchers as text, so the adapter rules can pass its
template placeholders (``<<.LabelMatchers>>``) instead of concrete matchers.

Labels: the agent puts the GPU's workload in ``namespace``/``pod``/``container``. A Prometheus that scrapes it
with ``honor_labels: false`` and target labels of the same names (a ServiceMonitor does that) renames them
``exported_namespace``/``exported_pod``; ``LabelNames(exported=True)`` selects those.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..scaling.profiles import Aggregation, Metric, exact

__all__ = [
    "DEFAULT_SCRAPE_INTERVAL",
    "VENDORS",
    "LabelNames",
    "Series",
    "aggregate",
    "engine_per_pod_query",
    "engine_query",
    "engine_series",
    "exact",
    "job_matcher",
    "per_gpu",
    "range_seconds",
    "series_for",
    "vllm_name_regex",
    "vllm_selector",
    "workload_matchers",
]

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LabelNames:
    exported: bool = False

    @property
    def namespace(self) -> str:
        return "exported_namespace" if self.exported else "namespace"

    @property
    def pod(self) -> str:
        return "exported_pod" if self.exported else "pod"


@dataclass(frozen=True, slots=True)
class Series:
    """How one metric reads from the exporter's series.

    ``name``: the series; ``scale``: its unit to the metric's (MiB → bytes); ``ratio_of``: a percentage
    ``100 * name / (sum of ratio_of)``."""

    name: str
    scale: float = 1.0
    ratio_of: tuple[str, ...] = ()


VENDORS: dict[str, dict[Metric, Series]] = {
    "nvidia": {
        "gpu_utilization": Series("DCGM_FI_DEV_GPU_UTIL"),
        "memory_utilization": Series("DCGM_FI_DEV_MEM_COPY_UTIL"),
        "memory_used": Series("DCGM_FI_DEV_FB_USED", scale=MIB),
        "memory_used_percent": Series(
            "DCGM_FI_DEV_FB_USED", ratio_of=("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
        ),
        "temperature": Series("DCGM_FI_DEV_GPU_TEMP"),
        "power": Series("DCGM_FI_DEV_POWER_USAGE"),
        # DCGM's profiling fields are ratios; the metrics are percentages
        "gr_engine_active": Series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", scale=100.0),
        "sm_active": Series("DCGM_FI_PROF_SM_ACTIVE", scale=100.0),
        "sm_occupancy": Series("DCGM_FI_PROF_SM_OCCUPANCY", scale=100.0),
        "tensor_active": Series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", scale=100.0),
        "dram_active": Series("DCGM_FI_PROF_DRAM_ACTIVE", scale=100.0),
    },
    "amd": {
        "gpu_utilization": Series("gpu_gfx_activity"),
        "memory_utilization": Series("gpu_umc_activity"),
        "memory_used": Series("gpu_used_vram", scale=MIB),
        "memory_used_percent": Series("gpu_used_vram", ratio_of=("gpu_total_vram",)),
        "temperature": Series("gpu_junction_temperature"),
        "power": Series("gpu_power_usage"),
    },
}


def series_for(vendor: str, metric: Metric) -> Series:
    table = VENDORS[vendor]
    if metric not in table:
        why = "the exporters publish no power limit" if metric == "power_percent" else "not in its exporter"
        raise UsageError(
            f'metric "{metric}" has no Prometheus series for {vendor} GPUs ({why}); '
            f"use --mode external, or one of [{', '.join(sorted(table))}]"
        )
    return table[metric]


def job_matcher(job: str | None) -> str:
    """``job="gpuscale-agent",`` (or nothing): the agents' series, not dcgm-exporter's of the same names."""
    return f'job="{job}",' if job else ""


def workload_matchers(namespace: str, pod_regex: str, labels: LabelNames, job: str | None = None) -> str:
    return f'{job_matcher(job)}{labels.namespace}="{namespace}",{labels.pod}=~"{pod_regex}"'


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


DEFAULT_SCRAPE_INTERVAL = 15.0  # the chart's serviceMonitor.interval


def range_seconds(window: float, scrape_interval: float = DEFAULT_SCRAPE_INTERVAL) -> float:
    """The range a ``window``-second average is taken over in PromQL: at least two scrape intervals, or a
    range can hold no sample at all (a 10 s range at a 15 s scrape is empty a third of the time, and an
    empty result is an error KEDA acts on, or a pod the adapter calls missing)."""
    return max(window, 2.0 * scrape_interval)


def per_gpu(
    series: Series,
    matchers: str,
    window: float,
    *,
    name: str | None = None,
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL,
) -> str:
    """One value per GPU series: averages over ``range_seconds(window, scrape_interval)`` (none for window 0:
    the newest sample).

    ``name`` replaces the main series' name (the adapter's ``<<.Series>>``)."""
    span = range_seconds(window, scrape_interval)

    def term(metric: str) -> str:
        selector = f"{metric}{{{matchers}}}"
        return f"avg_over_time({selector}[{_fmt(span)}s])" if window > 0 else selector

    main = term(name or series.name)
    if series.ratio_of:
        total = " + ".join(term(name if (name and s == series.name) else s) for s in series.ratio_of)
        return f"100 * {main} / ({total})"
    if series.scale != 1:
        return f"{main} * {_fmt(series.scale)}"
    return main


def aggregate(aggregation: Aggregation, expr: str, by: str | None = None) -> str:
    """``avg(expr)``, ``quantile(0.9, expr)``…; with ``by``: ``avg by (pod) (expr)``."""
    group = f" by ({by})" if by else ""
    if aggregation.startswith("p"):
        q = int(aggregation[1:]) / 100
        return f"quantile{group} ({q:g}, {expr})" if by else f"quantile({q:g}, {expr})"
    return f"{aggregation}{group} ({expr})" if by else f"{aggregation}({expr})"


# ----- the inference engine's own series, as Prometheus scrapes them from the engine pods (vLLM's names:
# vllm/v1/metrics/loggers.py; see docs/engines.md). The pods are the scrape targets, so namespace and pod are
# the target's own labels. Each name is matched as vllm:… or vllm_…: prometheus_client 0.22+ (what vLLM
# serves with) writes the samples of a name with a colon with an underscore when the scraper asks for
# OpenMetrics without UTF-8 escaping, as Prometheus 2.x does (prometheus/client_python#1177), so such a
# Prometheus stores vllm_num_requests_waiting and a query of vllm:num_requests_waiting finds nothing.
_VLLM_GAUGES = {
    "queue_length": ("vllm:num_requests_waiting",),
    "requests_in_flight": ("vllm:num_requests_waiting", "vllm:num_requests_running"),
}
_VLLM_HISTOGRAMS = {
    "ttft_p50": ("vllm:time_to_first_token_seconds_bucket", 0.5),
    "ttft_p95": ("vllm:time_to_first_token_seconds_bucket", 0.95),
    "itl_p95": ("vllm:inter_token_latency_seconds_bucket", 0.95),
}


def vllm_name_regex(name: str) -> str:
    """``vllm:num_requests_waiting`` → ``vllm[:_]num_requests_waiting``: either spelling (see above)."""
    return name.replace("vllm:", "vllm[:_]", 1)


def vllm_selector(name: str, matchers: str) -> str:
    """A selector of vLLM's series ``name`` under either spelling, with ``matchers``."""
    return f'{{__name__=~"{vllm_name_regex(name)}",{matchers}}}'


def engine_per_pod_query(
    metric: str, matchers: str, window: float, *, name: str, scrape_interval: float
) -> str:
    """An engine metric per pod (``by (<<.GroupBy>>)``) over vLLM's series, for Prometheus Adapter: the
    pod's models added up (waiting, running, tokens/s), its fullest model's KV cache, its latency quantile
    from the pod's bucket rates. ``name`` replaces the main series' name (the adapter's ``<<.Series>>``)."""
    rng = f"{_fmt(range_seconds(window, scrape_interval))}s"
    by = "<<.GroupBy>>"
    if metric in _VLLM_GAUGES:
        others = _VLLM_GAUGES[metric][1:]
        terms = [f"{name}{{{matchers}}}", *(vllm_selector(n, matchers) for n in others)]
        return " + ".join(f"sum by ({by}) ({t})" for t in terms)
    if metric == "generation_tokens_per_second":
        return f"sum by ({by}) (rate({name}{{{matchers}}}[{rng}]))"
    if metric == "request_rate":
        terms = [f"rate({name}{{{matchers}}}[{rng}])"]
        terms += [f"deriv({vllm_selector(n, matchers)}[{rng}])" for n in _VLLM_GAUGES["requests_in_flight"]]
        return " + ".join(f"sum by ({by}) ({t})" for t in terms)
    if metric == "kv_cache_usage":
        return f"100 * max by ({by}) ({name}{{{matchers}}})"
    if metric in _VLLM_HISTOGRAMS:
        q = _VLLM_HISTOGRAMS[metric][1]
        return f"histogram_quantile({q}, sum by ({by}, le) (rate({name}{{{matchers}}}[{rng}])))"
    raise UsageError(f'metric "{metric}" has no vLLM series')


def engine_series(metric: str) -> str:
    """The vLLM series an engine metric's adapter rule is named after (its ``seriesQuery``)."""
    if metric in _VLLM_GAUGES:
        return _VLLM_GAUGES[metric][0]
    if metric in _VLLM_HISTOGRAMS:
        return _VLLM_HISTOGRAMS[metric][0]
    series = {
        "generation_tokens_per_second": "vllm:generation_tokens_total",
        "request_rate": "vllm:request_success_total",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
    }
    if metric not in series:
        raise UsageError(f'metric "{metric}" has no vLLM series')
    return series[metric]


def engine_query(
    metric: str, matchers: str, window: float, *, aggregation: str = "avg", scrape_interval: float = 15.0
) -> tuple[str, bool]:
    """The PromQL a KEDA ``prometheus`` trigger runs for an engine metric over vLLM's series, and whether it
    is additive (a total over the pods: ``metricType: AverageValue``) or a per-replica figure (``Value``)."""
    rng = f"{_fmt(range_seconds(window, scrape_interval))}s"
    if metric in _VLLM_GAUGES:
        return " + ".join(f"sum({vllm_selector(n, matchers)})" for n in _VLLM_GAUGES[metric]), True
    if metric == "generation_tokens_per_second":
        return f"sum(rate({vllm_selector('vllm:generation_tokens_total', matchers)}[{rng}]))", True
    if metric == "request_rate":  # arrivals: finished per second + the growth of those waiting and running
        parts = [f"sum(rate({vllm_selector('vllm:request_success_total', matchers)}[{rng}]))"]
        parts += [
            f"sum(deriv({vllm_selector(n, matchers)}[{rng}]))" for n in _VLLM_GAUGES["requests_in_flight"]
        ]
        return " + ".join(parts), True
    if metric == "kv_cache_usage":
        how = "max" if aggregation == "max" else "avg"
        return f"100 * {how}({vllm_selector('vllm:kv_cache_usage_perc', matchers)})", False
    if metric in _VLLM_HISTOGRAMS:
        name, q = _VLLM_HISTOGRAMS[metric]
        return f"histogram_quantile({q}, sum by (le) (rate({vllm_selector(name, matchers)}[{rng}])))", False
    raise UsageError(f'metric "{metric}" has no vLLM series')
