"""The engine signals are declared once, as the fields of ``ModelSignals`` with their kind
(``model.ENGINE_SIGNALS``); the agent's mapping, the wire and the scaling core's field types are held to that
list here, so a signal added to it and missed by one of them fails."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from gpuscale._proto import agent_pb2
from gpuscale.agent.engines.mapping import ENGINES, Counter, EngineSpec, Gauge, Hist, Ratio
from gpuscale.convert import engine_reading_from_pb, engine_reading_to_pb
from gpuscale.model import (
    ENGINE_SIGNALS,
    BucketCounts,
    EngineSample,
    ModelSignals,
    SignalKind,
    engine_signals,
)
from gpuscale.scaling.engine import CounterField, GaugeField, HistogramField

_SOURCES: dict[SignalKind, tuple[type, ...]] = {
    SignalKind.GAUGE: (Gauge, Ratio),
    SignalKind.COUNTER: (Counter,),
    SignalKind.HISTOGRAM: (Hist,),
}


def test_every_field_of_model_signals_but_the_model_is_a_signal_of_its_type() -> None:
    hints = typing.get_type_hints(ModelSignals)
    assert [f.name for f in dataclasses.fields(ModelSignals)] == ["model", *ENGINE_SIGNALS]
    for name, kind in ENGINE_SIGNALS.items():
        want = BucketCounts | None if kind is SignalKind.HISTOGRAM else float | None
        assert hints[name] == want, name


def test_engine_signals_picks_by_kind_in_order() -> None:
    assert engine_signals() == tuple(ENGINE_SIGNALS)
    assert engine_signals(SignalKind.HISTOGRAM) == ("ttft", "itl")
    assert set(engine_signals(SignalKind.GAUGE, SignalKind.COUNTER)) == set(ENGINE_SIGNALS) - {"ttft", "itl"}


def test_the_mapping_declares_every_signal_and_only_those() -> None:
    config = {"name", "markers", "model_label", "shard_labels", "optional"}
    declared = {f.name for f in dataclasses.fields(EngineSpec)} - config
    assert declared == set(ENGINE_SIGNALS)


@pytest.mark.parametrize("spec", ENGINES, ids=lambda s: s.name)
def test_each_engine_reads_each_signal_from_a_source_of_its_kind(spec: EngineSpec) -> None:
    for name, kind in ENGINE_SIGNALS.items():
        for source in getattr(spec, name):
            assert isinstance(source, _SOURCES[kind]), (spec.name, name, source)
    assert set(spec.optional) <= set(ENGINE_SIGNALS)


def test_some_engine_exposes_every_signal() -> None:
    unread = [name for name in ENGINE_SIGNALS if not any(getattr(spec, name) for spec in ENGINES)]
    assert unread == []


def test_every_signal_crosses_the_wire_both_ways() -> None:
    h = BucketCounts((0.25, 1.0, math.inf), (1.0, 4.0, 6.0))
    values: dict[str, object] = {
        name: h if kind is SignalKind.HISTOGRAM else float(i)
        for i, (name, kind) in enumerate(ENGINE_SIGNALS.items())
    }
    signals = ModelSignals("m", **values)  # type: ignore[arg-type]
    wire = engine_reading_to_pb(EngineSample(7.0, "vllm", (signals,)))
    (model,) = wire.models
    assert {f.name for f, _ in model.ListFields()} == {"model", *ENGINE_SIGNALS}
    for name, kind in ENGINE_SIGNALS.items():
        if kind is SignalKind.HISTOGRAM:
            assert list(getattr(model, name).bounds) == list(h.bounds), name
        else:
            assert getattr(model, name) == values[name], name
    back = engine_reading_from_pb(agent_pb2.EngineReading.FromString(wire.SerializeToString()))
    assert back.models == (signals,)


@pytest.mark.parametrize(
    ("literal", "kind"),
    [
        (GaugeField, SignalKind.GAUGE),
        (CounterField, SignalKind.COUNTER),
        (HistogramField, SignalKind.HISTOGRAM),
    ],
    ids=["gauge", "counter", "histogram"],
)
def test_the_scaling_field_types_are_the_signals_of_their_kind(literal: object, kind: SignalKind) -> None:
    assert typing.get_args(literal) == engine_signals(kind)
