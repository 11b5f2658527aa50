"""``gpuscale query``: call an external scaler the way KEDA does and show the answers.

KEDA's poll: ``GetMetricSpec``, then for each spec ``GetMetrics`` (with the spec's metric name) and
``IsActive``. ``--stream`` then follows ``StreamIsActive`` (what an ``external-push`` trigger opens). A failed
call prints its gRPC code and message and exits 1; bad flags exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import grpc

from .._proto import externalscaler_pb2 as pb
from .._proto import externalscaler_pb2_grpc as pb_grpc
from ..errors import UsageError
from ..netaddr import join_host_port, parse_host_port
from ..scaler.wire import scaled_object_ref
from ._options import positive_seconds

__all__ = ["format_bytes", "parse_metadata_args", "register"]

# Kubernetes object names (apimachinery's validation): a namespace is a DNS-1123 label, a ScaledObject's name
# a DNS-1123 subdomain.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "query",
        help="call an external scaler like KEDA does and print its answers",
        description="Call an external scaler like KEDA does (GetMetricSpec, then GetMetrics with the spec's "
        "metric name, and IsActive) and print the answers.",
    )
    p.add_argument("--address", required=True, help="HOST:PORT of the scaler (or of an agent)")
    p.add_argument("--name", required=True, help="the ScaledObject's name")
    p.add_argument("--namespace", default="default", help="the ScaledObject's namespace (default: default)")
    p.add_argument(
        "-m",
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a trigger metadata entry; repeat for more",
    )
    p.add_argument("--stream", action="store_true", help="then follow StreamIsActive until Ctrl-C")
    p.add_argument(
        "--explain",
        metavar="HOST:PORT",
        help="instead, ask the scaler's HTTP port (its --metrics-address, 9401) which pods, nodes and GPUs "
        "the ScaledObject resolves to, each GPU's smoothed value and sample age, which were left out and why",
    )
    p.add_argument("--json", action="store_true", help="print JSON (with --stream: one object per line)")
    p.add_argument("--timeout", default="5", help="seconds per call, more than 0 (default 5)")
    t = p.add_argument_group("TLS")
    t.add_argument("--tls-ca", help="PEM CA bundle to verify the server (enables TLS)")
    t.add_argument("--tls-cert", help="PEM client certificate, for mutual TLS (enables TLS)")
    t.add_argument("--tls-key", help="PEM client key, for mutual TLS")
    t.add_argument("--tls-server-name", help="expected name in the server certificate (default: the host)")
    p.set_defaults(func=run)


def parse_metadata_args(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f'-m "{item}" must be KEY=VALUE, e.g. -m metric=gpu_utilization')
        key = key.strip()
        if key in out:
            raise UsageError(
                f'-m "{key}" is given twice ("{out[key]}" and "{value}"); a trigger has one value per key'
            )
        out[key] = value
    return out


def check_names(name: str, namespace: str) -> None:
    """``--name`` and ``--namespace`` as Kubernetes would accept them for a ScaledObject."""
    if len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        raise UsageError(
            f'--namespace "{namespace}" is not a namespace name: at most 63 lowercase letters, digits and '
            "'-', starting and ending with a letter or digit"
        )
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise UsageError(
            f"--name \"{name}\" is not a ScaledObject name: at most 253 lowercase letters, digits, '-' and "
            "'.', starting and ending with a letter or digit"
        )


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(value: float) -> str:
    """``42949672960`` → ``40 GiB``; three significant digits, binary units as the metadata takes them."""
    unit = 0
    while abs(value) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.3g} {_BYTE_UNITS[unit]}"


def _is_bytes(metric_name: str) -> bool:
    """Whether a metric of the scaler's counts bytes: ``memory_used`` (``gpuscale-memory-used-<agg>…``)."""
    return metric_name.startswith("gpuscale-memory-used-") and not metric_name.startswith(
        "gpuscale-memory-used-percent-"
    )


def _number(metric_name: str, value: float) -> str:
    return format_bytes(value) if _is_bytes(metric_name) else f"{value:g}"


def _read(path: str | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f'{flag} "{path}": {e.strerror or e}') from None


def _channel(args: argparse.Namespace) -> grpc.Channel:
    parse_host_port(args.address, "--address")
    if not (args.tls_ca or args.tls_cert or args.tls_key):
        return grpc.insecure_channel(args.address)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("mutual TLS needs both --tls-cert and --tls-key")
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(args.tls_ca, "--tls-ca"),
        private_key=_read(args.tls_key, "--tls-key"),
        certificate_chain=_read(args.tls_cert, "--tls-cert"),
    )
    options = []
    if args.tls_server_name:
        options.append(("grpc.ssl_target_name_override", args.tls_server_name))
    return grpc.secure_channel(args.address, creds, options=options)


