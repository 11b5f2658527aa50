"""Engine readings across the agent's Watch stream: every field of ``ModelSignals`` crosses the wire with its
presence kept (absent stays absent, never 0), and an older agent's reading, without the newer fields, reads
them as absent."""

from __future__ import annotations

import pytest

from gpuscale._proto import agent_pb2
from gpuscale.convert import engine_reading_from_pb, engine_reading_to_pb
from gpuscale.model import (
    ENGINE_SIGNALS,
    BucketCounts,
    EngineSample,
    ModelSignals,
    SignalKind,
    engine_signals,
)

_NUMBERS = engine_signals(SignalKind.GAUGE, SignalKind.COUNTER)


def _roundtrip(sample: EngineSample) -> EngineSample:
    wire = engine_reading_to_pb(sample).SerializeToString()
    return engine_reading_from_pb(agent_pb2.EngineReading.FromString(wire))


def test_every_signal_is_a_field_of_the_wire_model_by_its_name() -> None:
    fields = agent_pb2.EngineModel.DESCRIPTOR.fields_by_name
    assert set(fields) == {"model", *ENGINE_SIGNALS}
    for name in _NUMBERS:  # optional: absent stays absent
        assert fields[name].has_presence and fields[name].message_type is None, name
    for name in engine_signals(SignalKind.HISTOGRAM):
        assert fields[name].message_type is agent_pb2.Histogram.DESCRIPTOR, name


@pytest.mark.parametrize("field", _NUMBERS)
@pytest.mark.parametrize("value", [None, 0.0, 3.5])
def test_each_field_round_trips_with_its_presence(field: str, value: float | None) -> None:
    signals = ModelSignals("m", **{field: value})  # type: ignore[arg-type]
    sample = EngineSample(100.0, "vllm", (signals,))
    got = _roundtrip(sample)
    assert got.models[0] == signals


@pytest.mark.parametrize("field", engine_signals(SignalKind.HISTOGRAM))
def test_each_histogram_round_trips_alone(field: str) -> None:
    h = BucketCounts((0.5, float("inf")), (1.0, 2.0))
    signals = ModelSignals("m", **{field: h})  # type: ignore[arg-type]
    assert _roundtrip(EngineSample(1.0, "sglang", (signals,))).models[0] == signals


def test_histograms_round_trip_and_an_older_agent_sends_no_aborts() -> None:
    h = BucketCounts((0.1, float("inf")), (3.0, 5.0))
    full = ModelSignals("m", waiting=2.0, ttft=h, itl=h, requests_finished=9.0, requests_aborted=1.0)
    assert _roundtrip(EngineSample(1.0, "vllm", (full,))).models[0] == full
    # an agent from before requests_aborted (field 10) sends the finished counter only
    old = agent_pb2.EngineReading(timestamp=1.0, engine="vllm")
    old.models.add(model="m", requests_finished=9.0)
    (model,) = engine_reading_from_pb(old).models
    assert model.requests_finished == 9.0 and model.requests_aborted is None
