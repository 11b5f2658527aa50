"""Engine readings across the agent's Watch stream: every field of ``ModelSignals`` crosses the wire with its
presence kept (absent stays absent, never 0), and an older agent's reading, without the newer fields, reads
them as absent."""

from __future__ import annotations

import dataclasses

import pytest

from gpuscale._proto import agent_pb2
from gpuscale.convert import _ENGINE_FIELDS, engine_reading_from_pb, engine_reading_to_pb
from gpuscale.model import BucketCounts, EngineSample, ModelSignals


def _roundtrip(sample: EngineSample) -> EngineSample:
    wire = engine_reading_to_pb(sample).SerializeToString()
    return engine_reading_from_pb(agent_pb2.EngineReading.FromString(wire))


def test_every_number_of_model_signals_is_on_the_wire() -> None:
    numbers = {f.name for f in dataclasses.fields(ModelSignals)} - {"model", "ttft", "itl"}
    assert set(_ENGINE_FIELDS) == numbers


@pytest.mark.parametrize("field", _ENGINE_FIELDS)
@pytest.mark.parametrize("value", [None, 0.0, 3.5])
def test_each_field_round_trips_with_its_presence(field: str, value: float | None) -> None:
    signals = ModelSignals("m", **{field: value})  # type: ignore[arg-type]
    sample = EngineSample(100.0, "vllm", (signals,))
    got = _roundtrip(sample)
    assert got.models[0] == signals


def test_histograms_round_trip_and_an_older_agent_sends_no_aborts() -> None:
    h = BucketCounts((0.1, float("inf")), (3.0, 5.0))
    full = ModelSignals("m", waiting=2.0, ttft=h, itl=h, requests_finished=9.0, requests_aborted=1.0)
    assert _roundtrip(EngineSample(1.0, "vllm", (full,))).models[0] == full
    # an agent from before requests_aborted (field 10) sends the finished counter only
    old = agent_pb2.EngineReading(timestamp=1.0, engine="vllm")
    old.models.add(model="m", requests_finished=9.0)
    (model,) = engine_reading_from_pb(old).models
    assert model.requests_finished == 9.0 and model.requests_aborted is None
