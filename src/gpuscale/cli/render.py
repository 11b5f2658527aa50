"""``gpuscale render``: manifests for each path to GPU autoscaling, printed as YAML.

``render scaledobject`` writes a KEDA ScaledObject (``--mode external``, ``external-push`` or ``prometheus``);
``render hpa`` an ``autoscaling/v2`` HPA with a ``Pods`` metric and, with ``--adapter``, the Prometheus
Adapter rule it needs as values of the prometheus-adapter chart, in a file of its own (the whole adapter
ConfigMap only when asked for by name). Only ``--target`` and ``--namespace`` are required.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys

from ..errors import UsageError
from ..render import (
    MODES,
    HpaOptions,
    ScaledObjectOptions,
    render_adapter_values,
    render_hpa,
    render_scaledobject,
)
from ..render.behavior import SCALE_DOWN_S, SCALE_UP
from ..scaling.keys import REQUEST_PATH_FORMATS
from ..scaling.profiles import AGGREGATIONS, BUILTIN_PROFILES, METRICS, SCOPES, SHARES
from ._options import profiles_from_option

__all__ = ["register"]


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'"{text}" must be an integer') from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f'"{text}" must be a number of seconds greater than 0')
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="the workload: deployment/NAME or statefulset/NAME")
    p.add_argument("--namespace", required=True, help="the workload's namespace")
    p.add_argument("--name", help="the object's name (default: the workload's)")
    p.add_argument(
        "--profile",
        default="llm-serving",
        help=f"trigger defaults: {', '.join(p.name for p in BUILTIN_PROFILES)}, or one of --profiles "
        "(default llm-serving)",
    )
    p.add_argument(
        "--profiles", metavar="FILE", help="the scaler's profiles file (the chart's scaler.profiles)"
    )
    p.add_argument("--metric", help=f"override the profile's metric: {', '.join(METRICS)}")
    p.add_argument("--aggregation", help=f"override the profile's aggregation: {', '.join(AGGREGATIONS)}")
    p.add_argument("--target-value", help="override the profile's target (per replica)")
    p.add_argument("--window", help="override the profile's smoothing window (seconds)")
    p.add_argument("--min-replicas", type=_int, default=1, help="default 1")
    p.add_argument("--max-replicas", type=_int, default=10, help="default 10")
    p.add_argument(
        "--scale-down-stabilization",
        type=_int,
        help="HPA scale-down window, seconds: the largest count asked for within it is kept, then 1 pod "
        f"per 60 s goes (default {SCALE_DOWN_S})",
    )
    p.add_argument(
        "--exported-labels",
        action="store_true",
        help="Prometheus scrapes the agent with honorLabels false: the pod labels are "
        "exported_namespace/exported_pod",
    )
    p.add_argument(
        "--vendor", default="nvidia", choices=["nvidia", "amd"], help="series names (default nvidia)"
    )
    p.add_argument(
        "--agent-job",
        metavar="JOB",
        help="Prometheus's job label of the agents' series, pinned in the queries so that dcgm-exporter's "
        "series of the same names are not counted too (default RELEASE-agent, as the chart's ServiceMonitor "
        'names it; "" to not pin)',
    )
    p.add_argument(
        "--scrape-interval",
        type=_seconds,
        default=15.0,
        help="seconds between Prometheus's scrapes of the agents (the chart's serviceMonitor.interval, "
        "default 15): a query's averaging range is at least twice it, or it can hold no sample",
    )
    p.add_argument("-o", "--output", help="write to this file instead of standard output")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "render",
        help="write the manifests of a path to GPU autoscaling (ScaledObject, HPA + adapter rules)",
        description="Write Kubernetes manifests as YAML for one of the paths in docs/paths.md.",
    )
    sub = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    _scaledobject_parser(sub)
    _hpa_parser(sub)


def _scaledobject_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    so = sub.add_parser(
        "scaledobject",
        help="a KEDA ScaledObject",
        description="A KEDA ScaledObject for the gpuscale scaler (external, external-push) or KEDA's "
        "Prometheus scaler over the agent's series (prometheus). The right metricType "
        "is chosen and explained.",
    )
    _common(so)
    _scaledobject_trigger_options(so)
    _request_path_options(so)
    so.add_argument(
        "--queue-target",
        help="external: a second trigger on the engine's waiting requests (metric queue_length), this many "
        "per replica; the HPA takes the larger proposal",
    )
    _fallback_options(so)
    _scaler_options(so)
    _prometheus_options(so)
    so.set_defaults(func=run_scaledobject)


def _scaledobject_trigger_options(so: argparse.ArgumentParser) -> None:
    """The mode, the trigger keys beyond the common ones, KEDA's polling and the HPA's scale-up."""
    so.add_argument("--mode", default="external", help=f"{', '.join(MODES)} (default external)")
    so.add_argument("--activation-value", help="override the profile's activation value")
    so.add_argument("--scope", help=f"{', '.join(SCOPES)} (default: the profile's, else workload)")
    so.add_argument("--share", help=f"{', '.join(SHARES)}")
    so.add_argument("--pod-selector", help="external: a label selector for the pods (default: the target's)")
    so.add_argument("--node-selector", help="external, scope pool: a label selector for the nodes")
    so.add_argument("--stale-after", help="external: seconds after which a sample no longer counts")
    so.add_argument("--polling-interval", type=_int, default=15, help="KEDA's polling interval (default 15)")
    so.add_argument(
        "--cooldown-period", type=_int, default=300, help="seconds before scaling to zero (default 300)"
    )
    so.add_argument(
        "--scale-up",
        metavar="{default,fast}",
        help=f"{', '.join(SCALE_UP)}: fast reaches the count the trigger asks for in one HPA sync (+900 %% "
        "or +max-replicas pods per 15 s); default leaves the HPA's, the larger of +100 %% and +4 pods per "
        "15 s (default: fast for an engine metric, --queue-target or --request-path, else default)",
    )


def _fallback_options(so: argparse.ArgumentParser) -> None:
    """KEDA's fallback: what it holds while the trigger fails."""
    so.add_argument(
        "--fallback-replicas",
        type=_int,
        help="KEDA's fallback: the replicas to hold while the trigger fails (UNAVAILABLE: stale GPU data)",
    )
    so.add_argument(
        "--fallback-failure-threshold",
        type=_int,
        default=3,
        help="failed polls in a row before the fallback (default 3)",
    )
    so.add_argument(
        "--fallback-behavior",
        default="currentReplicasIfHigher",
        help="what KEDA holds while the trigger fails: currentReplicasIfHigher (default: the replicas "
        "running, at least --fallback-replicas; never scales down), currentReplicas, static (exactly "
        "--fallback-replicas: scales a larger workload down), currentReplicasIfLower (at most "
        "--fallback-replicas: scales down); KEDA 2.15 or newer",
    )