_NOT_SERVED = (
    "{address} does not serve KEDA's externalscaler API: an agent answers (scope node) only when started "
    "with --serve-external-scaler (GPUSCALE_SERVE_EXTERNAL_SCALER=true, chart: agent.serveExternalScaler="
    "true); for scope workload or pool, query the scaler (gpuscale scaler, port 6001)"
)


class _CallFailed(Exception):
    def __init__(self, method: str, error: grpc.RpcError, address: str = "the server") -> None:
        code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        if code == grpc.StatusCode.UNIMPLEMENTED:
            details = _NOT_SERVED.format(address=address)
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code.name
        self.details = details or ""


def _spec_json(s: pb.MetricSpec) -> dict[str, Any]:
    return {"metricName": s.metricName, "targetSize": s.targetSize, "targetSizeFloat": s.targetSizeFloat}


def _value_json(v: pb.MetricValue) -> dict[str, Any]:
    return {"metricName": v.metricName, "metricValue": v.metricValue, "metricValueFloat": v.metricValueFloat}


def poll(
    stub: pb_grpc.ExternalScalerStub, ref: pb.ScaledObjectRef, timeout: float, address: str = "the server"
) -> dict[str, Any]:
    """One KEDA poll; raise ``_CallFailed`` at the first failed call."""
    try:
        spec = stub.GetMetricSpec(ref, timeout=timeout)
    except grpc.RpcError as e:
        raise _CallFailed("GetMetricSpec", e, address) from None
    metrics: list[dict[str, Any]] = []
    for s in spec.metricSpecs:
        try:
            values = stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName=s.metricName), timeout=timeout
            )
        except grpc.RpcError as e:
            raise _CallFailed("GetMetrics", e) from None
        metrics.extend(_value_json(v) for v in values.metricValues)
    try:
        active = stub.IsActive(ref, timeout=timeout).result
    except grpc.RpcError as e:
        raise _CallFailed("IsActive", e) from None
    return {"metricSpecs": [_spec_json(s) for s in spec.metricSpecs], "metrics": metrics, "isActive": active}


def _print_poll(result: Mapping[str, Any]) -> None:
    print("GetMetricSpec:")
    for s in result["metricSpecs"]:
        target = _number(s["metricName"], s["targetSizeFloat"])
        print(f"  {s['metricName']}  target {target} (int {s['targetSize']})")
    print("GetMetrics:")
    for v in result["metrics"]:
        value = _number(v["metricName"], v["metricValueFloat"])
        print(f"  {v['metricName']}  value {value} (int {v['metricValue']})")
    print(f"IsActive: {'true' if result['isActive'] else 'false'}")


def _stream(stub: pb_grpc.ExternalScalerStub, ref: pb.ScaledObjectRef, as_json: bool) -> None:
    if not as_json:
        print("StreamIsActive: (Ctrl-C to stop)", flush=True)
    try:
        for msg in stub.StreamIsActive(ref):
            stamp = time.strftime("%H:%M:%S")
            if as_json:
                print(json.dumps({"time": time.time(), "isActive": msg.result}), flush=True)
            else:
                print(f"  {stamp}  active={'true' if msg.result else 'false'}", flush=True)
    except grpc.RpcError as e:
        raise _CallFailed("StreamIsActive", e) from None


def explain(
    address: str, name: str, namespace: str, metadata: dict[str, str], timeout: float
) -> dict[str, Any]:
    """``GET /explain`` on the scaler's HTTP port."""
    host, port = parse_host_port(address, "--explain")
    query = urllib.parse.urlencode(
        [("name", name), ("namespace", namespace), *(("m", f"{k}={v}") for k, v in metadata.items())]
    )
    url = f"http://{join_host_port(host, port)}/explain?{query}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return cast(dict[str, Any], json.loads(response.read()))
    except (OSError, ValueError) as e:
        raise UsageError(
            f"--explain {address}: cannot ask the scaler there ({e}); give its --metrics-address"
        ) from e


