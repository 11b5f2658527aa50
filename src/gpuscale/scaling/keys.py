"""The trigger metadata keys, declared once.

Each ``Key`` says its type, the values it allows, its default, whether a profile may set it, and one line of
doc. Parsing (``metadata.parse_metadata``), the profile fields (``profiles.Profile``, ``parse_profiles``), the
error messages, the key table of ``docs/metadata.md`` (``keys_markdown``; a test holds the doc to it) and the
Helm chart's schema for ``scaler.profiles`` (``profile_schema``) all come from ``KEYS``. A new key is one
entry here.

Value kinds:

* ``choice``: one of ``choices`` (``profile``'s choices are the profile set's names, known at parse time);
* ``number``: a finite decimal (ASCII digits only) ``> minimum`` (``exclusive``) or ``>= minimum``, at most
  ``maximum`` when set; with ``bytes_for_memory``, byte quantities (``40Gi``) where the metric is
  ``memory_used``;
* ``selector``: a Kubernetes label selector string (``selector.parse_selector``);
* ``name``: a Kubernetes namespace name (RFC 1123 label), or for ``model`` any non-empty text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

__all__ = [
    "ADDITIVE_METRICS",
    "AGGREGATIONS",
    "ENGINE_DEMAND",
    "ENGINE_METRICS",
    "KEDA_KEYS",
    "KEYS",
    "KEY_NAMES",
    "METRICS",
    "PROFILE_KEYS",
    "REQUEST_PATH_FORMATS",
    "SCALE_AHEAD",
    "SCOPES",
    "SHARES",
    "Aggregation",
    "Key",
    "Metric",
    "Scope",
    "Share",
    "check_choice",
    "check_number",
    "check_value",
    "keys_markdown",
    "profile_schema",
    "show",
]

Kind = Literal["choice", "number", "selector", "name", "service"]

Metric = Literal[
    "dram_active",
    "generation_tokens_per_second",
    "gpu_utilization",
    "gr_engine_active",
    "itl_p95",
    "kv_cache_usage",
    "memory_used",
    "memory_used_percent",
    "memory_utilization",
    "power",
    "power_percent",
    "queue_length",
    "request_rate",
    "requests_in_flight",
    "sm_active",
    "sm_occupancy",
    "temperature",
    "tensor_active",
    "ttft_p50",
    "ttft_p95",
]
Aggregation = Literal["avg", "max", "min", "p50", "p90", "p95", "p99", "sum"]
Scope = Literal["node", "pool", "workload"]
Share = Literal["container", "gpu"]

# The allowed values, as tuples (in the order above): one list each, for parsing, docs and typing alike.
METRICS: Final[tuple[Metric, ...]] = get_args(Metric)
# The inference engine's own signals (agent.engines), read per pod; workload scope only. Additive ones are
# reported as the sum over the workload's pods.
ENGINE_METRICS: Final = frozenset(
    {
        "generation_tokens_per_second",
        "itl_p95",
        "kv_cache_usage",
        "queue_length",
        "request_rate",
        "requests_in_flight",
        "ttft_p50",
        "ttft_p95",
    }
)
ADDITIVE_METRICS: Final = frozenset(
    {"generation_tokens_per_second", "queue_length", "request_rate", "requests_in_flight"}
)
SCALE_AHEAD: Final = ("auto", "off")
# How the request path's source writes its metrics (gpuscale.scaler.gateways maps each; docs/gateways.md
# cites each project's source): the Gateway API Inference Extension's endpoint picker, Envoy, ingress-nginx,
# the KEDA HTTP add-on's interceptor, vLLM production-stack's router.
REQUEST_PATH_FORMATS: Final = ("envoy", "epp", "ingress-nginx", "keda-http", "vllm-router")
ENGINE_DEMAND: Final = ("auto", "off")
AGGREGATIONS: Final[tuple[Aggregation, ...]] = get_args(Aggregation)
SCOPES: Final[tuple[Scope, ...]] = get_args(Scope)
SHARES: Final[tuple[Share, ...]] = get_args(Share)


@dataclass(frozen=True, slots=True)
class Key:
    """One trigger metadata key. ``attr`` is its ``TriggerMetadata`` / ``Profile`` attribute; ``default``
    ``None`` means none (``default_doc`` says what happens then); ``allowed`` is the doc's "allowed values"
    text (the checks themselves come from the other fields)."""

    name: str
    attr: str
    kind: Kind
    doc: str
    allowed: str
    default: str | float | None = None
    default_doc: str | None = None
    profile: bool = False
    choices: tuple[str, ...] = ()
    minimum: float = 0.0
    exclusive: bool = False
    maximum: float | None = None
    bytes_for_memory: bool = False
    scopes: tuple[str, ...] = ()  # the scopes it is allowed with; empty: every scope

    @property
    def default_text(self) -> str:
        if self.default_doc is not None:
            return self.default_doc
        if self.default is None:
            return "none"
        return f"`{_exact(self.default) if isinstance(self.default, float) else self.default}`"


# fmt: off
KEYS: Final[tuple[Key, ...]] = (
    Key("profile", "profile", "choice",
        "Named defaults for a kind of GPU workload, see [profiles](profiles.md).",
        "a built-in profile ({profiles}) or one from the scaler's `--profiles` file"),
    Key("metric", "metric", "choice", "The per-GPU figure to scale on.",
        "`gpu_utilization` (% of time a kernel ran: a duty cycle), `memory_utilization` (% of time "
        "device memory was read or written), `memory_used` (bytes), `memory_used_percent` (% of the GPU's "
        "memory), `temperature` (°C), `power` (W), `power_percent` (% of the enforced power limit); on "
        "Hopper and newer GPUs (NVML's GPM counters, per MIG instance too; dcgm-exporter's profiling "
        "fields), activity over the last sampling interval in %: `gr_engine_active` (graphics/compute "
        "engine busy), `sm_active` (SMs with a warp assigned), `sm_occupancy` (resident warps of the "
        "maximum), `tensor_active` (tensor pipes busy), `dram_active` (memory bandwidth used); the "
        "inference engine's own signals, read on the node (workload scope, see [engines](engines.md)): "
        "`queue_length` (waiting requests), `requests_in_flight` (waiting + running), `request_rate` "
        "(requests arriving per second: those finished plus the growth of those waiting and running, over "
        "`window`), `generation_tokens_per_second` (these four: the sum over the workload's pods), "
        "`kv_cache_usage` "
        "(%), `ttft_p50`, `ttft_p95`, `itl_p95` (seconds, over `window`)",
        default="gpu_utilization", profile=True, choices=METRICS),
    Key("aggregation", "aggregation", "choice", "How the per-GPU values in scope become one number.",
        "`max`, `min`, `avg`, `sum`, `p50`, `p90`, `p95`, `p99`",
        default="avg", profile=True, choices=AGGREGATIONS),
    Key("targetValue", "target_value", "number",
        "The target KEDA gives the HPA. In `workload` scope it is **per replica**.",
        "a finite number > 0. For percent metrics (except with `sum`): ≤ 100. For `memory_used`: also byte "
        "quantities such as `40Gi` or `500M`. For `request_rate`: also a share of what one replica serves, "
        "`80%` (with `replicaRate`, the figure until the scaler has learned one; the value is then in "
        "percent of one replica's capacity)",
        default_doc="**required** unless the profile sets it", profile=True, exclusive=True,
        bytes_for_memory=True),
    Key("activationValue", "activation_value", "number",
        "The trigger is active when the aggregate is **strictly greater** than this. In `workload` scope the "
        "aggregate is the per-replica figure.",
        "a finite number ≥ 0. For percent metrics (except with `sum`): < 100. For `memory_used`: also byte "
        "quantities",
        default=0.0, profile=True, bytes_for_memory=True),
    Key("window", "window", "number",
        "Seconds of samples averaged per GPU before aggregating (smoothing). `0` means the newest sample.",
        "a finite number ≥ 0, at most `staleAfter`",
        default=10.0, profile=True),
    Key("staleAfter", "stale_after", "number",
        "Seconds after which a sample no longer counts. A GPU with no newer sample is left out. When no GPU "
        "is left, the call fails (`UNAVAILABLE`). gpuscale never reports a made-up 0.",
        "a finite number > 0",
        default=30.0, profile=True, exclusive=True),
    Key("maxMissingPercent", "max_missing_percent", "number",
        "Workload scope: the share of the workload's GPU pods that may be missing (no fresh, attributed "
        "sample: agent gone, no device listed, share unknown) before the call fails with `UNAVAILABLE`. "
        "Below it, missing pods count as the HPA counts pods without metrics (see below).",
        "a finite number from 0 to 100",
        default=50.0, profile=True, maximum=100.0),
    Key("scope", "scope", "choice", "Which GPUs count.",
        "`workload`: the GPUs assigned to the scale target's pods, on any node. `node`: the GPUs of the node "
        "whose agent answers. `pool`: every GPU on the nodes matching `nodeSelector`",
        default="workload", profile=True, choices=SCOPES),
    Key("share", "share", "choice", "With `workload` scope, whose figures count on a GPU.",
        "`gpu`: the whole GPU. `container`: only the figures of the pod's own processes: the sum of their SM "
        "utilization shares (capped at 100), or the memory they use (for `memory_used` and "
        "`memory_used_percent`). Only for `gpu_utilization`, `memory_used` and `memory_used_percent`",
        default="gpu", profile=True, choices=SHARES),
    Key("model", "model", "name",
        "Engine metrics: the one model of a multi-model pod to read (its `model_name` label).",
        "a model name as the engine labels it. Only with an engine metric",
        default_doc="every model of the pod, added up (the KV cache: the fullest)"),
    Key("scaleAhead", "scale_ahead", "choice",
        "Answer with the value forecast one cold start ahead, so that capacity arrives when the demand does: "
        "Sen's slope over the last cold start (at most the 120 s the scaler holds), used only when Kendall's "
        "τ says the series moves one way (≥ 0.6; a step alone reaches about 0.5), never below the present "
        "value and adding at most the larger of the present value and the range seen. See "
        "[decisions](decisions.md).",
        "`off`; `auto`: ahead by the workload's cold start, learned from its pods (scheduled to Ready; the "
        "present value until a pod has been seen starting). Only with `request_rate`, `queue_length`, "
        "`requests_in_flight`, `generation_tokens_per_second`",
        default="off", profile=True, choices=SCALE_AHEAD),
    Key("engineDemand", "engine_demand", "choice",
        "GPU utilization saturates at 100 %: it says what is served, not what is asked. Where the engine of "
        "every pod the answer counts reports its finished requests and queue, the answer is the utilization "
        "the demand would take, `value x arriving / served` (arrivals as `request_rate` counts them, served: "
        "finished less aborted), when that is more than the HPA's 10 % tolerance above it; never lowered. "
        "See [decisions](decisions.md#the-mechanisms).",
        "`auto`; `off`: the utilization as measured. Only with `gpu_utilization` in scope `workload`",
        default_doc="auto (with `gpu_utilization` in workload scope)", profile=True, choices=ENGINE_DEMAND),
    Key("kvCacheGuard", "kv_cache_guard", "number",
        "Engine metrics: a floor from the KV cache. The answer never asks for fewer replicas than would keep "
        "the Ready pods' mean KV-cache fill at or below this (%): `ceil(Ready pods x mean fill / "
        "kvCacheGuard)`, at most the replicas the workload has (it holds, it never scales up). A busy engine "
        "with an empty queue is not idle.",
        "a finite number > 0, at most 100. Only with an engine metric",
        default_doc="none", profile=True, exclusive=True, maximum=100.0),
    Key("requestPath", "request_path", "service",
        "Where the request path in front of the workload (its gateway, router or ingress) serves its "
        "metrics: the scaler reads it every second and so sees the demand at zero replicas and while every "
        "pod loads: a wake asks for the demand's replicas, not one, and where pods are Ready the answer is "
        "at least what it counts. See [gateways](gateways.md).",
        "a Service of the ScaledObject's namespace, `name:port[/path]` (port: a number or the port's name; "
        "path: default `/metrics`); `namespace/name:port[/path]` for a namespace the scaler's "
        "`--request-path-namespaces` allows. Never a URL or an address. Only with scope `workload`",
        default_doc="none", scopes=("workload",)),
    Key("requestPathFormat", "request_path_format", "choice",
        "Which project serves `requestPath`, so which of its series count the workload's arrivals and the "
        "requests it holds ([gateways](gateways.md)).",
        "`envoy` (Envoy's own stats: Envoy Gateway, Istio), `epp` (the Gateway API Inference Extension's "
        "endpoint picker, llm-d's too), `ingress-nginx`, `keda-http` (the KEDA HTTP add-on's interceptor), "
        "`vllm-router` (vLLM production-stack). **Required** with `requestPath`",
        choices=REQUEST_PATH_FORMATS),
    Key("requestPathMatch", "request_path_match", "name",
        "The value of the format's workload label whose series count: EPP: the model clients ask for "
        "(`model_name`; one endpoint picker serves one InferencePool); Envoy: the cluster "
        "(`envoy_cluster_name`, Istio's `cluster_name`); ingress-nginx: the ingress or its service; KEDA "
        "HTTP add-on: the route, the HTTPScaledObject's or InterceptorRoute's name (`route_name`; `host` in "
        "older add-ons); vLLM router: the model ([gateways](gateways.md)).",
        "any non-empty text. Only with `requestPath`",
        default_doc="every series of the format, added up"),
    Key("replicaRate", "replica_rate", "number",
        "Requests per second one replica is to serve: the request path's demand is divided by it, so a "
        "wake from zero asks for `ceil(demand / replicaRate)` replicas.",
        "a finite number > 0. Only with `requestPath`, or with `targetValue` as a share (`80%`)",
        default_doc="`targetValue` with metric `request_rate`; else the replica's capacity the scaler "
        "learned while requests waited on the pods (engine metrics); the learned capacity wherever it is "
        "lower than the figure given. With none, the request path only wakes the workload and holds its "
        "count",
        profile=True, exclusive=True),
    Key("requestPathDrainSeconds", "request_path_drain_seconds", "number",
        "The requests the request path holds count as demand to be drained within this many seconds (how "
        "long their clients wait).",
        "a finite number > 0, at most 3600",
        default=60.0, profile=True, exclusive=True, maximum=3600.0),
    Key("podSelector", "pod_selector", "selector",
        "Overrides how the workload's pods are found (normally the `/scale` selector of `scaleTargetRef`).",
        "a Kubernetes label selector string: `app=llm`, `tier!=canary`, `tier in (a,b)`, `tier notin (a,b)`, "
        "`gpu`, `!spot`, comma-separated (AND). Only with scope `workload`",
        default_doc="the target's selector", scopes=("workload",)),
    Key("namespace", "namespace", "name", "The namespace to look for those pods in.",
        "a namespace name. Only with scope `workload`",
        default_doc="the ScaledObject's", scopes=("workload",)),
    Key("nodeSelector", "node_selector", "selector",
        "The nodes whose GPUs form the pool, by the labels of their Node objects (each agent reads its own).",
        "a label selector, same syntax, not empty. **Required** with scope `pool` and allowed only there",
        scopes=("pool",)),
)
# fmt: on

KEY_NAMES: Final = tuple(sorted(k.name for k in KEYS))
PROFILE_KEYS: Final = tuple(k for k in KEYS if k.profile)
BY_NAME: Final[Mapping[str, Key]] = {k.name: k for k in KEYS}
KEDA_KEYS: Final = frozenset(
    {"scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsClientCert", "tlsClientKey", "tlsCertFile"}
)

# ASCII digits only: ``\d`` takes any Unicode digit (Arabic-Indic ones too), and ``float`` reads them.
_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_BYTES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def _exact(value: float) -> str:
    if value.is_integer() and abs(value) < 1e18:
        return str(int(value))
    return repr(value)


def show(value: object) -> str:
    """A value as messages quote it: ``"…"``, cut to 100 characters."""
    if isinstance(value, float):
        text = f"{value:g}"
    else:
        text = value if isinstance(value, str) else ("null" if value is None else str(value))
    return '"' + (text if len(text) <= 100 else text[:99] + "…") + '"'


def check_choice(raw: object, allowed: Iterable[str]) -> tuple[str | None, str | None]:
    """``(value, None)`` or ``(None, "must be one of [...]")``."""
    options = sorted(allowed)
    if isinstance(raw, str) and raw in options:
        return raw, None
    return None, f"must be one of [{', '.join(options)}]"


def check_number(
    raw: object,
    *,
    minimum: float,
    exclusive: bool,
    bytes_units: bool = False,
    maximum: float | None = None,
) -> tuple[float | None, str | None]:
    """A finite number ``> minimum`` (``exclusive``) or ``>= minimum`` (and ``<= maximum``); strings like
    ``"70"`` or ``"1e3"`` (with ``bytes_units``: also ``"40Gi"``, ``"500M"``), or YAML numbers (not
    booleans)."""
    value: float | None = None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        m = _QUANTITY.match(text) if bytes_units else None
        if m:
            value = float(m[1]) * _BYTES[m[2] or ""]
        elif _NUMBER.match(text):
            value = float(text)
    if value is None or not math.isfinite(value):
        unit = " or a byte quantity such as 40Gi" if bytes_units else ""
        return None, f"must be a finite number{unit}"
    if value < minimum or (exclusive and value == minimum):
        return None, f"must be {'greater than' if exclusive else 'at least'} {minimum:g}"
    if maximum is not None and value > maximum:
        return None, f"must be at most {maximum:g}"
    return value, None


def check_value(key: Key, raw: object, *, metric: object = None) -> tuple[object, str | None]:
    """Check one value of a ``choice`` or ``number`` key alone: ``(value, None)`` or ``(None, "must …")``.
    ``metric`` is the trigger's (or profile's) metric, for the byte units of ``memory_used``."""
    if key.kind == "choice":
        return check_choice(raw, key.choices)
    if key.kind == "number":
        units = key.bytes_for_memory and metric == "memory_used"
        return check_number(
            raw, minimum=key.minimum, exclusive=key.exclusive, bytes_units=units, maximum=key.maximum
        )
    raise ValueError(f"key {key.name} of kind {key.kind} is checked where it is parsed")


def keys_markdown(profile_names: Iterable[str]) -> str:
    """The key table of ``docs/metadata.md``."""
    names = ", ".join(f"`{n}`" for n in sorted(profile_names))
    lines = [
        "| key | meaning | allowed values | default | a profile may set it |",
        "|---|---|---|---|---|",
    ]
    for k in KEYS:
        allowed = k.allowed.replace("{profiles}", names)
        lines.append(
            f"| `{k.name}` | {k.doc} | {allowed} | {k.default_text} | {'yes' if k.profile else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def profile_schema() -> dict[str, object]:
    """A JSON Schema for one profile's fields (the Helm chart's ``scaler.profiles`` entries): each key a
    profile may set, with its allowed values, plus ``description`` and ``extends``. The rules that span
    fields (percent targets at most 100, ``window`` at most ``staleAfter``) are the scaler's alone."""
    props: dict[str, object] = {
        "description": {"type": "string"},
        "extends": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
    }
    for k in PROFILE_KEYS:
        if k.kind == "choice":
            props[k.name] = {"type": "string", "enum": list(k.choices), "description": k.doc}
            continue
        bound = "exclusiveMinimum" if k.exclusive else "minimum"
        number: dict[str, object] = {"type": "number", bound: k.minimum}
        if k.maximum is not None:
            number["maximum"] = k.maximum
        text = r"^\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
        text += r"(k|M|G|T|Ki|Mi|Gi|Ti)?$" if k.bytes_for_memory else "$"
        props[k.name] = {"anyOf": [number, {"type": "string", "pattern": text}], "description": k.doc}
    return {"type": "object", "additionalProperties": False, "properties": props}
