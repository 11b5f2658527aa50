"""Faults the agent survives: the kubelet going away and back, a hung GPU read, the driver reloading."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns
from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.poll import until

from .faults import FlakyBackend
from .scrape import scrape, series


async def test_kubelet_socket_disappears_and_comes_back(
    start_agent: AgentFactory, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    agent = await start_agent("constant:50", gpus=2)
    u0, u1 = (d.uuid for d in agent.state.devices)
    kubelet.pods = [pod_resources("ai", "llm-0", {"server": [("nvidia.com/gpu", [u0])]})]
    await until(lambda: _holds(agent, u0, "llm-0"))
    await kubelet.stop()  # the kubelet restarts: its socket is gone
    await asyncio.sleep(0.4)
    assert agent.state.assignments[u0][0].container.pod == "llm-0"  # the last attribution is kept
    _, text = await scrape(agent)
    assert any(lab.get("pod") == "llm-0" for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL"))
    kubelet.pods = [pod_resources("ai", "llm-1", {"server": [("nvidia.com/gpu", [u1])]})]
    await kubelet.start()  # back, with a new socket file and other pods
    await until(lambda: _holds(agent, u1, "llm-1"))
    assert u0 not in agent.state.assignments
    assert any("kubelet socket" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def _holds(agent, uuid: str, pod: str) -> bool:  # type: ignore[no-untyped-def]
    return any(a.container.pod == pod for a in agent.state.assignments.get(uuid, ()))


async def test_hung_read_is_bounded_and_others_go_on(start_agent: AgentFactory) -> None:
    backend = FlakyBackend(gpus=2, patterns="constant:20")
    agent = await start_agent(backend=backend, read_timeout=0.3)
    await asyncio.sleep(0.25)
    backend.hanging.add(1)
    try:

        async def timed_out() -> bool:
            _, text = await scrape(agent)
            errs = {
                (lab["gpu"], lab["kind"]): v for lab, v in series(text, "gpuscale_agent_read_errors_total")
            }
            return errs.get(("1", "timeout"), 0) >= 2

        await until(timed_out)
        before = agent.state.history[agent.state.devices[0].uuid][-1].timestamp
        await asyncio.sleep(0.5)
        after = agent.state.history[agent.state.devices[0].uuid][-1].timestamp
        assert after > before  # GPU 0 keeps being sampled while GPU 1's read hangs
        status, _ = await scrape(agent, "/healthz")
        assert status == 200
    finally:
        backend.hanging.clear()
        backend.hang.set()  # release the stuck read
    await until(lambda: _up(agent, "1"))


async def _up(agent, gpu: str) -> bool:  # type: ignore[no-untyped-def]
    _, text = await scrape(agent)
    return {lab["gpu"]: v for lab, v in series(text, "gpuscale_agent_gpu_up")}.get(gpu) == 1.0


async def test_driver_reload_reopens_the_backend(start_agent: AgentFactory) -> None:
    backend = FlakyBackend(gpus=2, patterns="constant:45")
    agent = await start_agent(backend=backend)
    await until(lambda: _up(agent, "0"))
    backend.driver_gone = True  # every read fails with "driver", and open() fails too
    await asyncio.sleep(0.5)
    assert backend.opens == 1
    _, text = await scrape(agent)
    assert {lab["gpu"]: v for lab, v in series(text, "gpuscale_agent_gpu_up")} == {"0": 0.0, "1": 0.0}
    assert [v for lab, v in series(text, "DCGM_FI_DEV_GPU_UTIL")] == [45.0, 45.0]  # last values, aging
    backend.driver_gone = False  # the driver is back: the agent re-opens the backend by itself
    await until(lambda: _up(agent, "0"), timeout=5)
    assert backend.opens >= 2
    _, text = await scrape(agent)
    assert series(text, "gpuscale_agent_backend_reopens_total")[0][1] >= 1


async def test_stop_never_closes_the_backend_under_a_running_read(start_agent: AgentFactory) -> None:
    """A read still in its worker thread at stop (hung, or the round the stop interrupted): NVML must not be
    shut down, nor its GPM samples freed, under it. The backend is left to the process's exit."""
    backend = FlakyBackend(gpus=2, patterns="constant:20")
    closes: list[bool] = []  # for each close: whether a read was running then
    reading = threading.Event()
    inner_sample, inner_close = backend.sample, backend.close

    def sample(device):  # type: ignore[no-untyped-def]
        reading.set()
        try:
            return inner_sample(device)
        finally:
            reading.clear()

    def close() -> None:
        closes.append(reading.is_set())
        inner_close()

    backend.sample, backend.close = sample, close  # type: ignore[method-assign]
    agent = await start_agent(backend=backend, read_timeout=0.2)
    await asyncio.sleep(0.25)
    backend.hanging.add(1)
    await until(reading.is_set, what="GPU 1's read hanging in its worker thread")
    await agent.stop()
    try:
        assert closes == []  # not closed: the read was still running
    finally:
        backend.hanging.clear()
        backend.hang.set()
    # Without a hung read, stop closes the backend, and no read runs then.
    quiet = FlakyBackend(gpus=1)
    quiet_closes: list[bool] = []
    inner = quiet.close
    quiet.close = lambda: (quiet_closes.append(True), inner())[1]  # type: ignore[func-returns-value,method-assign]
    calm = await start_agent(backend=quiet)
    await asyncio.sleep(0.15)
    await calm.stop()
    assert quiet_closes == [True]


