"""Engine endpoint discovery from pod annotations: both annotation forms, their defaults, every bad value with
its exact message, and the rule that only pods holding one of this node's GPUs are scraped."""

from __future__ import annotations

import pytest

from gpuscale.agent.engines.discovery import (
    Endpoint,
    EndpointProblem,
    discover,
    endpoint_of,
    pods_holding_gpus,
)
from gpuscale.model import Assignment, ContainerRef, PodInfo


def pod(annotations: dict[str, str], ip: str = "10.0.0.7", name: str = "llm-0") -> PodInfo:
    return PodInfo("ml", name, f"uid-{name}", annotations=annotations, ip=ip)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"gpuscale.io/metrics-port": "8000"}, Endpoint("http", "10.0.0.7", 8000, "/metrics", "gpuscale.io")),
        (
            {
                "gpuscale.io/metrics-port": "8443",
                "gpuscale.io/metrics-path": "/engine/metrics",
                "gpuscale.io/metrics-scheme": "HTTPS",
            },
            Endpoint("https", "10.0.0.7", 8443, "/engine/metrics", "gpuscale.io"),
        ),
        (
            {"prometheus.io/scrape": "true", "prometheus.io/port": "8002"},
            Endpoint("http", "10.0.0.7", 8002, "/metrics", "prometheus.io"),
        ),
        (
            {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "prometheus.io/path": "/m?format=prometheus",
                "prometheus.io/scheme": "https",
            },
            Endpoint("https", "10.0.0.7", 9090, "/m?format=prometheus", "prometheus.io"),
        ),
        # gpuscale.io/ wins over prometheus.io/ (which may point at a sidecar's exporter)
        (
            {
                "gpuscale.io/metrics-port": "8000",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9100",
            },
            Endpoint("http", "10.0.0.7", 8000, "/metrics", "gpuscale.io"),
        ),
        # asks for no scrape
        ({}, None),
        ({"prometheus.io/scrape": "false", "prometheus.io/port": "8000"}, None),
        ({"prometheus.io/port": "8000"}, None),
    ],
)
def test_endpoints(annotations: dict[str, str], expected: Endpoint | None) -> None:
    assert endpoint_of(pod(annotations)) == expected


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        (
            {"gpuscale.io/metrics-port": "80a"},
            'annotation gpuscale.io/metrics-port value "80a" must be a port number 1-65535',
        ),
        (
            {"gpuscale.io/metrics-port": "0"},
            'annotation gpuscale.io/metrics-port value "0" must be a port number 1-65535',
        ),
        (
            {"gpuscale.io/metrics-port": "65536"},
            'annotation gpuscale.io/metrics-port value "65536" must be a port number 1-65535',
        ),
        (
            {"gpuscale.io/metrics-port": "\uff18\uff10"},  # full-width digits: str.isdigit() says yes
            'annotation gpuscale.io/metrics-port value "\\uff18\\uff10" must be a port number 1-65535',
        ),
        (
            {"gpuscale.io/metrics-port": ""},
            'annotation gpuscale.io/metrics-port value "" must be a port number 1-65535',
        ),
        (
            {"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-scheme": "grpc"},
            'annotation gpuscale.io/metrics-scheme value "grpc" must be one of [http, https]',
        ),
        (
            {"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "metrics"},
            'annotation gpuscale.io/metrics-path value "metrics" must be a path starting with / '
            "(printable ASCII, no spaces, at most 1024 characters)",
        ),
        (
            {"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "/a b"},
            'annotation gpuscale.io/metrics-path value "/a b" must be a path starting with / '
            "(printable ASCII, no spaces, at most 1024 characters)",
        ),
        (
            {"gpuscale.io/metrics-port": "8000\n9000"},  # stays one log line
            'annotation gpuscale.io/metrics-port value "8000\\n9000" must be a port number 1-65535',
        ),
        (
            {"prometheus.io/scrape": "true", "prometheus.io/port": "http"},
            'annotation prometheus.io/port value "http" must be a port number 1-65535',
        ),
        (
            {"prometheus.io/scrape": "true"},
            'annotation prometheus.io/scrape is "true" but prometheus.io/port is not set: '
            "set it (or gpuscale.io/metrics-port) to the engine's metrics port",
        ),
    ],
)
def test_bad_annotations_name_key_value_and_what_is_allowed(annotations: dict[str, str], reason: str) -> None:
    assert endpoint_of(pod(annotations)) == EndpointProblem(reason)


def test_no_ip_yet_is_a_problem_not_an_endpoint() -> None:
    assert endpoint_of(pod({"gpuscale.io/metrics-port": "8000"}, ip="")) == EndpointProblem(
        "the pod has no IP yet (status.podIP is empty)"
    )


def test_ipv6_pod_ip_is_bracketed_in_the_url() -> None:
    found = endpoint_of(pod({"gpuscale.io/metrics-port": "8000"}, ip="fd00::7"))
    assert isinstance(found, Endpoint) and found.url == "http://[fd00::7]:8000/metrics"


def test_only_pods_holding_a_gpu_of_this_node_are_scraped() -> None:
    engine = {"gpuscale.io/metrics-port": "8000"}
    pods = {
        ("ml", "llm-0"): pod(engine, name="llm-0"),
        ("ml", "llm-1"): pod(engine, name="llm-1", ip="10.0.0.8"),  # annotated, holds no GPU here
        ("ml", "train"): pod({}, name="train"),  # holds a GPU, no engine endpoint
        ("ml", "bad"): pod({"gpuscale.io/metrics-port": "x"}, name="bad"),
    }
    assignments = {
        "GPU-0": (Assignment(ContainerRef("ml", "llm-0", "vllm"), "nvidia.com/gpu", "GPU-0"),),
        "GPU-1": (Assignment(ContainerRef("ml", "train", "main"), "nvidia.com/gpu", "GPU-1"),),
        "GPU-2": (Assignment(ContainerRef("ml", "bad", "main"), "nvidia.com/gpu", "GPU-2"),),
        "GPU-3": (Assignment(ContainerRef("ml", "gone", "main"), "nvidia.com/gpu", "GPU-3"),),  # no PodInfo
    }
    holders = pods_holding_gpus(assignments)
    assert holders == {("ml", "llm-0"), ("ml", "train"), ("ml", "bad"), ("ml", "gone")}
    assert discover(pods, holders) == {
        ("ml", "llm-0"): Endpoint("http", "10.0.0.7", 8000, "/metrics", "gpuscale.io"),
        ("ml", "bad"): EndpointProblem(
            'annotation gpuscale.io/metrics-port value "x" must be a port number 1-65535'
        ),
    }