def _scaler_options(so: argparse.ArgumentParser) -> None:
    """external: where the scaler is and how KEDA reaches it (TLS)."""
    so.add_argument(
        "--scaler-address",
        help="external: HOST:PORT of the scaler (default RELEASE-scaler.RELEASE_NAMESPACE.svc:6001; "
        "scope node: the agents', RELEASE-agent…:6000)",
    )
    so.add_argument("--release", default="gpuscale", help="the Helm release's full name (default gpuscale)")
    so.add_argument("--release-namespace", default="gpuscale", help="the Helm release's namespace")
    so.add_argument("--tls", action="store_true", help="external: the scaler serves TLS (enableTLS)")
    so.add_argument("--tls-secret", help="external: a Secret with ca.crt for a TriggerAuthentication")
    so.add_argument(
        "--tls-client-cert", action="store_true", help="external: also tls.crt/tls.key (mutual TLS)"
    )


def _prometheus_options(so: argparse.ArgumentParser) -> None:
    """prometheus: the server KEDA queries and the pods the query selects."""
    so.add_argument(
        "--prometheus-url",
        default="http://prometheus-operated.monitoring.svc:9090",
        help="prometheus: the server KEDA queries (default the Prometheus Operator's prometheus-operated)",
    )
    so.add_argument(
        "--pod-regex",
        help="prometheus: regex on pod names (default from the target: NAME-[a-z0-9]+-[a-z0-9]{5} for a "
        "Deployment, NAME-[0-9]+ for a StatefulSet)",
    )


