"""The agent's /metrics as a scraper sees it: dcgm-exporter names and labels, attribution, self metrics."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess

import pytest

from gpuscale.agent.service import Agent
from gpuscale.backends.patterns import parse_patterns
from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet, dra_claim, pod_resources
from tests.poll import until

from .scrape import scrape, series

DCGM = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_MEMORY_TEMP",
]


async def test_series_for_every_gpu_from_the_first_sampling_round(start_agent: AgentFactory) -> None:
    """Every GPU's series are served once the round the agent samples as it starts is done. The interval is an
    hour, so no later round can be what serves them; the test makes the next round itself."""
    agent = await start_agent("constant:10,constant:20,constant:30,constant:40", gpus=4, interval=3600.0)
    await until(lambda: agent.state.rounds, what="the sampling round made at start")
    _status, text = await scrape(agent)
    assert agent.state.rounds == 1
    for name in DCGM:
        got = series(text, name)
        assert len(got) == 4, name
    util = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_DEV_GPU_UTIL")}
    assert util == {"0": 10, "1": 20, "2": 30, "3": 40}
    labels, _ = series(text, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert set(labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    assert labels["Hostname"] == "node-a" and labels["device"] == "nvidia0"
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["UUID"].startswith("GPU-")
    fb_used = series(text, "DCGM_FI_DEV_FB_USED")[0][1]
    fb_free = series(text, "DCGM_FI_DEV_FB_FREE")[0][1]
    fb_reserved = series(text, "DCGM_FI_DEV_FB_RESERVED")[0][1]
    assert fb_used + fb_free + fb_reserved == pytest.approx(
        81559, abs=1
    )  # MiB: total = used + free + reserved
    energy = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")}
    await agent.sample_once()  # the next round
    _, later = await scrape(agent)
    assert all(
        v > energy[lab["gpu"]] for lab, v in series(later, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    )  # mJ
    # GPM activity (an H100: Hopper) as DCGM's profiling fields: ratios, not percent.
    sm = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_PROF_SM_ACTIVE")}
    assert sm == {
        "0": pytest.approx(0.08),
        "1": pytest.approx(0.16),
        "2": pytest.approx(0.24),
        "3": pytest.approx(0.32),
    }
    assert {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")}["3"] == pytest.approx(
        0.4
    )
    # PCIe rates in bytes/s, from the same GPM interval: the mock's GPU 3 at 40 % receives 2.4 GB/s
    rx = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_PROF_PCIE_RX_BYTES")}
    assert rx["3"] == pytest.approx(2.4e9) and len(series(text, "DCGM_FI_PROF_PCIE_TX_BYTES")) == 4
    assert (
        len(series(text, "DCGM_FI_PROF_NVLINK_RX_BYTES"))
        == len(series(text, "DCGM_FI_PROF_NVLINK_TX_BYTES"))
        == 4
    )


async def test_gpus_without_gpm_have_no_profiling_series(start_agent: AgentFactory) -> None:
    from gpuscale.backends.mock import MockBackend, MockConfig, find_model

    a100 = MockBackend(MockConfig(gpus=2, model=find_model("a100"), node="node-a"))
    agent = await start_agent(backend=a100)

    async def ready() -> str | None:
        _status, text = await scrape(agent)
        return text if series(text, "DCGM_FI_DEV_GPU_UTIL") else None

    text = await until(ready)
    assert not series(text, "DCGM_FI_PROF_SM_ACTIVE")  # absent, never a made-up 0
    assert not series(text, "DCGM_FI_PROF_PCIE_RX_BYTES")
    assert len(series(text, "DCGM_FI_DEV_GPU_UTIL")) == 2


async def test_health_endpoints(start_agent: AgentFactory) -> None:
    agent = await start_agent()
    await until(lambda: _status_is(agent, "/readyz", 200))
    assert (await scrape(agent, "/healthz"))[0] == 200


async def _status_is(agent: Agent, path: str, code: int) -> bool:
    return (await scrape(agent, path))[0] == code


async def test_hostname_label_is_configurable(start_agent: AgentFactory) -> None:
    agent = await start_agent(hostname_label="hostname")
    text = await until(lambda: _text_with(agent, "DCGM_FI_DEV_GPU_UTIL"))
    assert all("hostname" in lab and "Hostname" not in lab for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL"))


async def _text_with(agent: Agent, name: str) -> str | None:
    _, text = await scrape(agent)
    return text if series(text, name) else None


async def test_attributed_gpus_carry_pod_labels(start_agent: AgentFactory, kubelet: FakeKubelet) -> None:
    agent = await start_agent("constant:50", gpus=3)
    uuids = [d.uuid for d in agent.state.devices]
    kubelet.pods = [
        pod_resources("ai", "llm-0", {"server": [("nvidia.com/gpu", [uuids[0]])]}),
        # time-sliced: two pods share GPU 1 through replicas GPU-…::0 and GPU-…::1
        pod_resources("ai", "embed-0", {"main": [("nvidia.com/gpu", [f"{uuids[1]}::0"])]}),
        pod_resources("ai", "embed-1", {"main": [("nvidia.com/gpu", [f"{uuids[1]}::1"])]}),
        pod_resources("kube-system", "other", {"c": [("example.com/fpga", ["fpga0"])]}),
    ]

    async def attributed() -> str | None:
        text = await _text_with(agent, "DCGM_FI_DEV_GPU_UTIL")
        if text and any("pod" in lab for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL")):
            return text
        return None

    text = await until(attributed)
    by_uuid: dict[str, list[dict[str, str]]] = {}
    for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL"):
        by_uuid.setdefault(lab["UUID"], []).append(lab)
    (g0,) = by_uuid[uuids[0]]
    assert (g0["namespace"], g0["pod"], g0["container"]) == ("ai", "llm-0", "server")
    assert sorted(lab["pod"] for lab in by_uuid[uuids[1]]) == ["embed-0", "embed-1"]
    (g2,) = by_uuid[uuids[2]]
    assert not {"namespace", "pod", "container"} & set(g2)  # held by nobody: no pod labels at all


class _Slices:
    """The DRA device table of a node's ResourceSlices, as ``NodeResourceSliceWatcher.devices`` has it."""

    def __init__(self) -> None:
        self.devices: dict[str, tuple[str, ...]] = {}
        self.synced = asyncio.Event()
        self.note: str | None = None

    async def run(self) -> None:
        await asyncio.Event().wait()


