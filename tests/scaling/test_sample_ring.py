"""``SampleRing``, the scaler's columnar sample history: it reads back what was written, keeps the newest
``capacity`` samples, and its fast path smooths and evaluates exactly as the plain ``GpuSample`` path does."""

from __future__ import annotations

import math
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale._proto import agent_pb2
from gpuscale.convert import sample_row_from_pb, sample_to_pb
from gpuscale.model import SAMPLE_FIELDS, ContainerRef, GpuSample, ProcessSample
from gpuscale.scaling import GpuSeries, NoDataError, evaluate, extractor, parse_metadata, smooth
from gpuscale.scaling.keys import ENGINE_METRICS
from gpuscale.scaling.profiles import Metric
from gpuscale.scaling.ring import COLUMNS, SampleRing

NOW = 10_000.0
METRICS = [m for m in get_args(Metric) if m not in ENGINE_METRICS]  # every GPU metric a trigger can name

_real = st.one_of(
    st.none(),
    st.floats(0, 1000, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0]),
)
_bytes = st.one_of(st.none(), st.integers(0, 2**50))


@st.composite
def samples(draw: st.DrawFn, uuid: str = "GPU-0") -> GpuSample:
    """A sample of any shape: fields absent, zero, NaN or infinite; from 0 to 60 s ago, or a little ahead
    (clock skew); with or without processes."""
    procs = draw(
        st.lists(
            st.builds(ProcessSample, st.integers(1, 2**31), _bytes, st.one_of(st.none(), st.floats(0, 100))),
            max_size=2,
        )
    )
    return GpuSample(
        uuid=uuid,
        timestamp=NOW - draw(st.floats(-3, 60, allow_nan=False)),
        gpu_utilization=draw(_real),
        memory_utilization=draw(_real),
        memory_used_bytes=draw(_bytes),
        memory_total_bytes=draw(st.one_of(st.none(), st.just(0), st.integers(1, 2**50))),
        temperature_celsius=draw(_real),
        power_watts=draw(_real),
        power_limit_watts=draw(st.one_of(st.none(), st.just(0.0), st.floats(1, 1000))),
        sm_clock_mhz=draw(_real),
        gr_engine_active=draw(_real),
        sm_active=draw(_real),
        sm_occupancy=draw(_real),
        tensor_active=draw(_real),
        dram_active=draw(_real),
        processes=tuple(procs),
    )


def ring_of(history: list[GpuSample], capacity: int | None = None) -> SampleRing:
    ring = SampleRing("GPU-0", capacity or max(1, len(history)))
    for s in history:
        ring.append_sample(s)
    return ring


def same(a: GpuSample, b: GpuSample) -> bool:
    """Equal, where a NaN reading counts as absent (the ring keeps both as NaN; neither ever counts)."""

    def norm(s: GpuSample) -> tuple[object, ...]:
        values = [s.timestamp, *(getattr(s, f) for f in SAMPLE_FIELDS)]
        return (*(None if isinstance(v, float) and v != v else v for v in values), s.processes, s.uuid)

    return norm(a) == norm(b)


@given(st.lists(samples(), max_size=12), st.integers(1, 8))
def test_reads_back_the_newest_capacity_samples_oldest_first(history: list[GpuSample], capacity: int) -> None:
    ring = ring_of(history, capacity)
    kept = history[-capacity:] if history else []
    assert len(ring) == len(kept)
    assert all(same(got, want) for got, want in zip(ring, kept, strict=True))
    assert all(same(got, want) for got, want in zip(reversed(ring), reversed(kept), strict=True))
    for k in range(-len(kept), len(kept)):
        assert same(ring[k], kept[k])
    assert [s.timestamp for s in ring[1:3]] == [s.timestamp for s in kept[1:3]]


def test_fields_few_gpus_report_share_one_empty_column_until_written() -> None:
    """GPM activity (Hopper and newer) costs a column only on the GPUs that report it, and one GPU's values
    never show up in another's ring of the same size."""
    plain, hopper = SampleRing("GPU-A100", 4), SampleRing("GPU-H200", 4)
    for k in range(6):
        plain.append_sample(GpuSample("GPU-A100", NOW + k, gpu_utilization=10.0))
        sm = None if k == 4 else 50.0 + k  # a round without the counters in between
        hopper.append_sample(GpuSample("GPU-H200", NOW + k, gpu_utilization=10.0, sm_active=sm))
    assert [s.sm_active for s in plain] == [None] * 4
    assert [s.sm_active for s in hopper] == [52.0, 53.0, None, 55.0]
    assert plain._cols[COLUMNS["sm_active"]] is SampleRing("GPU-X", 4)._cols[COLUMNS["sm_active"]]
    assert hopper._cols[COLUMNS["sm_active"]] is not plain._cols[COLUMNS["sm_active"]]
    assert hopper._cols[COLUMNS["tensor_active"]] is plain._cols[COLUMNS["tensor_active"]]  # never reported