def _hpa_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hpa = sub.add_parser(
        "hpa",
        help="an autoscaling/v2 HPA with a Pods metric, and the Prometheus Adapter rule",
        description="An autoscaling/v2 HPA with a Pods metric served by Prometheus Adapter from the agent's "
        "series. With --adapter, also the adapter rule that serves it, as values of the "
        "prometheus-community/prometheus-adapter chart (rules.custom) in --adapter-values; "
        "--adapter-configmap NAME instead adds the adapter's whole config as a ConfigMap to the manifests, "
        "which replaces every rule the adapter had.",
    )
    _common(hpa)
    hpa.add_argument(
        "--adapter",
        action="store_true",
        help="also write the Prometheus Adapter rule as prometheus-adapter chart values to --adapter-values",
    )
    hpa.add_argument(
        "--adapter-values",
        metavar="FILE",
        default=ADAPTER_VALUES,
        help=f"where --adapter writes the chart values (default ./{ADAPTER_VALUES})",
    )
    hpa.add_argument(
        "--adapter-namespace", default="monitoring", help="the adapter's namespace (default monitoring)"
    )
    hpa.add_argument(
        "--adapter-configmap",
        metavar="NAME",
        help="instead of the values: the adapter's whole config as the ConfigMap NAME, with the manifests "
        "(applying it replaces every rule the adapter had; e.g. prometheus-adapter)",
    )
    _request_path_options(hpa, hidden=True)  # only to say where they belong
    hpa.set_defaults(func=run_hpa)


def _request_path_options(p: argparse.ArgumentParser, *, hidden: bool = False) -> None:
    """The request path in front of the workload: trigger metadata for the gpuscale scaler."""

    def helps(text: str) -> str:
        return argparse.SUPPRESS if hidden else text

    p.add_argument(
        "--request-path",
        metavar="SERVICE:PORT[/PATH]",
        help=helps(
            "external: the Service of the gateway, router or ingress in front of the workload, in its "
            "namespace, whose metrics (default path /metrics) the scaler reads: it sees the demand at zero "
            "replicas and wakes the workload (requestPath; needs --request-path-format)"
        ),
    )
    p.add_argument(
        "--request-path-format",
        metavar="FORMAT",
        help=helps(f"what serves --request-path: {', '.join(REQUEST_PATH_FORMATS)} (requestPathFormat)"),
    )
    p.add_argument(
        "--request-path-match",
        metavar="VALUE",
        help=helps(
            "the value of the format's workload label whose series count (EPP: the InferencePool; Envoy: "
            "the cluster; ingress-nginx: the ingress; keda-http: the host; vllm-router: the model) "
            "(requestPathMatch; default every series)"
        ),
    )
    p.add_argument(
        "--replica-rate",
        metavar="N",
        help=helps(
            "requests per second one replica is to serve: the request path's demand is divided by it "
            "(replicaRate)"
        ),
    )


ADAPTER_VALUES = "prometheus-adapter-values.yaml"


def _write(text: str, output: str | None) -> int:
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f'--output "{output}": {e.strerror}') from None
    return 0


def _write_file(text: str, path: str, flag: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f'{flag} "{path}": cannot write it: {e.strerror or e}') from None


