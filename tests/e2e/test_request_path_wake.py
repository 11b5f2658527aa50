"""The request path wakes a workload from zero to the replicas its demand needs: on the real control plane and
KEDA, a stand-in Envoy (``tests/scaler/pathrig.py``'s exposition, served on the host) behind a selector-less
Service (read because the tier's scaler runs with ``--request-path-manual-endpoints``, ``GpuStack``) counts
35 requests/s arriving for cluster ``llm`` and 30 held; the ScaledObject ``gpuscale render``
writes with ``--request-path`` takes Deployment ``llm`` from 0 to ceil((35 + 30 / 60) / 10) = 4. With
nothing arriving it stays at 0; without the request path nothing could wake it (the pods' engines say
nothing at zero replicas).

The woken pods are held loading their model (``ModelLoading``): kwok makes a pod Ready at once, with no
engine behind it, which a model server is not for minutes.

No climb 1 -> 2 -> 3 -> 4, one step per sync: a counter that stood still and then moved is read from when it
moved (``scaling.requestpath``), so a step from idle to 35/s reads 35 as soon as two readings have it; at
this tier's 1 s HPA syncs the first sync after the wake may see only the first, partial one (0 -> 1 -> 3 -> 4
is allowed, one count between 1 and the demand's, no more).
"""

from __future__ import annotations

import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuscale.controlplane.client import KubeClient, wait_for
from gpuscale.controlplane.stack import GpuStack
from gpuscale.scaling.requestpath import RATE_WINDOW_S
from tests.scaler.pathrig import ENVOY_TEXT, Gateway

from .helpers import (
    ModelLoading,
    condition,
    delete_namespace,
    deployment,
    host_ipv4,
    make_namespace,
    render_scaled_object,
    scaled_object,
    selectorless_service,
    sleep_watching,
    spec_replicas,
    wait_replicas,
)

ARRIVING = 35.0  # requests/s
HELD = 30.0  # drained within requestPathDrainSeconds (60): 0.5 requests/s more
TARGET = 10  # requests/s per replica (request_rate's targetValue)
HPA_SYNC_S = 1.0  # the tier's kube-controller-manager (conftest.py)


class Climbed(AssertionError):
    """The wake asked for fewer replicas than the demand's before asking for them."""


class StandInEnvoy:
    """pathrig's ``Gateway`` exposition served over HTTP on ``host`` at ``/stats/prometheus``; its arrivals
    counter follows the clock (``arrive``: so many requests/s from now on), so a read at any instant has
    every request up to it, as Envoy's counter does; ``reads`` counts the scrapes."""

    def __init__(self, host: str) -> None:
        self.gateway = Gateway()
        self.reads = 0
        self._lock = threading.Lock()
        self._rate = 0.0
        self._since = time.monotonic()
        envoy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/stats/prometheus":
                    self.send_error(404)
                    return
                body = envoy.body().encode()
                self.send_response(200)
                self.send_header("Content-Type", ENVOY_TEXT)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the scaler reads every second

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="stand-in envoy", daemon=True)
        self._thread.start()

    def _counted(self, now: float) -> float:
        return self.gateway.arrived["llm"] + math.floor(self._rate * (now - self._since))

    def arrive(self, per_second: float, held: float) -> None:
        with self._lock:
            now = time.monotonic()
            self.gateway.arrived["llm"] = self._counted(now)
            self._rate, self._since = per_second, now
            self.gateway.held["llm"] = held

    def body(self) -> str:
        with self._lock:
            self.reads += 1
            gateway = Gateway(arrived={"llm": self._counted(time.monotonic())}, held=dict(self.gateway.held))
        return gateway.body()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.mark.timeout(180)
