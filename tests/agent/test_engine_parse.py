"""The engine exposition parser held to prometheus_client's own parsers (the reference): on expositions that
prometheus_client writes from generated families (escapes, odd label values, NaN and infinities, both
formats), on hand-written odd lines, and on what it must refuse."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from gpuscale.errors import ExpositionError
from gpuscale.exposition import Exposition, Selection, parse, reference_parse

READ = (
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens",
    "vllm:time_to_first_token_seconds",
    "tgi_queue_size",
)
SELECTION = Selection.of(READ)
OTHER = ("vllm:num_requests_waiting_x", "vllm:prompt", "process_cpu_seconds", "vllm:iteration_tokens_total")

label_values = st.text(
    alphabet=st.sampled_from(["a", "Z", "0", " ", '"', "\\", "\n", "=", ",", "}", "{", "é", "#", "\t"]),
    max_size=8,
)
labelsets = st.lists(
    st.dictionaries(st.sampled_from(["model_name", "engine", "le_x", "a"]), label_values, max_size=3),
    min_size=1,
    max_size=3,
    unique_by=lambda d: tuple(sorted(d.items())),
)
gauge_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-(10**12), 10**12).map(float)
)
counts = st.integers(0, 10**9).map(float)


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


@st.composite
def families(draw: st.DrawFn) -> list[Metric]:
    out: list[Metric] = []
    names = draw(st.lists(st.sampled_from(READ + OTHER), min_size=1, max_size=6, unique=True))
    for name in names:
        drawn = draw(labelsets)
        keys = sorted({k for s in drawn for k in s})
        # one series per label set as written (a missing label is written as "")
        sets = list({tuple(s.get(k, "") for k in keys): s for s in drawn}.values())
        kind = draw(st.sampled_from(["gauge", "counter", "histogram"]))
        if name.endswith("_seconds"):
            kind = "histogram"
        if kind == "gauge":
            family: Metric = GaugeMetricFamily(name, "help with \\ and \n", labels=keys)
            for s in sets:
                family.add_metric([s.get(k, "") for k in keys], draw(gauge_values))  # type: ignore[attr-defined]
        elif kind == "counter":
            family = CounterMetricFamily(name, "a counter", labels=keys)
            for s in sets:
                family.add_metric([s.get(k, "") for k in keys], draw(counts))
        else:
            family = HistogramMetricFamily(name, "a histogram", labels=keys)
            for s in sets:
                steps = draw(st.lists(counts, min_size=1, max_size=4))
                cumulative, buckets = 0.0, []
                for bound, step in zip((0.1, 1.0, 10.0), steps, strict=False):
                    cumulative += step
                    buckets.append((repr(bound), cumulative))
                buckets.append(("+Inf", cumulative + steps[-1]))
                family.add_metric([s.get(k, "") for k in keys], buckets, sum_value=cumulative)
        out.append(family)
    return out


def _same(a: Exposition, b: Exposition) -> bool:
    """Equal, NaN equal to NaN, and the order of series within a name ignored."""

    def norm(e: Exposition) -> dict[str, list[tuple[tuple[tuple[str, str], ...], object]]]:
        return {
            name: sorted(
                ((tuple(sorted(labels.items())), "NaN" if math.isnan(v) else v) for labels, v in samples),
                key=repr,
            )
            for name, samples in e.items()
        }

    return norm(a) == norm(b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families())
def test_text_format_matches_prometheus_client(fams: list[Metric]) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(fams))
    text = generate_latest(registry).decode()
    assert _same(parse(text, SELECTION), reference_parse(text, SELECTION))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families())
def test_openmetrics_matches_prometheus_client(fams: list[Metric]) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(fams))
    text = generate_openmetrics(registry, escaping="allow-utf-8").decode()  # type: ignore[no-untyped-call]
    try:
        expected = reference_parse(text, SELECTION, openmetrics=True)
    except ExpositionError:
        return  # prometheus_client refuses what it wrote (a NaN gauge named like a counter, …): not a case
    assert _same(parse(text, SELECTION, openmetrics=True), expected)


@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_requests_waiting{model_name="m"} 3',
        '  vllm:num_requests_waiting{model_name="m"} 3',  # leading blanks
        'vllm:num_requests_waiting{model_name="m"} 3   ',  # trailing blanks
        'vllm:num_requests_waiting{model_name="m"}\t3',  # a tab
        'vllm:num_requests_waiting{model_name="m"} 3 1700000000000',  # a timestamp
        'vllm:num_requests_waiting{model_name="m",} 3',  # a trailing comma
        'vllm:num_requests_waiting{model_name="a \\"b\\" \\\\ \\n"} 3',  # escapes
        'vllm:num_requests_waiting{model_name = "m"} 3',  # blanks around =
        "vllm:num_requests_waiting{} 3",
        "vllm:num_requests_waiting 1e3",
        "vllm:num_requests_waiting +Inf",
        "vllm:num_requests_waiting -Inf",
        "vllm:num_requests_waiting NaN",
        "vllm:num_requests_waiting nan",  # Python reads it; so does prometheus_client
        "vllm:num_requests_waiting .5",
        "vllm:num_requests_waiting 0x10",
    ],
)
def test_odd_lines_read_as_the_reference_reads_them(line: str) -> None:
    text = f"# TYPE vllm:num_requests_waiting gauge\n{line}\n"
    try:
        expected = reference_parse(text, SELECTION)
    except ExpositionError:
        with pytest.raises(ExpositionError):
            parse(text, SELECTION)
        return
    assert _same(parse(text, SELECTION), expected)


def test_openmetrics_exemplars_and_created() -> None:
    text = (
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        'vllm:time_to_first_token_seconds_bucket{le="0.1"} 2 # {trace_id="abc"} 0.05 1700000000.1\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3\n'
        "vllm:time_to_first_token_seconds_count 3\n"
        "vllm:time_to_first_token_seconds_sum 0.4\n"
        "vllm:time_to_first_token_seconds_created 1700000000.0\n"
        "# EOF\n"
    )
    got = parse(text, SELECTION, openmetrics=True)
    assert _same(got, reference_parse(text, SELECTION, openmetrics=True))
    assert got["vllm:time_to_first_token_seconds_bucket"] == [({"le": "0.1"}, 2.0), ({"le": "+Inf"}, 3.0)]
    assert "vllm:time_to_first_token_seconds_created" not in got


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'vllm:num_requests_waiting{model_name="m"} 3\nvllm:num_requests_waiting{model_name="m"} 4\n',
            'line 2: series vllm:num_requests_waiting{model_name="m"} is given twice',
        ),
        (
            'vllm:num_requests_waiting{model_name="m",model_name="n"} 3\n',
            'line 1: a label is given twice in \'vllm:num_requests_waiting{model_name="m",model_name="n"} 3\'',
        ),
        (
            "vllm:num_requests_waiting{model_name=m} 3\n",
            "line 1 does not parse (Invalid labels: model_name=m): 'vllm:num_requests_waiting{model_name=m} 3'",
        ),
        (
            "vllm:num_requests_waiting three\n",
            "line 1 does not parse (could not convert string to float: 'three'): "
            "'vllm:num_requests_waiting three'",
        ),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(ExpositionError) as info:
        parse(text, SELECTION)
    assert str(info.value) == message


def test_openmetrics_without_eof_is_truncated() -> None:
    with pytest.raises(ExpositionError, match=r'^an OpenMetrics body must end with "# EOF" \(truncated\?\)$'):
        parse("vllm:num_requests_waiting 3\n", SELECTION, openmetrics=True)


def test_garbage_outside_the_families_read_is_not_parsed() -> None:
    text = "<html><body>oops</body></html>\nprocess_cpu_seconds{ broken\nvllm:num_requests_waiting 7\n"
    assert parse(text, SELECTION) == {"vllm:num_requests_waiting": [({}, 7.0)]}
    with pytest.raises(ExpositionError):
        reference_parse(text, SELECTION)  # the reference gives up on the whole body
