"""``--backend auto`` (the chart's default): NVML if it loads, else AMD SMI. A DaemonSet pod often starts
before the GPU operator has loaded the driver; the agent must then wait for it (serving, not ready), not exit
and crash-loop. So ``auto`` decides at each ``open``, until one backend opens."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from gpuscale.agent.service import Agent
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends import AutoBackend, BackendUnavailable, create_backend
from gpuscale.cli._options import backend_from_args
from tests.fakes.pynvml_fake import NVML_ERROR_DRIVER_NOT_LOADED, FakeGpu, make_module
from tests.poll import until


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setitem(sys.modules, "pynvml", make_module([], init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # not installed: its import fails
    return monkeypatch


def test_auto_decides_when_a_driver_loads(no_driver: pytest.MonkeyPatch) -> None:
    backend = create_backend("auto")
    assert isinstance(backend, AutoBackend) and backend.name == "auto"
    with pytest.raises(BackendUnavailable) as e:
        backend.open()
    assert "no GPU library loaded (nvml: NVML did not load (Driver Not Loaded)" in str(e.value)
    assert "amdsmi: the amdsmi package is not installed" in str(e.value)
    assert backend.devices() == () and backend.name == "auto"

    no_driver.setitem(sys.modules, "pynvml", make_module([FakeGpu("GPU-aaaa")]))  # the driver is in
    backend.open()
    assert backend.name == "nvml"
    (device,) = backend.devices()
    assert backend.sample(device).gpu_utilization == 37.0
    backend.close()
    backend.open()  # a driver reload re-opens the same backend
    assert backend.name == "nvml" and len(backend.devices()) == 1


def test_the_agent_command_does_not_exit_without_a_driver(no_driver: pytest.MonkeyPatch) -> None:
    args = argparse.Namespace(backend="auto")
    backend = backend_from_args(args, node="n1", open_it=False)  # before: opened here, and exited with 2
    assert backend.name == "auto"


async def test_agent_on_auto_waits_for_the_driver(no_driver: pytest.MonkeyPatch) -> None:
    settings = AgentSettings(
        node_name="n1",
        interval=0.05,
        grpc_address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        kubelet_socket=Path("/nonexistent/kubelet.sock"),
    )
    agent = Agent(settings, create_backend("auto"))
    await agent.start()
    try:
        assert agent._ready_problem() is not None
        assert agent.state.devices == ()
        no_driver.setitem(sys.modules, "pynvml", make_module([FakeGpu("GPU-aaaa")]))
        # the agent retries with backoff from one interval
        await until(agent._ready_problem, 10, "the agent ready once the driver loads", ok=lambda p: p is None)
        assert [d.uuid for d in agent.state.devices] == ["GPU-aaaa"]  # type: ignore[var-annotated]
        assert agent.sampler.backend.name == "nvml"
    finally:
        await agent.stop()
