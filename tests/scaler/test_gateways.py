"""The request path's formats: each project's exposition, written as the project writes it, read into the
workload's arrivals and held requests; renamed families counted once; nothing to read is an error, never 0.

The expositions follow each project's own definitions (docs/gateways.md cites them): Envoy's admin
/stats/prometheus (``# TYPE`` lines only, tags ``envoy_cluster_name``, or ``cluster_name`` under Istio's
bootstrap); the EPP's controller-runtime registry (llm-d-router's dual emission of ``llm_d_epp_*`` and the
deprecated names, and the upstream Gateway API Inference Extension's older names); ingress-nginx's socket
collector; the KEDA HTTP add-on interceptor's OpenTelemetry Prometheus exporter (``route_name`` labels, and the
older ``host`` labels with ``otel_scope_*``); vLLM production-stack's router (prometheus_client, with
``_created`` samples)."""

from __future__ import annotations

import pytest

from gpuscale.exposition import parse
from gpuscale.scaler.errors import GatewayError, ScalerError
from gpuscale.scaler.gateways import FORMATS, read, selection
from gpuscale.scaling.keys import REQUEST_PATH_FORMATS

QWEN = "httproute/llm/qwen/rule/0"

ENVOY = f"""\
# TYPE envoy_cluster_upstream_cx_none_healthy counter
envoy_cluster_upstream_cx_none_healthy{{envoy_cluster_name="httproute/llm/llama/rule/0"}} 0
envoy_cluster_upstream_cx_none_healthy{{envoy_cluster_name="{QWEN}"}} 17
envoy_cluster_upstream_cx_none_healthy{{envoy_cluster_name="xds_cluster"}} 0

# TYPE envoy_cluster_upstream_cx_total counter
envoy_cluster_upstream_cx_total{{envoy_cluster_name="httproute/llm/llama/rule/0"}} 12
envoy_cluster_upstream_cx_total{{envoy_cluster_name="{QWEN}"}} 40
envoy_cluster_upstream_cx_total{{envoy_cluster_name="xds_cluster"}} 1

# TYPE envoy_cluster_upstream_rq counter
envoy_cluster_upstream_rq{{envoy_response_code="200",envoy_cluster_name="httproute/llm/llama/rule/0"}} 431
envoy_cluster_upstream_rq{{envoy_response_code="200",envoy_cluster_name="{QWEN}"}} 1180
envoy_cluster_upstream_rq{{envoy_response_code="503",envoy_cluster_name="{QWEN}"}} 27

# TYPE envoy_cluster_upstream_rq_pending_total counter
envoy_cluster_upstream_rq_pending_total{{envoy_cluster_name="httproute/llm/llama/rule/0"}} 12
envoy_cluster_upstream_rq_pending_total{{envoy_cluster_name="{QWEN}"}} 52

# TYPE envoy_cluster_upstream_rq_timeout counter
envoy_cluster_upstream_rq_timeout{{envoy_cluster_name="{QWEN}"}} 3

# TYPE envoy_cluster_upstream_rq_total counter
envoy_cluster_upstream_rq_total{{envoy_cluster_name="httproute/llm/llama/rule/0"}} 431
envoy_cluster_upstream_rq_total{{envoy_cluster_name="{QWEN}"}} 1207
envoy_cluster_upstream_rq_total{{envoy_cluster_name="xds_cluster"}} 3

# TYPE envoy_cluster_upstream_rq_active gauge
envoy_cluster_upstream_rq_active{{envoy_cluster_name="httproute/llm/llama/rule/0"}} 2
envoy_cluster_upstream_rq_active{{envoy_cluster_name="{QWEN}"}} 16
envoy_cluster_upstream_rq_active{{envoy_cluster_name="xds_cluster"}} 1

# TYPE envoy_cluster_upstream_rq_pending_active gauge
envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="httproute/llm/llama/rule/0"}} 0
envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="{QWEN}"}} 7
envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="xds_cluster"}} 0

# TYPE envoy_cluster_upstream_rq_time histogram
envoy_cluster_upstream_rq_time_bucket{{envoy_cluster_name="{QWEN}",le="0.5"}} 0
envoy_cluster_upstream_rq_time_bucket{{envoy_cluster_name="{QWEN}",le="+Inf"}} 1180
envoy_cluster_upstream_rq_time_sum{{envoy_cluster_name="{QWEN}"}} 2350000
envoy_cluster_upstream_rq_time_count{{envoy_cluster_name="{QWEN}"}} 1180

"""