async def test_a_device_id_naming_no_gpu_is_logged_once(
    start_agent: AgentFactory, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    """A device the kubelet assigned that the agent does not read (a MIG layout changed after the agent
    started, a device plugin's own id scheme) is left unattributed and said once, not at every refresh."""
    agent = await start_agent(gpus=1)
    known = agent.state.devices[0].uuid
    kubelet.pods = [
        pod_resources("ml", "a", {"main": [("nvidia.com/gpu", [known])]}),
        pod_resources("ml", "b", {"main": [("nvidia.com/mig-3g.40gb", ["MIG-not-here"])]}),
    ]
    await until(lambda: _holds(agent, known, "a"))
    await asyncio.sleep(0.35)  # a few more refreshes (every 0.1 s)
    said = [r.getMessage() for r in caplog.records if "names no GPU" in r.getMessage()]
    assert said == [
        "the kubelet assigned nvidia.com/mig-3g.40gb device 'MIG-not-here', which names no GPU this agent "
        "reads: not attributed (a MIG layout changed? the agent lists its devices again, at most every 60s)"
    ]


class _RelayoutBackend:
    """A mock GPU in MIG mode whose layout can change while the agent runs (mig-manager reconfiguring it):
    each open lists the layout of that moment."""

    name = "relayout"

    def __init__(self, profiles: tuple[str, ...]) -> None:
        self.profiles = profiles
        self.inner = self._make()
        self.opens = 0

    def _make(self) -> MockBackend:
        return MockBackend(
            MockConfig(
                gpus=1, patterns=parse_patterns("constant:50"), node="node-a", mig_profiles=self.profiles
            )
        )

    def open(self) -> None:
        self.opens += 1
        self.inner = self._make()
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def devices(self) -> Any:
        return self.inner.devices()

    def sample(self, device: Any) -> Any:
        return self.inner.sample(device)


async def test_a_mig_device_the_kubelet_names_after_a_relayout_is_found_without_a_restart(
    start_agent: AgentFactory, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gpuscale.agent.service")
    backend = _RelayoutBackend(("3g.40gb",))
    agent = await start_agent(backend=backend, rediscover_interval=0.2)
    assert [d.mig_profile for d in agent.state.devices if d.is_mig] == ["3g.40gb"]
    # mig-manager adds a 1g.10gb instance; the device plugin hands it to a pod: an id the agent does not list
    backend.profiles = ("3g.40gb", "1g.10gb")
    new_uuid = _RelayoutBackend(backend.profiles)._make()
    new_uuid.open()
    mig = next(d.uuid for d in new_uuid.devices() if d.mig_profile == "1g.10gb")
    kubelet.pods = [pod_resources("ai", "small-0", {"main": [("nvidia.com/mig-1g.10gb", [mig])]})]

    await until(lambda: mig in agent.state.assignments, timeout=10)
    assert backend.opens == 2  # listed once more, not at every attribution round
    assert "GPU devices listed again" in caplog.text
    await asyncio.sleep(0.6)
    assert backend.opens == 2  # nothing unmatched any more: no further reopen


async def test_an_id_that_is_never_listed_costs_one_listing_and_a_failing_gpu_none(
    start_agent: AgentFactory, kubelet: FakeKubelet
) -> None:
    """A GPU hidden from the agent's container is named by the kubelet forever: listing the devices again
    once is enough. And while a GPU fails its reads, the agent does not close and open the backend for a
    relayout: a new open could fail on that GPU and take the node's other GPUs with it."""
    backend = FlakyBackend(gpus=2)
    agent = await start_agent(backend=backend, rediscover_interval=0.1)
    hidden = "GPU-00000000-1111-2222-3333-444444444444"
    kubelet.pods = [pod_resources("ai", "p", {"main": [("nvidia.com/gpu", [hidden])]})]
    await until(lambda: backend.opens == 2)
    await asyncio.sleep(0.8)  # many attribution rounds and intervals
    assert backend.opens == 2

    other = "GPU-55555555-6666-7777-8888-999999999999"
    backend.fail(1, "lost")
    lost = agent.state.devices[1].uuid
    await until(lambda: agent.state.errors.get(lost) is not None)
    kubelet.pods = [pod_resources("ai", "q", {"main": [("nvidia.com/gpu", [other])]})]
    await asyncio.sleep(0.8)
    assert backend.opens == 2  # GPU 1 failing: no relisting
    backend.heal(1)
    await until(lambda: backend.opens == 3)