def test_the_request_path_wakes_the_workload_from_zero_to_its_demand(gpus: GpuStack) -> None:
    host = host_ipv4()
    if host is None:
        pytest.skip("the host has no non-loopback IPv4 address for the stand-in gateway's EndpointSlice")
    client = gpus.plane.client
    envoy = StandInEnvoy(host)
    ns = make_namespace(client, "e2e-path")
    try:
        deployment(client, ns, "llm", replicas=0)
        selectorless_service(client, ns, "gateway", ("metrics", 9090), host, envoy.port)
        so = render_scaled_object(
            "--mode", "external-push", "--target", "deployment/llm", "--namespace", ns,
            "--scaler-address", gpus.scaler_address, "--metric", "request_rate", "--target-value", str(TARGET),
            "--min-replicas", "0", "--max-replicas", "6", "--polling-interval", "2", "--cooldown-period", "5",
            "--request-path", "gateway:9090/stats/prometheus", "--request-path-format", "envoy",
            "--request-path-match", "llm",
        )  # fmt: skip
        assert so["spec"]["triggers"][0]["metadata"]["requestPath"] == "gateway:9090/stats/prometheus"
        client.apply(so)

        # nothing arriving: the scaler reads the gateway, the ScaledObject is ready and inactive, no wake
        wait_for("the scaler reads the stand-in gateway", lambda: envoy.reads >= 2 or None, 30)
        wait_for(
            "the ScaledObject Ready",
            lambda: True if condition(scaled_object(client, ns, "llm"), "Ready") == "True" else None,
            30,
        )
        sleep_watching(6, lambda: _at_zero(client, ns))
        assert condition(scaled_object(client, ns, "llm"), "Active") == "False"

        with ModelLoading(client, ns, "llm") as loading:
            envoy.arrive(ARRIVING, HELD)
            started = time.monotonic()
            need = math.ceil((ARRIVING + HELD / 60) / TARGET)  # 4
            timeline: list[tuple[float, int]] = [(started, 0)]
            try:
                wait_replicas(
                    client, ns, "llm", lambda n: n >= need, 60, what=f">= {need}", timeline=timeline
                )
            finally:
                print("\nspec.replicas after the first arrivals:")
                print("\n".join(f"  +{t - started:5.1f} s  {n}" for t, n in timeline))
            woken = next(t for t, n in timeline if n > 0)
            assert woken - started <= 10, (
                f"woken {woken - started:.1f} s after the first arrivals: {timeline}"
            )
            # the rate window fills, then an HPA sync or two; slack for a loaded machine
            took = timeline[-1][0] - woken
            assert took <= RATE_WINDOW_S + 10 * HPA_SYNC_S, f"{need} only {took:.1f} s after the wake"
            sleep_watching(3, lambda: _at(client, ns, need))  # the demand's count, no more
            assert condition(scaled_object(client, ns, "llm"), "Active") == "True"
            assert loading.loading, "no pod was held loading"

        # KEDA's activation to 1, then the HPA's first syncs ask for more: 2 syncs, and a poll's slack
        t_out, out = next((t, n) for t, n in timeline if n > 1)
        assert t_out - woken <= 2 * HPA_SYNC_S + 1.0, f"{out} only {t_out - woken:.1f} s after the wake"
        # no climb one step per sync: at most one count between 1 and the demand's. The HPA syncs every second
        # here, so its first sync after the wake may come when one reading of the request path has the new
        # arrivals, and that one only partly (they began within its second): the next sync has the rate
        between = sorted({n for _, n in timeline if 1 < n < need})
        if len(between) > 1:
            raise Climbed(f"0 -> 1 -> {between} -> {need}: {[n for _, n in timeline]}")
    finally:
        delete_namespace(client, ns)
        envoy.close()


def _at_zero(client: KubeClient, ns: str) -> None:
    n = spec_replicas(client, ns, "llm")
    assert n == 0, f"woken to {n} with nothing arriving"


def _at(client: KubeClient, ns: str, need: int) -> None:
    n = spec_replicas(client, ns, "llm")
    assert n == need, f"{n} replicas for a demand of {need}"