ISTIO_QWEN = "outbound|8000||qwen.llm.svc.cluster.local"
ISTIO = f"""\
# TYPE envoy_cluster_upstream_cx_none_healthy counter
envoy_cluster_upstream_cx_none_healthy{{cluster_name="{ISTIO_QWEN}"}} 4
envoy_cluster_upstream_cx_none_healthy{{cluster_name="outbound|8000||llama.llm.svc.cluster.local"}} 0
# TYPE envoy_cluster_upstream_rq_total counter
envoy_cluster_upstream_rq_total{{cluster_name="{ISTIO_QWEN}"}} 52
envoy_cluster_upstream_rq_total{{cluster_name="outbound|8000||llama.llm.svc.cluster.local"}} 9
# TYPE envoy_cluster_upstream_rq_pending_active gauge
envoy_cluster_upstream_rq_pending_active{{cluster_name="{ISTIO_QWEN}"}} 2
envoy_cluster_upstream_rq_pending_active{{cluster_name="outbound|8000||llama.llm.svc.cluster.local"}} 0
"""

# llm-d-router during the rename: every recorder writes its deprecated series and its llm_d_epp_ twin
EPP_DUAL = """\
# HELP inference_extension_flow_control_queue_size [ALPHA] [Deprecated: Use llm_d_epp_flow_control_queue_size] Current number of requests actively held in the Flow Control queue.
# TYPE inference_extension_flow_control_queue_size gauge
inference_extension_flow_control_queue_size{fairness_id="tenant-a",inference_pool="qwen-pool",model_name="qwen",priority="0",target_model_name="qwen"} 3
inference_extension_flow_control_queue_size{fairness_id="tenant-b",inference_pool="qwen-pool",model_name="qwen",priority="0",target_model_name="qwen"} 2
inference_extension_flow_control_queue_size{fairness_id="tenant-a",inference_pool="qwen-pool",model_name="qwen-lora",priority="10",target_model_name="qwen-lora-a"} 1
# HELP inference_objective_request_total [ALPHA] [Deprecated: Use llm_d_epp_request_total] Counter of inference objective requests broken out for each model and target model.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="qwen",priority="0",target_model_name="qwen"} 40
inference_objective_request_total{model_name="qwen-lora",priority="10",target_model_name="qwen-lora-a"} 5
# HELP inference_pool_average_queue_size [ALPHA] [Deprecated: Use llm_d_epp_average_queue_size] The average number of requests pending in the model server queue.
# TYPE inference_pool_average_queue_size gauge
inference_pool_average_queue_size{name="qwen-pool"} 0
# HELP llm_d_epp_flow_control_pool_saturation [ALPHA] Pool saturation signal gating Flow Control dispatch.
# TYPE llm_d_epp_flow_control_pool_saturation gauge
llm_d_epp_flow_control_pool_saturation{inference_pool="qwen-pool",stage="effective"} 1
# HELP llm_d_epp_flow_control_queue_bytes [ALPHA] Current total size in bytes of requests actively held in the Flow Control queue.
# TYPE llm_d_epp_flow_control_queue_bytes gauge
llm_d_epp_flow_control_queue_bytes{fairness_id="tenant-a",inference_pool="qwen-pool",model_name="qwen",priority="0",target_model_name="qwen"} 2048
# HELP llm_d_epp_flow_control_queue_size [ALPHA] Current number of requests actively held in the Flow Control queue.
# TYPE llm_d_epp_flow_control_queue_size gauge
llm_d_epp_flow_control_queue_size{fairness_id="tenant-a",inference_pool="qwen-pool",model_name="qwen",priority="0",target_model_name="qwen"} 3
llm_d_epp_flow_control_queue_size{fairness_id="tenant-b",inference_pool="qwen-pool",model_name="qwen",priority="0",target_model_name="qwen"} 2
llm_d_epp_flow_control_queue_size{fairness_id="tenant-a",inference_pool="qwen-pool",model_name="qwen-lora",priority="10",target_model_name="qwen-lora-a"} 1
# HELP llm_d_epp_ready_endpoints [ALPHA] The number of ready endpoints in the inference server pool.
# TYPE llm_d_epp_ready_endpoints gauge
llm_d_epp_ready_endpoints{name="qwen-pool"} 0
# HELP llm_d_epp_request_error_total [ALPHA] Total number of request errors.
# TYPE llm_d_epp_request_error_total counter
llm_d_epp_request_error_total{error_code="ServiceUnavailable",fairness_id="tenant-a",model_name="qwen",priority="0",target_model_name="qwen"} 4
# HELP llm_d_epp_request_total [ALPHA] Total number of processed requests.
# TYPE llm_d_epp_request_total counter
llm_d_epp_request_total{fairness_id="tenant-a",model_name="qwen",priority="0",target_model_name="qwen"} 30
llm_d_epp_request_total{fairness_id="tenant-b",model_name="qwen",priority="0",target_model_name="qwen"} 10
llm_d_epp_request_total{fairness_id="tenant-a",model_name="qwen-lora",priority="10",target_model_name="qwen-lora-a"} 5
"""

