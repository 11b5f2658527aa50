"""``gpuscale scaler``: the cluster scaler KEDA talks to (a Deployment, 2+ replicas)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal

from .. import lifecycle
from ..errors import UsageError
from ..netaddr import parse_host_port
from ..scaler.ingest import MAX_WORKERS
from ..scaler.requestpath import PathSettings
from ..scaler.server import Scaler, ScalerSettings
from ..scaler.subscriber import SubscriberSettings
from ..scaling.profiles import ProfileSet
from ._options import (
    add_server_arguments,
    add_server_tls_arguments,
    check_pem,
    check_server_arguments,
    count_in_range,
    env,
    env_flag,
    existing_file,
    kubeconfig_errors,
    kubeconfig_from_args,
    positive_seconds,
    profiles_from_option,
    server_tls_from_args,
)

__all__ = ["register", "request_path_namespaces", "settings_from_args"]

log = logging.getLogger(__name__)

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "scaler",
        help="run the cluster scaler: follow every agent, answer KEDA's external scaler calls",
        description="Run the cluster scaler: follow every agent's Watch stream and answer KEDA's "
        "externalscaler.ExternalScaler calls for workloads (scope workload) and node pools (scope pool). "
        "Every flag also reads GPUSCALE_<FLAG> (--kubeconfig: GPUSCALE_KUBECONFIG_PATH).",
    )
    _agent_arguments(p)
    add_server_arguments(p, grpc_port=6001, metrics_port=9401, grpc_serves="ExternalScaler")
    p.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG_PATH"),
        help="kubeconfig for the Kubernetes API (ScaledObject → target → pod selector); default: the "
        "in-cluster configuration in a pod, else none (then workload scope needs podSelector)",
    )
    p.add_argument("--profiles", default=env("PROFILES"), help="YAML file of more trigger profiles")
    _request_path_arguments(p)
    add_server_tls_arguments(p, "TLS (between KEDA and the scaler)", "clients (KEDA)")
    _agent_tls_arguments(p)
    p.set_defaults(func=run)


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    """Where the agents are, how long their samples and their nodes are kept, and who reads their streams."""
    a = p.add_argument_group("agents")
    a.add_argument(
        "--agents",
        default=env("AGENTS", ""),
        help="agents' HOST:PORT, comma-separated",
    )
    a.add_argument(
        "--agents-dns",
        default=env("AGENTS_DNS"),
        metavar="NAME:PORT",
        help="DNS name of the agents' headless Service and their gRPC port, resolved again every "
        "--dns-interval seconds (e.g. gpuscale-agent.gpuscale.svc:6000)",
    )
    a.add_argument(
        "--dns-interval", default=env("DNS_INTERVAL", "5"), help="seconds between DNS lookups (default 5)"
    )
    a.add_argument(
        "--history",
        default=env("HISTORY", "120"),
        help="seconds of samples kept per GPU; the longest staleAfter a trigger may use (default 120)",
    )
    a.add_argument(
        "--forget-after",
        default=env("FORGET_AFTER", "600"),
        help="seconds after which a node whose agent is gone is forgotten; its GPU pods stay missing pods of "
        "their workloads for as long again (default 600)",
    )
    a.add_argument(
        "--ready-grace",
        default=env("READY_GRACE", "10"),
        help="seconds after start within which every discovered agent is waited for: until then, or until "
        "all have sent their complete state, calls answer UNAVAILABLE and /readyz is not ready (default 10)",
    )
    a.add_argument(
        "--ingest-workers",
        default=None,  # GPUSCALE_INGEST_WORKERS is read in settings_from_args, to name it in an error
        help="read the agents' streams in this many child processes, leaving the main process's event loop "
        "to KEDA's calls (default 0: in the main process; 1 or more from a few hundred nodes, see "
        f"docs/performance.md; at most {MAX_WORKERS})",
    )


def _request_path_arguments(p: argparse.ArgumentParser) -> None:
    """The request path (trigger key ``requestPath``): which Services may be read, and how often."""
    r = p.add_argument_group(
        "request path (trigger key requestPath: a gateway's metrics, read by the scaler)"
    )
    r.add_argument(
        "--request-path-namespaces",
        default=env("REQUEST_PATH_NAMESPACES", ""),
        metavar="NS,...",
        help="namespaces whose Services a ScaledObject of another namespace may name in requestPath "
        "(namespace/name:port[/path]); a ScaledObject's own namespace is always allowed (default: none)",
    )
    r.add_argument(
        "--request-path-manual-endpoints",
        action="store_true",
        default=None,
        help="also read a requestPath Service without a selector, whose EndpointSlices are written by hand "
        "and can name any address: by default such a Service is refused, and of a Service with a selector "
        "only the endpoints that are its pods are read (GPUSCALE_REQUEST_PATH_MANUAL_ENDPOINTS: true/false)",
    )
    r.add_argument(
        "--request-path-interval",
        default=env("REQUEST_PATH_INTERVAL", "1"),
        help="seconds between reads of each request path; each read times out after 80%% of it, at most "
        "10 s (default 1)",
    )


def _agent_tls_arguments(p: argparse.ArgumentParser) -> None:
    """TLS from the scaler to the agents."""
    a = p.add_argument_group("TLS to the agents (their --tls-cert)")
    a.add_argument(
        "--agent-tls-ca",
        default=env("AGENT_TLS_CA"),
        help="PEM CA bundle that signed the agents' certificates",
    )
    a.add_argument(
        "--agent-tls-cert",
        default=env("AGENT_TLS_CERT"),
        help="PEM client certificate of the scaler, for agents that require one (their --tls-client-ca)",
    )
    a.add_argument("--agent-tls-key", default=env("AGENT_TLS_KEY"), help="PEM key of --agent-tls-cert")
    a.add_argument(
        "--agent-tls-server-name",
        default=env("AGENT_TLS_SERVER_NAME"),
        help="the name in the agents' certificate (agents are dialled by IP; default: their address)",
    )


def agent_tls_from_args(args: argparse.Namespace) -> dict[str, str | None]:
    """The SubscriberSettings fields for TLS to the agents."""
    given = args.agent_tls_ca or args.agent_tls_cert or args.agent_tls_key or args.agent_tls_server_name
    if not given:
        return {}
    if not args.agent_tls_ca:
        raise UsageError("TLS to the agents needs --agent-tls-ca (the CA that signed their certificate)")
    if bool(args.agent_tls_cert) != bool(args.agent_tls_key):
        raise UsageError("--agent-tls-cert and --agent-tls-key go together")
    ca = existing_file(args.agent_tls_ca, "--agent-tls-ca")
    cert = existing_file(args.agent_tls_cert, "--agent-tls-cert") if args.agent_tls_cert else None
    key = existing_file(args.agent_tls_key, "--agent-tls-key") if args.agent_tls_key else None
    check_pem(("--agent-tls-cert", cert), ("--agent-tls-key", key), ("--agent-tls-ca", ca))
    return {
        "tls_ca": str(ca),
        "tls_cert": str(cert) if cert else None,
        "tls_key": str(key) if key else None,
        "tls_server_name": args.agent_tls_server_name or None,
    }


def settings_from_args(args: argparse.Namespace) -> ScalerSettings:
    agents = tuple(a.strip() for a in (args.agents or "").split(",") if a.strip())
    if agents and args.agents_dns:
        raise UsageError("give --agents or --agents-dns, not both")
    if not agents and not args.agents_dns:
        raise UsageError("give the agents: --agents HOST:PORT,... or --agents-dns NAME:PORT")
    for a in agents:
        parse_host_port(a, "--agents")
    if args.agents_dns:
        parse_host_port(args.agents_dns, "--agents-dns")
    check_server_arguments(args)
    kubeconfig = kubeconfig_from_args(args)
    workers = count_in_range(
        args.ingest_workers, "--ingest-workers", "INGEST_WORKERS", default=0, maximum=MAX_WORKERS
    )
    tls = server_tls_from_args(args)
    agent_tls = agent_tls_from_args(args)
    interval = positive_seconds(args.request_path_interval, "--request-path-interval", within=(0.1, 2.0))
    return ScalerSettings(
        request_path=PathSettings(
            interval_s=interval,
            timeout_s=min(10.0, 0.8 * interval),
            namespaces=request_path_namespaces(args.request_path_namespaces),
            manual_endpoints=env_flag("REQUEST_PATH_MANUAL_ENDPOINTS", args.request_path_manual_endpoints),
        ),
        ingest_workers=workers,
        event_loop=args.event_loop,
        log_format=getattr(args, "log_format", "text"),
        agents=agents,
        agents_dns=args.agents_dns or None,
        dns_interval_s=positive_seconds(args.dns_interval, "--dns-interval"),
        grpc_address=args.grpc_address,
        metrics_address=args.metrics_address,
        kubeconfig=kubeconfig,
        in_cluster=bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and kubeconfig is None,
        tls=tls,
        history_s=positive_seconds(args.history, "--history"),
        ready_grace_s=positive_seconds(args.ready_grace, "--ready-grace"),
        subscriber=SubscriberSettings(
            forget_after_s=positive_seconds(args.forget_after, "--forget-after"),
            **agent_tls,  # type: ignore[arg-type]
        ),
    )


def request_path_namespaces(text: str | None) -> frozenset[str]:
    """``--request-path-namespaces``: namespace names, comma-separated; a ``UsageError`` names a bad one."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    for name in names:
        if not _NAMESPACE.match(name):
            raise UsageError(
                f'--request-path-namespaces "{text}": "{name[:100]}" is not a namespace name (1 to 63 '
                "lowercase letters, digits and '-', starting and ending with a letter or digit)"
            )
    return frozenset(names)


def profiles_from_args(args: argparse.Namespace) -> ProfileSet | None:
    return profiles_from_option(args.profiles or None)


async def serve(settings: ScalerSettings, profiles: ProfileSet | None) -> None:
    scaler = Scaler(settings, profiles=profiles)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        with kubeconfig_errors(settings.kubeconfig):
            # a failed start (an address in use) still stops what it had started; a signal cancels it
            if not await lifecycle.unless_stopped(scaler.start(), stop):
                log.info("stopping: signalled during start-up")
                return
        log.info(
            "scaler serving gRPC on :%d%s and metrics on :%d",
            scaler.grpc_port,
            " (TLS)" if settings.tls else "",
            scaler.metrics_port,
        )
        await stop.wait()
    finally:
        await scaler.stop()


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    profiles = profiles_from_args(args)
    lifecycle.run(serve(settings, profiles), args.event_loop)
    return 0
