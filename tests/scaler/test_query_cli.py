"""`gpuscale query` as a subprocess against a running scaler (served by this test's event loop)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import grpc
import pytest

from gpuscale.scaler.server import TlsFiles
from tests.poll import until

from .conftest import Cluster, KedaClient

# Runs `gpuscale`, with `query` registered even before the lead adds it to COMMANDS.
LAUNCH = (
    "import sys, gpuscale.cli as c\n"
    "c.COMMANDS = tuple(dict.fromkeys((*c.COMMANDS, 'query')))\n"
    "sys.exit(c.main(sys.argv[1:]))\n"
)
LLM = [
    "-m",
    "scope=workload",
    "-m",
    "podSelector=app=llm",
    "-m",
    "metric=gpu_utilization",
    "-m",
    "aggregation=avg",
    "-m",
    "targetValue=60",
]


async def gpuscale(*args: str, timeout: float = 20) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCH, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def two_node_scaler(cluster: Cluster) -> int:
    await cluster.node("node-a", "constant:40,constant:10", gpus=2)
    await cluster.node("node-b", "constant:80", gpus=1)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    cluster.add_pod("default", "llm-1", "node-b", [0], {"app": "llm"})
    cluster.add_pod("default", "other-0", "node-a", [1], {"app": "other"})
    scaler = await cluster.scaler(kube=False)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{scaler.grpc_port}") as ch:
        client = KedaClient(ch)
        md = {"podSelector": "app=llm", "targetValue": "60"}

        async def both_pods() -> bool:
            try:
                return await client.value(md) == 120
            except grpc.aio.AioRpcError:
                return False

        await until(both_pods, what="both pods' GPUs known")
    return scaler.grpc_port


async def test_query_prints_spec_value_and_activity(cluster: Cluster) -> None:
    port = await two_node_scaler(cluster)
    address = f"127.0.0.1:{port}"
    code, out, err = await gpuscale(
        "query", "--address", address, "--name", "llm", "--namespace", "default", *LLM
    )
    assert (code, err) == (0, "")
    assert out == (
        "GetMetricSpec:\n"
        "  gpuscale-gpu-utilization-avg  target 60 (int 60)\n"
        "GetMetrics:\n"
        "  gpuscale-gpu-utilization-avg  value 120 (int 120)\n"  # 2 pods x avg(40, 80)
        "IsActive: true\n"
    )
    code, out, _ = await gpuscale("query", "--address", address, "--name", "llm", "--json", *LLM)
    assert code == 0
    assert json.loads(out) == {
        "metricSpecs": [
            {"metricName": "gpuscale-gpu-utilization-avg", "targetSize": 60, "targetSizeFloat": 60.0}
        ],
        "metrics": [
            {"metricName": "gpuscale-gpu-utilization-avg", "metricValue": 120, "metricValueFloat": 120.0}
        ],
        "isActive": True,
    }


async def test_query_errors_exit_1_and_usage_errors_exit_2(cluster: Cluster) -> None:
    scaler = await cluster.scaler(kube=False, agents=())
    address = f"127.0.0.1:{scaler.grpc_port}"
    code, out, err = await gpuscale(
        "query", "--address", address, "--name", "llm", "-m", "aggregation=mean", "-m", "targetValue=60"
    )
    assert code == 1 and out == ""
    assert err == (
        'gpuscale query: GetMetricSpec: INVALID_ARGUMENT: invalid trigger metadata: parameter "aggregation" '
        'value "mean" must be one of [avg, max, min, p50, p90, p95, p99, sum]\n'
    )
    code, _, err = await gpuscale(
        "query", "--address", address, "--name", "llm", "-m", "targetValue=60", "-m", "podSelector=app=llm"
    )
    assert code == 1 and "GetMetrics: UNAVAILABLE: no agent has sent its state yet" in err
    code, _, err = await gpuscale("query", "--address", address, "--name", "llm", "-m", "targetValue")
    assert code == 2 and '-m "targetValue" must be KEY=VALUE' in err


async def test_query_stream_follows_stream_is_active(cluster: Cluster) -> None:
    port = await two_node_scaler(cluster)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LAUNCH,
        "query",
        "--address",
        f"127.0.0.1:{port}",
        "--name",
        "llm",
        "--json",
        "--stream",
        *LLM,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        poll = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
        assert poll["isActive"] is True
        streamed = json.loads(await asyncio.wait_for(proc.stdout.readline(), 10))
        assert streamed["isActive"] is True
    finally:
        proc.terminate()
        await proc.wait()


async def test_query_over_mutual_tls(cluster: Cluster, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from .certs import make_pki

    pki = make_pki(tmp_path)
    scaler = await cluster.scaler(
        kube=False, agents=(), tls=TlsFiles(pki.server_cert, pki.server_key, client_ca=pki.ca)
    )
    code, _, err = await gpuscale(
        "query",
        "--address",
        f"127.0.0.1:{scaler.grpc_port}",
        "--name",
        "llm",
        "-m",
        "targetValue=60",
        "-m",
        "podSelector=app=llm",
        "--tls-ca",
        str(pki.ca),
        "--tls-cert",
        str(pki.client_cert),
        "--tls-key",
        str(pki.client_key),
    )
    # the handshake succeeded: the spec answered, then GetMetrics said there is no data yet
    assert code == 1 and "GetMetrics: UNAVAILABLE: no agent has sent its state yet" in err, err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--timeout", "0"], '--timeout "0" must be greater than 0'),
        (["--timeout=-2"], '--timeout "-2" must be greater than 0'),
        (["--timeout", "soon"], '--timeout "soon" must be a number of seconds'),
        (
            ["--namespace", "Team_A"],
            '--namespace "Team_A" is not a namespace name: at most 63 lowercase letters, '
            "digits and '-', starting and ending with a letter or digit",
        ),
        (["--namespace", "a" * 64], f'--namespace "{"a" * 64}" is not a namespace name'),
        (["--name", "LLM"], '--name "LLM" is not a ScaledObject name'),
        (
            ["-m", "targetValue=60", "-m", "targetValue=80"],
            '-m "targetValue" is given twice ("60" and "80"); a trigger has one value per key',
        ),
        (["-m", "metric=", "-m", "metric=power"], '-m "metric" is given twice ("" and "power")'),
    ],
)
async def test_bad_flags_are_one_line_and_exit_2(flags: list[str], message: str) -> None:
    argv = ["query", "--address", "127.0.0.1:1", "--name", "llm", *flags]
    code, out, err = await gpuscale(*argv)
    assert (code, out) == (2, ""), err
    (line,) = err.splitlines()
    assert line.startswith(f"gpuscale: error: {message}"), line


async def test_a_node_scope_query_of_an_agent_without_the_external_scaler_says_what_to_start(
    cluster: Cluster,
) -> None:
    node = await cluster.node("node-a", "constant:40")
    code, out, err = await gpuscale(
        "query", "--address", node.address, "--name", "llm", "-m", "scope=node", "-m", "targetValue=60"
    )
    assert (code, out) == (1, "")
    assert err == (
        f"gpuscale query: GetMetricSpec: UNIMPLEMENTED: {node.address} does not serve KEDA's externalscaler API: "
        "an agent answers (scope node) only when started with --serve-external-scaler "
        "(GPUSCALE_SERVE_EXTERNAL_SCALER=true, chart: agent.serveExternalScaler=true); for scope workload or "
        "pool, query the scaler (gpuscale scaler, port 6001)\n"
    )
    # And started so (the wiring of --serve-external-scaler), the same query answers.
    from gpuscale.agent.service import Agent
    from gpuscale.agent.settings import AgentSettings
    from gpuscale.backends.mock import MockBackend, MockConfig
    from gpuscale.backends.patterns import parse_patterns
    from gpuscale.scaler.local import add_node_scope

    settings = AgentSettings(
        node_name="node-b",
        interval=0.1,
        grpc_address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        kubelet_socket=Path("/nonexistent/kubelet.sock"),
        serve_external_scaler=True,
    )
    served = Agent(settings, MockBackend(MockConfig(gpus=1, patterns=parse_patterns("constant:40"))))
    served.extra_services.append(
        lambda server: add_node_scope(server, served.state, registry=served.registry)  # type: ignore[arg-type]
    )  # type: ignore[arg-type]
    await served.start()
    try:

        async def answers() -> bool:
            code, out, _ = await gpuscale(
                "query",
                "--address",
                f"127.0.0.1:{served.grpc_port}",
                "--name",
                "llm",
                "-m",
                "scope=node",
                "-m",
                "targetValue=60",
                "-m",
                "window=0",
            )
            return code == 0 and "gpuscale-gpu-utilization-avg-node  value 40 (int 40)" in out

        await until(answers, what="the agent answers scope node")
    finally:
        await served.stop()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (80 * 2**20, "80 MiB"),
        (40 * 2**30, "40 GiB"),
        (42949672960.4, "40 GiB"),
        (1.5 * 2**40, "1.5 TiB"),
        (79.6 * 2**30, "79.6 GiB"),
    ],
)
def test_format_bytes(value: float, text: str) -> None:
    from gpuscale.cli.query import format_bytes

    assert format_bytes(value) == text


async def test_memory_targets_and_values_print_as_bytes_people_read(cluster: Cluster) -> None:
    port = await two_node_scaler(cluster)
    md = [
        "-m",
        "podSelector=app=llm",
        "-m",
        "metric=memory_used",
        "-m",
        "aggregation=max",
        "-m",
        "targetValue=40Gi",
    ]
    code, out, err = await gpuscale("query", "--address", f"127.0.0.1:{port}", "--name", "llm", *md)
    assert code == 0, err
    code, js, _ = await gpuscale("query", "--address", f"127.0.0.1:{port}", "--name", "llm", "--json", *md)
    (value,) = json.loads(js)["metrics"]
    assert "  gpuscale-memory-used-max  target 40 GiB (int 42949672960)\n" in out
    from gpuscale.cli.query import format_bytes

    shown = format_bytes(value["metricValueFloat"])
    assert shown.endswith(" GiB") and "e+" not in out
    assert f"  gpuscale-memory-used-max  value {shown} (int {value['metricValue']})\n" in out