# the upstream Gateway API Inference Extension before InferenceModel became InferenceObjective: no flow control
EPP_INFERENCE_MODEL = """\
# HELP inference_model_request_total [ALPHA] Counter of inference model requests broken out for each model and target model.
# TYPE inference_model_request_total counter
inference_model_request_total{model_name="food-review",target_model_name="food-review-1"} 12
inference_model_request_total{model_name="food-review",target_model_name="food-review-2"} 3
inference_model_request_total{model_name="tweet-summary",target_model_name="tweet-summary-0"} 8
# HELP inference_pool_ready_pods [ALPHA] The number of ready pods in the inference server pool.
# TYPE inference_pool_ready_pods gauge
inference_pool_ready_pods{name="vllm-llama3-8b-instruct"} 0
"""

# the upstream extension's first flow-control gauge: labelled by fairness_id and priority only
EPP_UPSTREAM_FLOW_CONTROL = """\
# HELP inference_extension_flow_control_queue_size [ALPHA] Current number of requests being actively managed by the EPP flow control layer, from the start of the EnqueueAndWait call until a final outcome is reached.
# TYPE inference_extension_flow_control_queue_size gauge
inference_extension_flow_control_queue_size{fairness_id="default-flow",priority="0"} 6
inference_extension_flow_control_queue_size{fairness_id="batch",priority="-10"} 2
# HELP inference_objective_request_total [ALPHA] Counter of inference objective requests broken out for each model and target model.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="qwen",target_model_name="qwen"} 21
"""

