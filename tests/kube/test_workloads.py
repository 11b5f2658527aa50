"""WorkloadResolver against FakeApiServer: ScaledObject → scaleTargetRef → discovery → /scale selector."""

from __future__ import annotations

import asyncio

import pytest

from gpuscale.kube._http import KubeApi, get_json
from gpuscale.kube.errors import WorkloadResolutionError
from gpuscale.kube.workloads import ResolvedWorkload, ScaleTarget, WorkloadResolver
from tests.fakes.apiserver import FakeApiServer, format_label_selector, make_pod, match_labels


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_deployment_default_kind(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_deployment("ml", "web", {"app": "web", "tier": "gpu"})
    apiserver.put_scaled_object("ml", "web-so", {"name": "web"})
    resolver = WorkloadResolver(api)
    assert await resolver.resolve("ml", "web-so") == ResolvedWorkload(
        "ml", "web-so", ScaleTarget("apps/v1", "Deployment", "web"), "app=web,tier=gpu"
    )
    assert any(
        r.startswith("GET /apis/apps/v1/namespaces/ml/deployments/web/scale") for r in apiserver.requests
    )


async def test_selector_finds_the_pods(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_deployment("ml", "web", {"app": "web"})
    apiserver.put_scaled_object("ml", "so", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
    for i, app in enumerate(["web", "web", "other"]):
        apiserver.add_pod(make_pod("ml", f"p{i}", node="n", labels={"app": app}))
    selector = await WorkloadResolver(api).selector("ml", "so")
    pods = await get_json(api, "/api/v1/namespaces/ml/pods", [("labelSelector", selector)])
    assert [p["metadata"]["name"] for p in pods["items"]] == ["p0", "p1"]


async def test_statefulset_and_custom_resource_with_match_expressions(
    apiserver: FakeApiServer, api: KubeApi
) -> None:
    apiserver.put_object(
        "apps/v1",
        "statefulsets",
        {
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "ml"},
            "spec": {
                "replicas": 2,
                "selector": {
                    "matchLabels": {"app": "db"},
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["b", "a"]},
                        {"key": "canary", "operator": "DoesNotExist"},
                    ],
                },
            },
        },
    )
    apiserver.add_resource("argoproj.io/v1alpha1", "rollouts", "Rollout")
    apiserver.put_object(
        "argoproj.io/v1alpha1",
        "rollouts",
        {
            "kind": "Rollout",
            "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}}},
            "status": {"replicas": 1, "selector": "app=llm"},
        },
    )
    apiserver.put_scaled_object("ml", "db-so", {"kind": "StatefulSet", "name": "db"})
    apiserver.put_scaled_object(
        "ml", "llm-so", {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "llm"}
    )
    resolver = WorkloadResolver(api)
    assert await resolver.selector("ml", "db-so") == "app=db,!canary,zone in (a,b)"
    assert await resolver.selector("ml", "llm-so") == "app=llm"


async def test_ttl_cache_and_shared_inflight(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_deployment("ml", "web", {"app": "web"})
    apiserver.put_scaled_object("ml", "so", {"name": "web"})
    clock = Clock()
    resolver = WorkloadResolver(api, ttl_s=30, clock=clock)
    results = await asyncio.gather(*(resolver.selector("ml", "so") for _ in range(5)))
    assert results == ["app=web"] * 5

    def scale_gets() -> int:
        return sum(r.endswith("/scale") for r in apiserver.requests)

    assert scale_gets() == 1
    apiserver.put_deployment("ml", "web", {"app": "web2"})
    clock.now += 29
    assert await resolver.selector("ml", "so") == "app=web"
    clock.now += 2
    assert await resolver.selector("ml", "so") == "app=web2"
    assert scale_gets() == 2
    resolver.invalidate("ml", "so")
    assert await resolver.selector("ml", "so") == "app=web2"
    assert scale_gets() == 3
    assert sum(r == "GET /apis/apps/v1" for r in apiserver.requests) == 1  # discovery is cached


@pytest.mark.parametrize(
    ("setup", "message", "status"),
    [
        (
            "none",
            "ScaledObject ml/so: cannot read the ScaledObject: GET /apis/keda.sh/v1alpha1/namespaces/ml/"
            'scaledobjects/so: HTTP 404 NotFound: scaledobjects.keda.sh "so" not found',
            404,
        ),
        ("no-name", "ScaledObject ml/so: spec.scaleTargetRef.name is missing", 0),
        (
            "no-target",
            "ScaledObject ml/so: cannot read the /scale of scale target Deployment ml/web (apps/v1): "
            "GET /apis/apps/v1/namespaces/ml/deployments/web/scale: HTTP 404 NotFound: "
            'deployments.apps "web" not found',
            404,
        ),
        ("bad-kind", "ScaledObject ml/so: the API server serves no kind Deploymnet in apps/v1", 0),
        (
            "bad-group",
            "ScaledObject ml/so: cannot discover the resources of example.com/v1: GET /apis/example.com/v1: "
            "HTTP 404 NotFound: the server could not find the requested resource",
            404,
        ),
        ("not-scalable", "ScaledObject ml/so: Pod (v1) has no /scale subresource", 0),
        (
            "no-selector",
            "ScaledObject ml/so: the /scale of scale target Deployment ml/web (apps/v1) reports no "
            "status.selector, so its pods cannot be found; set podSelector in the trigger metadata",
            0,
        ),
    ],
)
async def test_errors_name_the_object(
    apiserver: FakeApiServer, api: KubeApi, setup: str, message: str, status: int
) -> None:
    target = {
        "none": None,
        "no-name": {"kind": "Deployment"},
        "no-target": {"name": "web"},
        "bad-kind": {"kind": "Deploymnet", "name": "web"},
        "bad-group": {"apiVersion": "example.com/v1", "kind": "Thing", "name": "web"},
        "not-scalable": {"apiVersion": "v1", "kind": "Pod", "name": "web"},
        "no-selector": {"name": "web"},
    }[setup]
    if target is not None:
        apiserver.put_scaled_object("ml", "so", target)
    if setup == "no-selector":
        apiserver.put_object(
            "apps/v1", "deployments", {"metadata": {"name": "web", "namespace": "ml"}, "spec": {}}
        )
    with pytest.raises(WorkloadResolutionError) as info:
        await WorkloadResolver(api).resolve("ml", "so")
    assert str(info.value) == message
    assert (info.value.namespace, info.value.name, info.value.status) == ("ml", "so", status)


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web,tier!=cpu", {"app": "web", "tier": "gpu"}, True),
        ("app in (a,b),!canary", {"app": "b"}, True),
        ("app in (a,b)", {}, False),
        ("app notin (a,b)", {"app": "c"}, True),
        ("app", {"other": "x"}, False),
        ("", {"x": "y"}, True),
    ],
)
def test_fake_label_selector(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert match_labels(selector, labels) is matches


def test_fake_format_label_selector() -> None:
    assert format_label_selector({"matchLabels": {"b": "2", "a": "1"}}) == "a=1,b=2"