def test_rows_from_the_wire_without_gpm_clear_the_slot() -> None:
    """A sample with no GPM field arrives as a short row; where the GPU reported GPM before, the slot it
    overwrites must read as absent, not as the value of the sample a full circle ago."""
    ring = SampleRing("GPU-H200", 3)
    for k in range(3):
        values, procs, _ = sample_row_from_pb(
            sample_to_pb(GpuSample("GPU-H200", NOW + k, sm_active=10.0 * k))
        )
        assert len(values) == len(SAMPLE_FIELDS)
        ring.append(NOW + k, values, procs)
    short, _, _ = sample_row_from_pb(sample_to_pb(GpuSample("GPU-H200", NOW + 3, gpu_utilization=5.0)))
    assert len(short) < len(SAMPLE_FIELDS)
    ring.append(NOW + 3, short, ())
    assert [s.sm_active for s in ring] == [10.0, 20.0, None]
    assert ring[-1].gpu_utilization == 5.0


def test_index_out_of_range_and_bad_capacity() -> None:
    ring = ring_of([GpuSample("GPU-0", NOW, gpu_utilization=1.0)], 4)
    with pytest.raises(IndexError):
        ring[1]
    with pytest.raises(IndexError):
        ring[-2]
    with pytest.raises(ValueError, match="capacity must be at least 1, not 0"):
        SampleRing("GPU-0", 0)


def test_derived_fields_follow_the_sample_properties() -> None:
    ring = ring_of(
        [
            GpuSample(
                "GPU-0",
                NOW,
                memory_used_bytes=20,
                memory_total_bytes=80,
                power_watts=350.0,
                power_limit_watts=700.0,
            )
        ]
    )
    assert ring[0].memory_used_percent == 25.0 and ring[0].power_percent == 50.0
    s = smooth(ring, extractor("memory_used_percent"), now=NOW, window=10, stale_after=30)
    assert s is not None and s.value == 25.0
    s = smooth(ring, extractor("power_percent"), now=NOW, window=10, stale_after=30)
    assert s is not None and s.value == 50.0


@settings(max_examples=300)
@given(
    st.lists(samples(), max_size=15),
    st.sampled_from(METRICS),
    st.floats(0, 20),
    st.floats(0, 40),
    st.integers(1, 15),
)
def test_fast_path_smooths_exactly_like_samples(
    history: list[GpuSample], metric: str, window: float, stale_extra: float, capacity: int
) -> None:
    """Out-of-order and future timestamps included: the columns give the very same result, to the bit."""
    ring = ring_of(history, capacity)
    kept = history[-capacity:] if history else []
    extract = extractor(metric)  # type: ignore[arg-type]
    stale_after = window + stale_extra
    want = smooth(kept, extract, now=NOW, window=window, stale_after=stale_after)
    got = smooth(ring, extract, now=NOW, window=window, stale_after=stale_after)
    assert got == want


@settings(max_examples=200)
@given(
    st.lists(st.lists(samples(), max_size=6), min_size=1, max_size=4),
    st.sampled_from(METRICS),
    st.sampled_from(["avg", "max", "min", "p90"]),
)
def test_evaluate_over_rings_equals_evaluate_over_samples(
    per_gpu: list[list[GpuSample]], metric: str, how: str
) -> None:
    md = parse_metadata({"podSelector": "app=x", "metric": metric, "aggregation": how, "targetValue": "50"})
    plain = [GpuSeries(f"GPU-{k}", h, pod=f"ns/p{k // 2}") for k, h in enumerate(per_gpu)]
    rings = [GpuSeries(s.uuid, ring_of(list(s.samples)), pod=s.pod) for s in plain]

    def outcome(series: list[GpuSeries]) -> object:
        try:
            return evaluate(md, series, now=NOW)
        except NoDataError as e:
            return str(e)

    assert outcome(rings) == outcome(plain)


def test_container_share_reads_processes_from_the_ring() -> None:
    procs = (ProcessSample(7, 10 * 2**30, 30.0), ProcessSample(8, 2**30, 50.0))
    history = [
        GpuSample("GPU-0", NOW - 1, gpu_utilization=90.0, memory_total_bytes=80 * 2**30, processes=procs)
    ]
    md = parse_metadata({"podSelector": "app=x", "share": "container", "targetValue": "50"})
    series = [GpuSeries("GPU-0", ring_of(history), pod="ns/a", pids=frozenset({7}))]
    assert evaluate(md, series, now=NOW).aggregate == 30.0


@given(samples())
def test_a_sample_crosses_the_wire_into_the_ring_unchanged(sample: GpuSample) -> None:
    owners = {p.pid: ContainerRef("ns", f"pod-{p.pid % 3}", "main") for p in sample.processes if p.pid % 2}
    m = agent_pb2.Sample.FromString(sample_to_pb(sample, owners).SerializeToString())
    values, processes, row_owners = sample_row_from_pb(m)
    ring = SampleRing(sample.uuid, 1)
    ring.append(m.timestamp, values, processes)
    assert same(ring[0], sample)
    assert row_owners == owners
