"""`gpuscale query` as a subprocess against a running scaler (served by this test's event loop)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import grpc
import pytest

from gpuscale.scaler.server import TlsFiles

from .conftest import Cluster, KedaClient, until

# Runs `gpuscale`, with `query` registered even before the lead adds it to COMMANDS.
LAUNCH = (
    "import sys, gpuscale.cli as c\n"
    "c.COMMANDS = tuple(dict.fromkeys((*c.COMMANDS, 'query')))\n"
    "sys.exit(c.main(sys.argv[1:]))\n"
)
LLM = [
    "-m", "scope=workload", "-m", "podSelector=app=llm", "-m", "metric=gpu_utilization",
    "-m", "aggregation=avg", "-m", "targetValue=60",
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
    code, out, err = await gpuscale("query", "--address", address, "--name", "llm", "--namespace", "default", *LLM)
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
        "metricSpecs": [{"metricName": "gpuscale-gpu-utilization-avg", "targetSize": 60, "targetSizeFloat": 60.0}],
        "metrics": [{"metricName": "gpuscale-gpu-utilization-avg", "metricValue": 120, "metricValueFloat": 120.0}],
        "isActive": True,
    }


async def test_query_errors_exit_1_and_usage_errors_exit_2(cluster: Cluster) -> None:
    scaler = await cluster.scaler(kube=False, agents=())
    address = f"127.0.0.1:{scaler.grpc_port}"
    code, out, err = await gpuscale("query", "--address", address, "--name", "llm", "-m", "aggregation=mean",
                                    "-m", "targetValue=60")
    assert code == 1 and out == ""
    assert err == (
        'gpuscale query: GetMetricSpec: INVALID_ARGUMENT: invalid trigger metadata: parameter "aggregation" '
        'value "mean" must be one of [avg, max, min, p50, p90, p95, p99, sum]\n'
    )
    code, _, err = await gpuscale("query", "--address", address, "--name", "llm", "-m", "targetValue=60",
                                  "-m", "podSelector=app=llm")
    assert code == 1 and "GetMetrics: UNAVAILABLE: no agent has sent its state yet" in err
    code, _, err = await gpuscale("query", "--address", address, "--name", "llm", "-m", "targetValue")
    assert code == 2 and '-m "targetValue" must be KEY=VALUE' in err


async def test_query_stream_follows_stream_is_active(cluster: Cluster) -> None:
    port = await two_node_scaler(cluster)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCH, "query", "--address", f"127.0.0.1:{port}", "--name", "llm", "--json",
        "--stream", *LLM, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
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
        "query", "--address", f"127.0.0.1:{scaler.grpc_port}", "--name", "llm", "-m", "targetValue=60", "-m", "podSelector=app=llm",
        "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key),
    )
    # the handshake succeeded: the spec answered, then GetMetrics said there is no data yet
    assert code == 1 and "GetMetrics: UNAVAILABLE: no agent has sent its state yet" in err, err