def _print_explain(e: dict[str, Any]) -> None:
    print(f"ScaledObject {e.get('scaledObject')}")
    q = e.get("query") or {}
    scope = q.get("scope")
    if scope == "workload":
        print(f"  pods: {q.get('podSelector') or '-'} in {q.get('namespace') or '-'} (scope workload)")
    elif scope == "pool":
        print(f"  nodes: {q.get('nodeSelector') or 'every node'} (scope pool)")
    elif scope:
        print(f"  GPUs: every GPU of the node (scope {scope})")
    for p in e.get("gpuPods", []):
        ready = p.get("ready")
        took = p.get("scheduledToReadySeconds")
        state = "readiness not known" if ready is None else "starting (not Ready)" if not ready else "Ready"
        if ready and took is not None:
            state += f", {took:g} s after it was scheduled"
        print(
            f"  pod {p['pod']} on {p['node']}: {state}"
            f"{'' if p['agentConnected'] else ' (its agent is not connected)'}"
        )
    if "coldStartSeconds" in e:
        cold = e["coldStartSeconds"]
        print(
            "  cold start: not learned yet (no pod seen becoming Ready)"
            if cold is None
            else f"  cold start: {cold:g} s (scheduled to Ready, the median of its last pods)"
        )
    if "replicaCapacity" in e:
        rate = e["replicaCapacity"]
        print(
            "  a replica serves: not learned yet (no Ready pod had requests waiting through a window)"
            if rate is None
            else f"  a replica serves: {rate:.3g} requests/s (learned while requests waited on it)"
        )
    for g in e.get("gpus", []):
        age = g.get("newestSampleAge")
        gpu = f"GPU {g['uuid']}" + (f" of {g['pod']}" if g.get("pod") else "")  # pool scope: no pod
        if "leftOut" in g:
            print(f"  {gpu}: left out: {g['leftOut']}")
        elif "value" in g:
            print(f"  {gpu}: {g['value']:g} over {g['samples']} samples, newest {age} s old")
    for x in e.get("engines", []):
        print(
            f"  engine of {x['pod']}: {x['readings']} readings"
            + (f", missing: {x['missing']}" if x["missing"] else "")
        )
    _print_request_path(e.get("requestPath"))
    if "answer" in e:
        a = e["answer"]
        missing = f", {a['missingPods']} missing: {', '.join(a['missingWhere'])}" if a["missingPods"] else ""
        loading = f", {a['loadingPods']} starting" if a.get("loadingPods") else ""
        decided = ""
        if a.get("decided"):
            present = a.get("present")
            before = f" (present value {present:g})" if isinstance(present, int | float) else ""
            decided = f"; {a['decided']}{before}"
        if scope == "workload":
            how = f"aggregate {a['aggregate']:g} x {a['pods']} pods{missing}{loading}{decided}"
        else:  # the aggregate itself: no pods to multiply by
            aggregation = (e.get("metadata") or {}).get("aggregation", "aggregate")
            how = f"{aggregation} over {a.get('gpus', 0)} GPUs{decided}"
        print(f"  answer: value {a['value']:g} ({how}), {'active' if a['active'] else 'inactive'}")
    if "error" in e:
        print(f"  answer: {e['error']['code']}: {e['error']['message']}")


def _print_request_path(rp: dict[str, Any] | None) -> None:
    """The ``requestPath`` entry of an explanation: the source, its endpoints, the newest reading, why it is
    missing."""
    if not rp:
        return
    if "error" in rp:
        print(f"  request path: {rp['error']['code']}: {rp['error']['message']}")
        return
    endpoints = ", ".join(rp.get("endpoints") or []) or "none ready"
    print(f"  request path {rp['source']}: endpoints {endpoints}")
    if rp.get("lastReadingAge") is not None:

        def shown(v: object, unit: str = "") -> str:
            return "-" if not isinstance(v, int | float) else f"{v:g}{unit}"

        age, arrived, held = rp["lastReadingAge"], rp.get("arrived"), rp.get("held")
        print(
            f"    newest reading {shown(age, ' s')} old: arrived {shown(arrived)}, held {shown(held)}; "
            f"rate {shown(rp.get('rate'), ' req/s')}, demand {shown(rp.get('demand'), ' req/s')}"
        )
    if rp.get("missing"):
        print(f"    missing (not counted, never as 0): {rp['missing']}")


def run(args: argparse.Namespace) -> int:
    timeout = positive_seconds(args.timeout, "--timeout")
    check_names(args.name, args.namespace)
    metadata = parse_metadata_args(args.metadata)
    if args.explain:
        result = explain(args.explain, args.name, args.namespace, metadata, timeout)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            _print_explain(result)
        return 0
    ref = scaled_object_ref(args.name, args.namespace, metadata)
    with _channel(args) as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        try:
            result = poll(stub, ref, timeout, args.address)
            if args.json:
                print(json.dumps(result, indent=None if args.stream else 2), flush=True)
            else:
                _print_poll(result)
            if args.stream:
                _stream(stub, ref, args.json)
        except _CallFailed as e:
            if args.json:
                print(json.dumps({"error": {"method": e.method, "code": e.code, "message": e.details}}))
            print(f"gpuscale query: {e}", file=sys.stderr)
            return 1
    return 0