NGINX_LABELS = 'controller_class="k8s.io/ingress-nginx",controller_namespace="ingress-nginx",controller_pod="ingress-nginx-controller-7d9c6bd6d8-x2k4q"'
INGRESS_NGINX = f"""\
# HELP nginx_ingress_controller_nginx_process_requests_total total number of client requests
# TYPE nginx_ingress_controller_nginx_process_requests_total counter
nginx_ingress_controller_nginx_process_requests_total{{{NGINX_LABELS}}} 9321
# HELP nginx_ingress_controller_request_duration_seconds The request processing time in milliseconds
# TYPE nginx_ingress_controller_request_duration_seconds histogram
nginx_ingress_controller_request_duration_seconds_bucket{{canary="",{NGINX_LABELS},host="qwen.example.com",ingress="qwen",method="POST",namespace="llm",path="/v1",service="qwen",status="200",le="+Inf"}} 120
nginx_ingress_controller_request_duration_seconds_sum{{canary="",{NGINX_LABELS},host="qwen.example.com",ingress="qwen",method="POST",namespace="llm",path="/v1",service="qwen",status="200"}} 310.2
nginx_ingress_controller_request_duration_seconds_count{{canary="",{NGINX_LABELS},host="qwen.example.com",ingress="qwen",method="POST",namespace="llm",path="/v1",service="qwen",status="200"}} 120
# HELP nginx_ingress_controller_requests The total number of client requests
# TYPE nginx_ingress_controller_requests counter
nginx_ingress_controller_requests{{canary="",{NGINX_LABELS},host="qwen.example.com",ingress="qwen",method="POST",namespace="llm",path="/v1",service="qwen",status="200"}} 120
nginx_ingress_controller_requests{{canary="",{NGINX_LABELS},host="qwen.example.com",ingress="qwen",method="POST",namespace="llm",path="/v1",service="qwen",status="503"}} 14
nginx_ingress_controller_requests{{canary="",{NGINX_LABELS},host="qwen.example.com",ingress="qwen",method="GET",namespace="llm",path="/v1",service="qwen-metrics",status="200"}} 6
nginx_ingress_controller_requests{{canary="",{NGINX_LABELS},host="llama.example.com",ingress="llama",method="POST",namespace="llm",path="/",service="llama",status="200"}} 77
nginx_ingress_controller_requests{{canary="",{NGINX_LABELS},host="grafana.example.com",ingress="grafana",method="GET",namespace="monitoring",path="/",service="grafana",status="200"}} 800
"""

# the interceptor labels by route (InterceptorRoute or HTTPScaledObject): the current names
KEDA_HTTP = """\
# HELP interceptor_request_concurrency Requests currently in-flight at the interceptor proxy
# TYPE interceptor_request_concurrency gauge
interceptor_request_concurrency{route_name="dashboard",route_namespace="web"} 0
interceptor_request_concurrency{route_name="qwen",route_namespace="llm"} 9
# HELP interceptor_request_count_total Total requests processed by the interceptor proxy
# TYPE interceptor_request_count_total counter
interceptor_request_count_total{code="200",method="GET",route_name="dashboard",route_namespace="web"} 40
interceptor_request_count_total{code="200",method="POST",route_name="qwen",route_namespace="llm"} 118
interceptor_request_count_total{code="504",method="POST",route_name="qwen",route_namespace="llm"} 2
# HELP interceptor_request_duration_seconds Time from request received to response written
# TYPE interceptor_request_duration_seconds histogram
interceptor_request_duration_seconds_bucket{code="200",method="POST",route_name="qwen",route_namespace="llm",le="10"} 100
interceptor_request_duration_seconds_bucket{code="200",method="POST",route_name="qwen",route_namespace="llm",le="+Inf"} 118
interceptor_request_duration_seconds_sum{code="200",method="POST",route_name="qwen",route_namespace="llm"} 902.5
interceptor_request_duration_seconds_count{code="200",method="POST",route_name="qwen",route_namespace="llm"} 118
# HELP target_info Target metadata
# TYPE target_info gauge
target_info{service_name="interceptor-proxy",service_version="v0.12.0"} 1
"""

# the interim names, still labelled by route
KEDA_HTTP_INTERIM = """\
# HELP interceptor_pending_requests Requests currently in-flight at the interceptor proxy
# TYPE interceptor_pending_requests gauge
interceptor_pending_requests{route_name="qwen",route_namespace="llm"} 4
# HELP interceptor_requests_total Total requests processed by the interceptor proxy
# TYPE interceptor_requests_total counter
interceptor_requests_total{code="200",method="POST",route_name="qwen",route_namespace="llm"} 31
"""