async def test_dra_devices_are_attributed_once_a_resource_slice_names_them(
    start_agent: AgentFactory, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    slices = _Slices()
    agent = await start_agent("constant:50", gpus=2, dra=slices)
    uuids = [d.uuid for d in agent.state.devices]
    claim = dra_claim("ai", "llm-0-gpu", "gpu.nvidia.com", "node-a", ["gpu-1"])
    kubelet.pods = [pod_resources("ai", "llm-0", {}, {"server": [claim]})]

    # the slices not read yet: too early to say anything
    warning = "DRA device gpu.nvidia.com/node-a/gpu-1 (claim ai/llm-0-gpu), which no ResourceSlice"
    await asyncio.sleep(0.3)
    assert warning not in caplog.text and not agent.state.assignments
    # read, and no slice describes gpu-1: said once, with the claim, and nothing attributed
    slices.synced.set()
    await until(lambda: warning in caplog.text)
    await asyncio.sleep(0.3)  # a few more attribution rounds
    assert caplog.text.count(warning) == 1
    assert not agent.state.assignments

    slices.devices = {"gpu.nvidia.com/node-a/gpu-1": (uuids[1],)}

    async def attributed() -> bool:
        _, text = await scrape(agent)
        pods = {lab["UUID"]: lab.get("pod") for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL")}
        return pods == {uuids[0]: None, uuids[1]: "llm-0"}

    await until(attributed)


async def test_failing_gpu_keeps_last_values_and_is_reported(start_agent: AgentFactory) -> None:
    from tests.agent.faults import FlakyBackend

    backend = FlakyBackend(gpus=2, patterns="constant:33")
    agent = await start_agent(backend=backend)
    await until(lambda: _text_with(agent, "DCGM_FI_DEV_GPU_UTIL"))
    backend.fail(1, "lost")

    async def reported() -> str | None:
        _, text = await scrape(agent)
        errs = series(text, "gpuscale_agent_read_errors_total")
        return text if any(lab["kind"] == "lost" and v >= 2 for lab, v in errs) else None

    text = await until(reported)
    up = {lab["gpu"]: v for lab, v in series(text, "gpuscale_agent_gpu_up")}
    assert up == {"0": 1.0, "1": 0.0}
    # the node, under the same label name as on the GPU series: a dashboard groups both by it
    assert {lab["Hostname"] for lab, _ in series(text, "gpuscale_agent_sample_age_seconds")} == {"node-a"}
    util = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_DEV_GPU_UTIL")}
    assert util == {"0": 33.0, "1": 33.0}  # the last good value is still served …
    age = {lab["gpu"]: v for lab, v in series(text, "gpuscale_agent_sample_age_seconds")}
    assert age["1"] > age["0"]  # … marked with its age
    backend.heal(1)
    await until(lambda: _up_is(agent, "1", 1.0))


async def _up_is(agent: Agent, gpu: str, value: float) -> bool:
    _, text = await scrape(agent)
    return {lab["gpu"]: v for lab, v in series(text, "gpuscale_agent_gpu_up")}.get(gpu) == value


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not installed"
)
async def test_promtool_finds_no_problem(start_agent: AgentFactory, kubelet: FakeKubelet) -> None:
    agent = await start_agent("constant:50", gpus=2)
    kubelet.pods = [
        pod_resources("ai", "llm-0", {"server": [("nvidia.com/gpu", [agent.state.devices[0].uuid])]})
    ]
    await until(lambda: _attributed(agent))
    _, text = await scrape(agent)
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    problems = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    # The only complaints allowed are about dcgm-exporter's own names: its label names (UUID, modelName,
    # Hostname, PodName…) are camelCase, and DCGM_FI_DEV_PCIE_REPLAY_COUNTER has "counter" in it. They are
    # the compatibility names dashboards, alerts and adapter rules query, so they stay.
    compat = re.compile(
        r"^DCGM_\w+ label names should be written in 'snake_case' not 'camelCase'$"
        r"|^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$"
    )
    assert all(compat.match(p) for p in problems), problems
    # Everything else, the gpuscale_* series included, passes promtool with no remark at all.
    own = "\n".join(line for line in text.splitlines() if "DCGM_" not in line) + "\n"
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=own, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


async def _attributed(agent: Agent) -> bool:
    return bool(agent.state.assignments)


async def test_mig_series_per_gpu_instance_and_the_gpu_only_for_what_instances_lack(
    start_agent: AgentFactory,
) -> None:
    """In MIG mode dcgm-exporter monitors the GPU instances: memory, utilization and activity per instance
    (GPU_I_PROFILE, GPU_I_ID), so a sum over a node counts each byte once. The GPU itself keeps what no
    instance reports (temperature, power, clocks, health)."""
    from gpuscale.backends.mock import MockBackend, MockConfig, find_model

    mig = MockBackend(
        MockConfig(gpus=1, model=find_model("h100"), node="node-a", mig_profiles=("3g.40gb", "4g.40gb"))
    )
    agent = await start_agent(backend=mig)

    async def ready() -> str | None:
        _status, text = await scrape(agent)
        return text if len(series(text, "DCGM_FI_DEV_FB_USED")) == 2 else None

    text = await until(ready)
    used = series(text, "DCGM_FI_DEV_FB_USED")
    assert sorted(lab["GPU_I_PROFILE"] for lab, _ in used) == ["3g.40gb", "4g.40gb"]  # no parent series
    assert len(series(text, "DCGM_FI_PROF_SM_ACTIVE")) == 2  # GPM per instance
    (temp,) = series(text, "DCGM_FI_DEV_GPU_TEMP")
    assert "GPU_I_ID" not in temp[0]  # the GPU's own
    assert not series(text, "DCGM_FI_DEV_GPU_UTIL")  # NVML has none in MIG mode


def test_compute_instances_of_one_gpu_instance_make_one_series() -> None:
    """Two compute instances of GPU instance 1 share its memory and counters, and dcgm-exporter's labels
    cannot tell them apart: a second series would duplicate the first's labels."""
    from gpuscale.agent.exporter import GpuCollector
    from gpuscale.agent.state import GpuView, NodeSnapshot
    from gpuscale.model import DeviceInfo, GpuSample

    def instance(uuid: str, ci: int) -> GpuView:
        d = DeviceInfo(
            0,
            uuid,
            "NVIDIA H100 80GB HBM3",
            "00000000:19:00.0",
            40 * 2**30,
            None,
            mig_enabled=True,
            parent_uuid="GPU-p",
            mig_profile="3g.40gb",
            gpu_instance_id=1,
            compute_instance_id=ci,
        )
        return GpuView(
            d, GpuSample(uuid, 1.0, memory_used_bytes=2**30, memory_total_bytes=40 * 2**30), None, ()
        )

    snap = NodeSnapshot("node-a", (instance("MIG-a", 0), instance("MIG-b", 1)), {}, 1.0, 1)
    families = {m.name: m for m in GpuCollector(lambda: snap, clock=lambda: 2.0).collect()}
    assert len(families["DCGM_FI_DEV_FB_USED"].samples) == 1


async def test_amd_series_as_amds_exporter_names_them(start_agent: AgentFactory) -> None:
    from gpuscale.backends.mock import MockBackend, MockConfig, find_model

    amd = MockBackend(
        MockConfig(gpus=1, model=find_model("mi300x"), node="node-a", patterns=parse_patterns("constant:50"))
    )
    agent = await start_agent(backend=amd)

    async def ready() -> str | None:
        _status, text = await scrape(agent)
        return text if series(text, "gpu_gfx_activity") else None

    text = await until(ready)
    junction = series(text, "gpu_junction_temperature")[0][1]
    assert series(text, "gpu_edge_temperature")[0][1] == pytest.approx(junction - 8.0)
    assert series(text, "gpu_package_power")[0][1] == series(text, "gpu_power_usage")[0][1]
    assert not series(text, "DCGM_FI_DEV_GPU_UTIL")
    # the labels AMD's exporter always sets, so its dashboards' selectors and groupings find these series
    ((labels, _),) = series(text, "gpu_gfx_activity")
    assert {
        k: labels[k]
        for k in (
            "gpu_id",
            "card_model",
            "hostname",
            "gpu_partition_id",
            "gpu_compute_partition_type",
            "gpu_memory_partition_type",
            "deployment_mode",
        )
    } == {
        "gpu_id": "0",
        "card_model": "AMD Instinct MI300X",
        "hostname": "node-a",
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "spx",
        "gpu_memory_partition_type": "nps1",
        "deployment_mode": "baremetal",
    }
    assert labels["serial_number"]
    # the agent's own per-GPU series name the node as the GPU's series do: AMD's hostname
    ((up_labels, _),) = series(text, "gpuscale_agent_gpu_up")
    assert up_labels["hostname"] == "node-a" and "Hostname" not in up_labels


async def test_the_xid_of_a_gpu_that_fell_off_the_bus_reaches_metrics(
    start_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XID 79 ("fallen off the bus"): every read after it fails, so the value comes live from the backend,
    not from the last good sample, which predates it."""
    import sys

    from gpuscale.backends.nvml import NvmlBackend
    from tests.fakes.pynvml_fake import NVML_ERROR_GPU_IS_LOST, FakeGpu, make_module

    gpu = FakeGpu("GPU-aaaa")
    module = make_module([gpu])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    agent = await start_agent(backend=NvmlBackend())

    async def xid(value: float) -> str | None:
        _status, text = await scrape(agent)
        got = series(text, "DCGM_FI_DEV_XID_ERRORS")
        return text if got and got[0][1] == value else None

    await until(lambda: xid(0.0))
    gpu.fail = NVML_ERROR_GPU_IS_LOST  # reads fail from here on; the driver reports the XID
    module.raise_xid(gpu, 79)

    async def lost_with_its_xid() -> str | None:
        text = await xid(79.0)
        return text if text and series(text, "gpuscale_agent_gpu_up")[0][1] == 0.0 else None

    await until(lost_with_its_xid)
    await asyncio.sleep(0.3)  # more failed rounds: the value stays
    assert await xid(79.0)


def test_mig_compute_instances_keep_every_pod_and_a_gpu_without_instances_keeps_its_memory() -> None:
    from gpuscale.agent.exporter import GpuCollector
    from gpuscale.agent.state import GpuView, NodeSnapshot
    from gpuscale.model import Assignment, ContainerRef, DeviceInfo, GpuSample, ProcessSample

    def instance(uuid: str, ci: int, pod: str) -> GpuView:
        d = DeviceInfo(
            0,
            uuid,
            "NVIDIA H100 80GB HBM3",
            "00000000:19:00.0",
            40 * 2**30,
            None,
            mig_enabled=True,
            parent_uuid="GPU-p",
            mig_profile="3g.40gb",
            gpu_instance_id=1,
            compute_instance_id=ci,
        )
        ref = ContainerRef("ml", pod, "main")
        sample = GpuSample(
            uuid,
            1.0,
            memory_used_bytes=2**30,
            memory_total_bytes=40 * 2**30,
            processes=(ProcessSample(100 + ci, 2**29, None),),
        )
        return GpuView(d, sample, None, (Assignment(ref, "nvidia.com/mig-3g.40gb", uuid),), {100 + ci: ref})

    snap = NodeSnapshot("node-a", (instance("MIG-a", 0, "pod-a"), instance("MIG-b", 1, "pod-b")), {}, 1.0, 1)
    families = {m.name: m for m in GpuCollector(lambda: snap, clock=lambda: 2.0).collect()}
    assert sorted(s.labels["pod"] for s in families["DCGM_FI_DEV_FB_USED"].samples) == ["pod-a", "pod-b"]
    assert sorted(s.labels["PodName"] for s in families["DCGM_CUSTOM_PROCESS_MEM_USED"].samples) == [
        "pod-a",
        "pod-b",
    ]

    # A GPU in MIG mode before the MIG manager has created its instances: its own memory series stay.
    parent = DeviceInfo(
        0, "GPU-p", "NVIDIA H100 80GB HBM3", "00000000:19:00.0", 80 * 2**30, 700.0, mig_enabled=True
    )
    lone = NodeSnapshot(
        "node-a",
        (
            GpuView(
                parent, GpuSample("GPU-p", 1.0, memory_used_bytes=0, memory_total_bytes=80 * 2**30), None, ()
            ),
        ),
        {},
        1.0,
        1,
    )
    families = {m.name: m for m in GpuCollector(lambda: lone, clock=lambda: 2.0).collect()}
    assert "DCGM_FI_DEV_FB_USED" in families
