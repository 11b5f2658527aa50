"""A real Prometheus scrapes a real agent (mock GPUs, pods attributed through the stand-in kubelet): the query in
each rendered ScaledObject returns exactly one series with the expected value, and the Prometheus Adapter rule,
expanded as the adapter expands it, returns one value per pod."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuscale.render import HpaOptions, ScaledObjectOptions, adapter_values, scaledobject_documents
from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.fakes.prometheus import PrometheusServer, prometheus_binary, run_prometheus
from tests.poll import until, until_sync

from .agents import POD_A, POD_B, attributed_agent
from .conftest import prometheus_with_target_labels
from .helpers import ROOT, expand_rule

DASHBOARD = ROOT / "deploy" / "grafana" / "gpuscale.json"

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binary() is None, reason="Debian's prometheus package is not installed"),
]


def query_of(options: ScaledObjectOptions) -> str:
    so = scaledobject_documents(options)[-1][1]
    q: str = so["spec"]["triggers"][0]["metadata"]["query"]
    return q


def one_value(prom: PrometheusServer, promql: str) -> float:
    result = prom.wait_for(promql)
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def per_pod(prom: PrometheusServer, promql: str, label: str) -> dict[str, float]:
    return {r["metric"][label]: float(r["value"][1]) for r in prom.wait_for(promql, min_series=2)}


# the default profile, llm-serving, is the engine's queue: no profile, GPU utilization, a target
GPU: dict[str, Any] = {"profile": None, "metric": "gpu_utilization", "target_value": "85"}


def _options(**kw: Any) -> ScaledObjectOptions:
    # this test's Prometheus scrapes every second: a 5 s window keeps its 5 s range
    return ScaledObjectOptions(
        "deployment/llm", "ai", mode="prometheus", window="5", scrape_interval=1.0, **{**GPU, **kw}
    )


async def test_rendered_queries(start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path) -> None:
    agent = await attributed_agent(start_agent, kubelet)

    def check() -> None:
        with run_prometheus(tmp_path, [f"127.0.0.1:{agent.metrics_port}"]) as prom:
            prom.wait_for("DCGM_FI_DEV_GPU_UTIL", min_series=5)
            assert one_value(prom, query_of(_options())) == pytest.approx(50.0)  # (30 + 50 + 70) / 3
            assert one_value(prom, query_of(_options(aggregation="max"))) == pytest.approx(70.0)
            assert one_value(prom, query_of(_options(aggregation="p50"))) == pytest.approx(50.0)
            # StatefulSet llm-embed: its pod llm-embed-0 only.
            sts = ScaledObjectOptions(
                "statefulset/llm-embed", "ai", mode="prometheus", window="5", scrape_interval=1.0, **GPU
            )
            assert one_value(prom, query_of(sts)) == pytest.approx(90.0)
            # Memory: the rendered bytes query against the raw MiB series of the same GPUs.
            used = one_value(
                prom, query_of(_options(metric="memory_used", aggregation="sum", target_value="1Gi"))
            )
            raw = one_value(prom, 'sum(DCGM_FI_DEV_FB_USED{namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"})')
            assert used == pytest.approx(raw * 1024 * 1024, rel=0.02)
            pct = one_value(
                prom, query_of(_options(metric="memory_used_percent", aggregation="max", target_value="80"))
            )
            assert 0 < pct < 100
            # SM activity (GPM on the mock H100: 0.8 x utilization), exported as DCGM's ratio, queried in %.
            sm = query_of(_options(metric="sm_active", target_value="60"))
            assert "DCGM_FI_PROF_SM_ACTIVE" in sm
            assert one_value(prom, sm) == pytest.approx(0.8 * 50.0)

            # The adapter rule, expanded for the HPA's pods: one value per pod, the avg over each pod's GPUs.
            values = adapter_values(
                HpaOptions("deployment/llm", "ai", window="5", scrape_interval=1.0, **GPU)
            )[1]
            (rule,) = values["rules"]["custom"]
            assert prom.query(rule["seriesQuery"])  # the adapter's discovery finds the series
            q = expand_rule(rule, "ai", [POD_A, POD_B])
            assert q == (
                'avg by (pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{namespace="ai",'
                f'pod=~"{POD_A}|{POD_B}",job="gpuscale-agent"}}[5s]))'
            )
            assert per_pod(prom, q, "pod") == {POD_A: pytest.approx(30.0), POD_B: pytest.approx(60.0)}
            assert one_value(prom, expand_rule(rule, "ai", [POD_A])) == pytest.approx(30.0)

            # Every query of the Grafana dashboard is valid PromQL (its variables set as Grafana would).
            variables = {
                "$hostname_label": "Hostname",
                "$node": ".*",
                "$namespace": ".*",
                "$job": "gpuscale-agent",
            }
            for panel in json.loads(DASHBOARD.read_text())["panels"]:
                for target in panel.get("targets", []):
                    expr = target["expr"]
                    for name, value in variables.items():
                        expr = expr.replace(name, value)
                    prom.query(expr)  # asserts status success

    await asyncio.to_thread(check)


def _panel_expr(title: str, variables: dict[str, str]) -> str:
    (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == title]
    expr: str = panel["targets"][0]["expr"]
    for name, value in variables.items():
        expr = expr.replace(name, value)
    return expr


async def test_dashboard_panels_count_a_shared_gpu_once_and_name_each_node(
    start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """A time-sliced GPU has one FB_USED series per pod holding it: the memory total counts it once; the
    agent's own per-GPU series carry the node, so the sample-age panel keeps one line per GPU of each node."""
    agent = await start_agent("constant:40,constant:80", gpus=2)
    u = [d.uuid for d in agent.state.devices]
    kubelet.pods = [
        pod_resources("ai", "embed-0", {"main": [("nvidia.com/gpu", [f"{u[0]}::0"])]}),
        pod_resources("ai", "embed-1", {"main": [("nvidia.com/gpu", [f"{u[0]}::1"])]}),
    ]
    await until(lambda: agent.state.assignments, what="a GPU attributed")
    variables = {"$hostname_label": "Hostname", "$node": ".*", "$namespace": ".*", "$job": "gpuscale-agent"}

    def check() -> None:
        with run_prometheus(tmp_path, [f"127.0.0.1:{agent.metrics_port}"]) as prom:
            prom.wait_for("DCGM_FI_DEV_FB_USED", min_series=3)  # GPU 0 twice (two pods), GPU 1 once
            per_gpu = {
                r["metric"]["UUID"]: float(r["value"][1])
                for r in prom.query("max by (UUID) (DCGM_FI_DEV_FB_USED)")
            }
            total = one_value(prom, _panel_expr("GPU memory used", variables))
            assert total == pytest.approx(sum(per_gpu.values()) * 1048576)
            ages = prom.wait_for(_panel_expr("Sample age (newest good sample)", variables), min_series=2)
            assert sorted((r["metric"]["Hostname"], r["metric"]["gpu"]) for r in ages) == [
                ("node-a", "0"),
                ("node-a", "1"),
            ]

    await asyncio.to_thread(check)