# the interceptor's first exporter: labelled by host, with the OpenTelemetry scope labels
KEDA_HTTP_HOST = """\
# HELP interceptor_pending_request_count a count of requests pending forwarding by the interceptor proxy
# TYPE interceptor_pending_request_count gauge
interceptor_pending_request_count{host="qwen.example.com",otel_scope_name="keda-interceptor-proxy",otel_scope_schema_url="",otel_scope_version=""} 5
interceptor_pending_request_count{host="blog.example.com",otel_scope_name="keda-interceptor-proxy",otel_scope_schema_url="",otel_scope_version=""} 0
# HELP interceptor_request_count_total a counter of requests processed by the interceptor proxy
# TYPE interceptor_request_count_total counter
interceptor_request_count_total{code="200",host="qwen.example.com",method="POST",otel_scope_name="keda-interceptor-proxy",otel_scope_schema_url="",otel_scope_version="",path="/v1/chat/completions"} 61
interceptor_request_count_total{code="502",host="qwen.example.com",method="POST",otel_scope_name="keda-interceptor-proxy",otel_scope_schema_url="",otel_scope_version="",path="/v1/chat/completions"} 1
interceptor_request_count_total{code="200",host="blog.example.com",method="GET",otel_scope_name="keda-interceptor-proxy",otel_scope_schema_url="",otel_scope_version="",path="/"} 12
# HELP target_info Target metadata
# TYPE target_info gauge
target_info{service_name="interceptor-proxy",service_version="0.8.0"} 1
"""

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM_ROUTER = f"""\
# HELP vllm:num_requests_running Number of running requests
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{server="http://vllm-llama-engine-0.vllm-llama-engine-service:8000"}} 3.0
# HELP vllm:current_qps Current Queries Per Second
# TYPE vllm:current_qps gauge
vllm:current_qps{{server="http://vllm-llama-engine-0.vllm-llama-engine-service:8000"}} 1.4
# HELP vllm:num_incoming_requests_total Total valid incoming requests to router (including when no backends available).
# TYPE vllm:num_incoming_requests_total counter
vllm:num_incoming_requests_total{{model="{LLAMA}"}} 57.0
vllm:num_incoming_requests_total{{model="Qwen/Qwen3-8B"}} 9.0
# HELP vllm:num_incoming_requests_created Total valid incoming requests to router (including when no backends available).
# TYPE vllm:num_incoming_requests_created gauge
vllm:num_incoming_requests_created{{model="{LLAMA}"}} 1.7522e+09
vllm:num_incoming_requests_created{{model="Qwen/Qwen3-8B"}} 1.7522e+09
# HELP router_cpu_usage_percent CPU usage percent
# TYPE router_cpu_usage_percent gauge
router_cpu_usage_percent 3.1
"""


def read_body(text: str, fmt: str, match: str | None) -> tuple[float | None, float | None]:
    return read(parse(text, selection(fmt)), fmt, match)


def test_the_formats_are_the_metadata_choices() -> None:
    assert tuple(FORMATS) == REQUEST_PATH_FORMATS
    assert all(spec.name == name and spec.source for name, spec in FORMATS.items())
    assert all(spec.arrived for spec in FORMATS.values())


def test_the_selection_is_made_once_and_holds_every_name() -> None:
    assert selection("epp") is selection("epp")
    spec = FORMATS["envoy"]
    assert selection("envoy").families == {*spec.arrived, *spec.held, *spec.turned_away}