def _generated_by(args: argparse.Namespace) -> str | None:
    """The "Generated by" command: ``gpuscale render …`` with every flag as given, less ``-o``/``--output``
    (what is written does not depend on where), so that running it prints the same file. ``None`` when the
    command line is not known (``args`` not parsed by ``gpuscale.cli.main``)."""
    argv: list[str] | None = getattr(args, "argv", None)
    if argv is None or "render" not in argv:
        return None
    kept: list[str] = []
    tokens = iter(argv[argv.index("render") :])
    for token in tokens:
        name, eq, _ = token.partition("=")
        if token.startswith("-o") and token != "-o":  # -oFILE
            continue
        if token == "-o" or (name.startswith("--o") and "--output".startswith(name)):  # argparse's prefixes
            if not eq:
                next(tokens, None)
            continue
        kept.append(token)
    return "gpuscale " + shlex.join(kept)


def run_scaledobject(args: argparse.Namespace) -> int:
    options = ScaledObjectOptions(
        target=args.target,
        namespace=args.namespace,
        mode=args.mode,
        name=args.name,
        profile=args.profile or None,
        metric=args.metric,
        aggregation=args.aggregation,
        target_value=args.target_value,
        activation_value=args.activation_value,
        window=args.window,
        scope=args.scope,
        share=args.share,
        pod_selector=args.pod_selector,
        node_selector=args.node_selector,
        stale_after=args.stale_after,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        polling_interval=args.polling_interval,
        cooldown_period=args.cooldown_period,
        scale_up=args.scale_up,
        scale_down_stabilization=args.scale_down_stabilization,
        request_path=args.request_path,
        request_path_format=args.request_path_format,
        request_path_match=args.request_path_match,
        replica_rate=args.replica_rate,
        scaler_address=args.scaler_address,
        release=args.release,
        release_namespace=args.release_namespace,
        tls=args.tls,
        tls_secret=args.tls_secret,
        tls_client_cert=args.tls_client_cert,
        prometheus_url=args.prometheus_url,
        pod_regex=args.pod_regex,
        exported_labels=args.exported_labels,
        agent_job=args.agent_job,
        fallback_replicas=args.fallback_replicas,
        fallback_failure_threshold=args.fallback_failure_threshold,
        fallback_behavior=args.fallback_behavior,
        queue_target=args.queue_target,
        vendor=args.vendor,
        scrape_interval=args.scrape_interval,
        profiles=profiles_from_option(args.profiles),
        command=_generated_by(args),
    )
    return _write(render_scaledobject(options), args.output)


def run_hpa(args: argparse.Namespace) -> int:
    for flag in ("--request-path", "--request-path-format", "--request-path-match", "--replica-rate"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            raise UsageError(
                f'{flag} "{value}" is for render scaledobject --mode external or external-push: the gpuscale '
                "scaler reads the request path; an HPA's Pods metric from Prometheus Adapter is per pod"
            )
    scale_down = args.scale_down_stabilization
    options = HpaOptions(
        target=args.target,
        namespace=args.namespace,
        name=args.name,
        profile=args.profile or None,
        metric=args.metric,
        aggregation=args.aggregation,
        target_value=args.target_value,
        window=args.window,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        scale_down_stabilization=SCALE_DOWN_S if scale_down is None else scale_down,
        exported_labels=args.exported_labels,
        vendor=args.vendor,
        scrape_interval=args.scrape_interval,
        agent_job="gpuscale-agent" if args.agent_job is None else args.agent_job,
        adapter_namespace=args.adapter_namespace,
        adapter_configmap=args.adapter_configmap,
        profiles=profiles_from_option(args.profiles),
        command=_generated_by(args),
    )
    manifests = render_hpa(options)  # checks every option before a file is written
    if args.adapter and args.adapter_configmap is None:
        path = args.adapter_values
        _write_file(render_adapter_values(options, file_name=path), path, "--adapter-values")
        print(
            f"gpuscale render: the Prometheus Adapter rule is in {path}, as values of the "
            "prometheus-community/prometheus-adapter chart (rules.custom): merge them into the adapter's "
            "release (see the file's comment); --adapter-configmap NAME writes the whole ConfigMap instead",
            file=sys.stderr,
        )
    return _write(manifests, args.output)