async def test_dashboard_amd_panels_show_an_amd_node(
    start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """An AMD node's agent serves AMD's exporter's names: the AMD row shows its GPUs and their pods."""
    from gpuscale.backends.mock import MockBackend, MockConfig, find_model
    from gpuscale.backends.patterns import parse_patterns

    amd = MockBackend(
        MockConfig(
            gpus=2,
            model=find_model("mi300x"),
            node="amd-1",
            patterns=parse_patterns("constant:30,constant:70"),
        )
    )
    agent = await start_agent(backend=amd, node="amd-1")
    kubelet.pods = [
        pod_resources("ai", "vllm-0", {"server": [("amd.com/gpu", [agent.state.devices[1].pci_bus_id])]})
    ]
    await until(lambda: agent.state.assignments, what="a GPU attributed")
    variables = {"$hostname_label": "hostname", "$node": ".*", "$namespace": ".*", "$job": "gpuscale-agent"}

    def check() -> None:
        with run_prometheus(tmp_path, [f"127.0.0.1:{agent.metrics_port}"]) as prom:
            util = prom.wait_for(_panel_expr("AMD: utilization per GPU", variables), min_series=2)
            assert {(r["metric"]["hostname"], r["metric"]["gpu_id"]): float(r["value"][1]) for r in util} == {
                ("amd-1", "0"): 30.0,
                ("amd-1", "1"): 70.0,
            }
            per_pod = prom.wait_for(_panel_expr("AMD: utilization per pod (avg over its GPUs)", variables))
            assert [(r["metric"]["pod"], float(r["value"][1])) for r in per_pod] == [("vllm-0", 70.0)]
            vram = prom.wait_for(_panel_expr("AMD: VRAM used per GPU", variables), min_series=2)
            assert all(float(r["value"][1]) > 0 for r in vram)

    await asyncio.to_thread(check)


async def test_exported_labels(start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path) -> None:
    agent = await attributed_agent(start_agent, kubelet)

    def check() -> None:
        with prometheus_with_target_labels(tmp_path, f"127.0.0.1:{agent.metrics_port}") as prom:
            prom.wait_for("DCGM_FI_DEV_GPU_UTIL", min_series=5)
            # The plain query finds nothing: pod/namespace are now the agent's own pod.
            assert prom.query(query_of(_options())) == []
            assert one_value(prom, query_of(_options(exported_labels=True))) == pytest.approx(50.0)
            values = adapter_values(
                HpaOptions("deployment/llm", "ai", window="5", exported_labels=True, **GPU)
            )[1]
            (rule,) = values["rules"]["custom"]
            q = expand_rule(rule, "ai", [POD_A, POD_B])
            assert per_pod(prom, q, "exported_pod") == {
                POD_A: pytest.approx(30.0),
                POD_B: pytest.approx(60.0),
            }

    await asyncio.to_thread(check)


async def test_beside_dcgm_exporter_the_queries_and_the_dashboard_read_the_agents_series(
    start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """The GPU operator's dcgm-exporter serves the same DCGM_FI_* names for the same GPUs and pods: a second
    exporter of the same GPUs at other values, scraped as job dcgm-exporter, changes none of the rendered
    queries, the adapter rule or the dashboard's GPU panels, which pin the agents' job."""
    agent = await attributed_agent(start_agent, kubelet)
    other = await start_agent("constant:99", gpus=5)  # the same node's GPUs and the same kubelet: same labels
    assert [d.uuid for d in other.state.devices] == [d.uuid for d in agent.state.devices]
    await until(lambda: len(other.state.assignments), what="four GPUs attributed", ok=lambda n: n >= 4)
    jobs = [
        {"job_name": name, "honor_labels": True, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        for name, port in (("gpuscale-agent", agent.metrics_port), ("dcgm-exporter", other.metrics_port))
    ]
    # the stand-in serves what dcgm-exporter serves: its DCGM_* series, none of gpuscale's own
    jobs[1]["metric_relabel_configs"] = [
        {"source_labels": ["__name__"], "regex": "gpuscale_.*|process_.*", "action": "drop"}
    ]

    def check() -> None:
        with run_prometheus(tmp_path, [], scrape_configs=jobs) as prom:
            prom.wait_for("DCGM_FI_DEV_GPU_UTIL", min_series=10)
            assert one_value(prom, query_of(_options())) == pytest.approx(50.0)  # not the 99s
            unpinned = one_value(prom, query_of(_options(agent_job="")))
            assert unpinned == pytest.approx((30 + 50 + 70 + 3 * 99) / 6)  # what pinning prevents
            (rule,) = adapter_values(
                HpaOptions("deployment/llm", "ai", window="5", scrape_interval=1.0, **GPU)
            )[1]["rules"]["custom"]
            q = expand_rule(rule, "ai", [POD_A, POD_B])
            assert per_pod(prom, q, "pod") == {POD_A: pytest.approx(30.0), POD_B: pytest.approx(60.0)}
            variables = {
                "$hostname_label": "Hostname",
                "$node": ".*",
                "$namespace": ".*",
                "$job": "gpuscale-agent",
            }
            per_gpu = prom.wait_for(_panel_expr("GPU utilization per GPU", variables), min_series=5)
            assert sorted(float(r["value"][1]) for r in per_gpu) == [10.0, 30.0, 50.0, 70.0, 90.0]
            assert one_value(prom, _panel_expr("Average GPU utilization", variables)) == pytest.approx(50.0)
            # The dashboard's job variable lists the agents' jobs only: dcgm-exporter serves no gpuscale_agent_*.
            (job_variable,) = [
                v for v in json.loads(DASHBOARD.read_text())["templating"]["list"] if v["name"] == "job"
            ]
            expr = job_variable["query"]["query"].removeprefix("label_values(").removesuffix(", job)")
            assert {r["metric"]["job"] for r in prom.query(expr)} == {"gpuscale-agent"}

    await asyncio.to_thread(check)


async def test_engine_queries_read_the_engines_queue(tmp_path: Path) -> None:
    """What ``render`` writes for the default profile (llm-serving: the engine's waiting requests), run by a
    real Prometheus scraping two mock vLLM engines as a PodMonitor does (the pods' own namespace and pod as
    target labels): the KEDA ``prometheus`` trigger's query returns one series, the total of the engines'
    ``vllm:num_requests_waiting``; the adapter rule, one value per pod, whose sum over the target is what
    the HPA divides."""
    from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine

    clock = [1000.0]
    engines = {
        POD_A: MockEngine(MockEngineConfig(models=("a", "b")), lambda t: 20.0, clock=lambda: clock[0]),
        POD_B: MockEngine(MockEngineConfig(), lambda t: 12.0, clock=lambda: clock[0]),
    }
    clock[0] += 10.0  # 10 s of demand over capacity (8 requests/s a model), then the clock stands still
    servers = {pod: await start_mock_engine(engine) for pod, engine in engines.items()}
    waiting: dict[str, float] = {}
    for pod, engine in engines.items():
        body = engine.exposition()[0].decode()
        waiting[pod] = sum(
            float(line.rsplit(" ", 1)[1])
            for line in body.splitlines()
            if line.startswith("vllm:num_requests_waiting{")
        )
    assert waiting[POD_A] > 0 and waiting[POD_B] > 0
    jobs = [
        {
            "job_name": "vllm",
            "static_configs": [
                {"targets": [f"127.0.0.1:{servers[pod].port}"], "labels": {"namespace": "ai", "pod": pod}}
                for pod in servers
            ],
        }
    ]

    def check() -> None:
        with run_prometheus(tmp_path, [], scrape_configs=jobs) as prom:
            prom.wait_for(
                '{__name__=~"vllm[:_]num_requests_waiting"}', min_series=3, timeout=40
            )  # A: 2 models
            so = scaledobject_documents(ScaledObjectOptions("deployment/llm", "ai", mode="prometheus"))[-1][1]
            (trigger,) = so["spec"]["triggers"]
            assert trigger["metricType"] == "AverageValue" and trigger["metadata"]["threshold"] == "5"
            assert one_value(prom, trigger["metadata"]["query"]) == waiting[POD_A] + waiting[POD_B]
            (rule,) = adapter_values(HpaOptions("deployment/llm", "ai", scrape_interval=1.0))[1]["rules"][
                "custom"
            ]
            assert rule["name"]["as"] == "gpuscale_queue_length"
            # vLLM (and the mock, as it) answers the text format whatever Prometheus asks, so the colon is
            # kept; an exposition negotiated to OpenMetrics by prometheus_client 0.22+ would be stored as
            # vllm_num_requests_waiting (client_python#1177): the rule's pattern matches both
            found = {r["metric"]["__name__"] for r in prom.query(rule["seriesQuery"])}
            assert found == {"vllm:num_requests_waiting"}  # the adapter's discovery finds the series
            for name in ("vllm:num_requests_waiting", "vllm_num_requests_waiting"):
                assert re.fullmatch(rule["name"]["matches"].strip("^$"), name)
            q = expand_rule(rule, "ai", [POD_A, POD_B], series=found.pop())
            assert per_pod(prom, q, "pod") == waiting
            for metric, target in (("requests_in_flight", "8"), ("kv_cache_usage", "80")):
                options = ScaledObjectOptions(
                    "deployment/llm", "ai", mode="prometheus", metric=metric, target_value=target
                )
                assert one_value(prom, query_of(options)) > 0
                (rule,) = adapter_values(
                    HpaOptions("deployment/llm", "ai", metric=metric, target_value=target)
                )[1]["rules"]["custom"]
                (series,) = {r["metric"]["__name__"] for r in prom.query(rule["seriesQuery"])}
                q = expand_rule(rule, "ai", [POD_A, POD_B], series=series)
                assert set(per_pod(prom, q, "pod")) == {POD_A, POD_B}

    try:
        await asyncio.to_thread(check)
    finally:
        for server in servers.values():
            await server.close()


async def test_dashboard_engine_panels_read_the_engines(tmp_path: Path) -> None:
    """The dashboard's engine row over two mock vLLM engines scraped as a PodMonitor does: waiting requests and
    KV-cache fill per pod as each engine serves them, the namespace's TTFT p95 and its requests per second
    (finished, and arriving: finished plus the growth of the queue) from the engines' counters."""
    from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine

    engines = {
        POD_A: MockEngine(MockEngineConfig(models=("a", "b")), lambda t: 20.0),  # 8 requests/s a model
        POD_B: MockEngine(MockEngineConfig(), lambda t: 12.0),  # over its capacity: a queue that grows
    }
    servers = {pod: await start_mock_engine(engine) for pod, engine in engines.items()}
    jobs = [
        {
            "job_name": "vllm",
            "static_configs": [
                {"targets": [f"127.0.0.1:{servers[pod].port}"], "labels": {"namespace": "ai", "pod": pod}}
                for pod in servers
            ],
        }
    ]
    variables = {"$namespace": ".*"}

    def values(title: str, label: str, target: int = 0) -> dict[str, float]:
        (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == title]
        expr: str = panel["targets"][target]["expr"]
        for name, value in variables.items():
            expr = expr.replace(name, value)
        return {r["metric"][label]: float(r["value"][1]) for r in prom.query(expr)}

    def check() -> None:
        until_sync(  # two scrapes of each engine at least: the rates have two points
            lambda: values("Requests per second per namespace: finished and arriving", "namespace"),
            30,
            "requests finished in namespace ai",
            interval=0.5,
            ok=lambda finished: finished.get("ai", 0.0) > 0,
        )
        arriving = values("Requests per second per namespace: finished and arriving", "namespace", 1)
        assert set(arriving) == {"ai"}
        waiting = values("Waiting requests per pod", "pod")
        assert set(waiting) == {POD_A, POD_B} and waiting[POD_B] > 0
        fill = values("KV-cache fill per pod", "pod")
        assert set(fill) == {POD_A, POD_B} and all(0 < v <= 100 for v in fill.values())
        (ttft,) = values("Time to first token p95 per namespace", "namespace").values()
        assert ttft > 0

    with run_prometheus(tmp_path, [], scrape_configs=jobs) as prom:
        try:
            await asyncio.to_thread(check)
        finally:
            for server in servers.values():
                await server.close()