@pytest.mark.parametrize(
    ("body", "fmt", "match", "want"),
    [
        # Envoy: requests given to the cluster's hosts plus those answered "no healthy upstream"
        pytest.param(ENVOY, "envoy", QWEN, (1207 + 17, 7), id="envoy-qwen"),
        pytest.param(ENVOY, "envoy", "httproute/llm/llama/rule/0", (431, 0), id="envoy-llama"),
        pytest.param(ENVOY, "envoy", None, (431 + 1207 + 3 + 17, 7), id="envoy-all"),
        pytest.param(ISTIO, "envoy", ISTIO_QWEN, (52 + 4, 2), id="istio-qwen"),
        # EPP: the llm_d_epp_ twins are read, the deprecated series not counted again
        pytest.param(EPP_DUAL, "epp", "qwen", (40, 5), id="epp-dual-qwen"),
        pytest.param(EPP_DUAL, "epp", "qwen-lora", (5, 1), id="epp-dual-qwen-lora"),
        pytest.param(EPP_DUAL, "epp", None, (45, 6), id="epp-dual-all"),
        pytest.param(
            EPP_INFERENCE_MODEL, "epp", "food-review", (15, None), id="epp-inference-model-food-review"
        ),
        pytest.param(EPP_INFERENCE_MODEL, "epp", None, (23, None), id="epp-inference-model-all"),
        # a gauge without the model label cannot be read for a model, only as the whole pool's
        pytest.param(
            EPP_UPSTREAM_FLOW_CONTROL, "epp", "qwen", (21, None), id="epp-upstream-flow-control-qwen"
        ),
        pytest.param(EPP_UPSTREAM_FLOW_CONTROL, "epp", None, (21, 8), id="epp-upstream-flow-control-all"),
        # ingress-nginx: by ingress or by service; nothing held
        pytest.param(INGRESS_NGINX, "ingress-nginx", "qwen", (120 + 14 + 6, None), id="ingress-nginx-qwen"),
        pytest.param(
            INGRESS_NGINX, "ingress-nginx", "qwen-metrics", (6, None), id="ingress-nginx-qwen-metrics"
        ),
        pytest.param(
            INGRESS_NGINX, "ingress-nginx", None, (120 + 14 + 6 + 77 + 800, None), id="ingress-nginx-all"
        ),
        # the KEDA HTTP add-on's interceptor, under each of its names
        pytest.param(KEDA_HTTP, "keda-http", "qwen", (120, 9), id="keda-http-qwen"),
        pytest.param(KEDA_HTTP, "keda-http", None, (160, 9), id="keda-http-all"),
        pytest.param(KEDA_HTTP_INTERIM, "keda-http", "qwen", (31, 4), id="keda-http-interim-qwen"),
        pytest.param(
            KEDA_HTTP_HOST, "keda-http", "qwen.example.com", (62, 5), id="keda-http-host-qwen.example.com"
        ),
        pytest.param(
            KEDA_HTTP_HOST, "keda-http", "blog.example.com", (12, 0), id="keda-http-host-blog.example.com"
        ),
        # vLLM production-stack's router: counted per model, nothing held
        pytest.param(VLLM_ROUTER, "vllm-router", LLAMA, (57, None), id="vllm-router-llama"),
        pytest.param(VLLM_ROUTER, "vllm-router", None, (66, None), id="vllm-router-all"),
    ],
)
def test_each_format_reads_its_projects_exposition(
    body: str, fmt: str, match: str | None, want: tuple[float | None, float | None]
) -> None:
    assert read_body(body, fmt, match) == want


def test_a_family_with_series_but_none_of_the_match_is_zero() -> None:
    body = EPP_DUAL.replace('model_name="qwen-lora"', 'model_name="mistral"').replace(
        'fairness_id="tenant-a",inference_pool="qwen-pool",model_name="mistral"',
        'fairness_id="tenant-a",inference_pool="qwen-pool",model_name="qwen"',
    )
    assert read_body(body, "epp", "mistral") == (5, 0)


def test_the_newest_name_is_read_even_where_it_counts_differently() -> None:
    """A source writes both names of a renamed family: only the newest is counted, whatever the other says."""
    body = EPP_DUAL.replace(
        'inference_objective_request_total{model_name="qwen",priority="0",target_model_name="qwen"} 40',
        'inference_objective_request_total{model_name="qwen",priority="0",target_model_name="qwen"} 9999',
    )
    assert read_body(body, "epp", "qwen") == (40, 5)


@pytest.mark.parametrize(
    ("body", "fmt", "match", "message"),
    [
        (
            ENVOY,
            "envoy",
            "httproute/llm/qwen/rule/1",
            "no series of envoy_cluster_upstream_rq_total, envoy_cluster_upstream_cx_none_healthy or "
            'envoy_cluster_upstream_rq_pending_active with envoy_cluster_name="httproute/llm/qwen/rule/1" or '
            'cluster_name="httproute/llm/qwen/rule/1"',
        ),
        (
            EPP_DUAL,
            "epp",
            "Qwen",
            'no series of llm_d_epp_request_total or llm_d_epp_flow_control_queue_size with model_name="Qwen"',
        ),
        (
            EPP_INFERENCE_MODEL,
            "epp",
            "qwen",
            "no series of inference_model_request_total or llm_d_epp_flow_control_queue_size with "
            'model_name="qwen"',
        ),
        (
            INGRESS_NGINX,
            "ingress-nginx",
            "mistral",
            'no series of nginx_ingress_controller_requests with ingress="mistral" or service="mistral"',
        ),
        (
            KEDA_HTTP,
            "keda-http",
            "qwen.example.com",
            "no series of interceptor_request_count_total or interceptor_request_concurrency with "
            'route_name="qwen.example.com" or host="qwen.example.com"',
        ),
        (
            VLLM_ROUTER,
            "vllm-router",
            "Qwen/Qwen3-32B",
            'no series of vllm:num_incoming_requests_total with model="Qwen/Qwen3-32B"',
        ),
        # the exposition of another project: nothing of this format at all
        (
            INGRESS_NGINX,
            "vllm-router",
            None,
            "no series of vllm:num_incoming_requests_total",
        ),
        (
            "",
            "epp",
            None,
            "no series of llm_d_epp_request_total or llm_d_epp_flow_control_queue_size",
        ),
    ],
)
def test_no_series_of_the_workload_is_an_error_never_zero(
    body: str, fmt: str, match: str | None, message: str
) -> None:
    with pytest.raises(GatewayError) as raised:
        read_body(body, fmt, match)
    assert str(raised.value) == message
    assert isinstance(raised.value, ScalerError)


@pytest.mark.parametrize(("value", "why"), [("NaN", "NaN"), ("+Inf", "infinite"), ("-3", "negative (-3)")])
def test_a_counted_value_that_cannot_be_right_is_an_error(value: str, why: str) -> None:
    body = ENVOY.replace(
        f'envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="{QWEN}"}} 7',
        f'envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="{QWEN}"}} {value}',
    )
    with pytest.raises(GatewayError) as raised:
        read_body(body, "envoy", QWEN)
    assert str(raised.value) == (
        f'envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="{QWEN}"}} is {why}: '
        "the held requests cannot be read"
    )


def test_a_bad_value_of_another_workload_is_not_read() -> None:
    body = INGRESS_NGINX.replace('service="grafana",status="200"} 800', 'service="grafana",status="200"} NaN')
    assert "NaN" in body
    assert read_body(body, "ingress-nginx", "llama") == (77, None)
    with pytest.raises(GatewayError, match=r'ingress="grafana".* is NaN: the arrivals cannot be read'):
        read_body(body, "ingress-nginx", None)


def test_an_unknown_format_is_an_error() -> None:
    with pytest.raises(GatewayError) as raised:
        read({}, "traefik", None)
    assert str(raised.value) == (
        'request path format "traefik" must be one of [envoy, epp, ingress-nginx, keda-http, vllm-router]'
    )
