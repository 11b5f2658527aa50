"""The Helm chart's RBAC on the real API server: the chart is rendered (Helm's Go SDK, as tests/deploy do),
its ServiceAccounts, ClusterRoles and bindings applied, and tokens for the agent's and the scaler's
ServiceAccounts issued by the API server (TokenRequest). Agents and a scaler running with only those tokens
read pods and nodes, resolve the ScaledObject's target through ``/scale``, and a ScaledObject scales through
them. A permission the chart lacks shows up here as a 403 in their logs and a workload that never scales."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscale.controlplane import ControlPlane
from gpuscale.controlplane.client import wait_for
from gpuscale.controlplane.pki import write_kubeconfig
from gpuscale.controlplane.stack import GpuStack
from tests.deploy.helpers import NAMESPACE, find, objects, render_chart

from .helpers import (
    attributed_pods,
    delete_namespace,
    deployment,
    fast_scale_down,
    make_namespace,
    render_scaled_object,
    wait_replicas,
    wait_running,
)

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def _token(plane: ControlPlane, service_account: str) -> str:
    review = plane.client.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{service_account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return str(review["status"]["token"])


@pytest.fixture
def chart_stack(gpus: GpuStack, tmp_path: Path) -> Iterator[GpuStack]:
    plane = gpus.plane
    objs = objects(render_chart())
    make_namespace(plane.client, NAMESPACE)
    plane.client.apply_all(o for o in objs if o["kind"] in RBAC_KINDS)
    agent_sa = find(objs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    scaler_sa = find(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert plane.pki is not None
    kubeconfigs = {
        sa: write_kubeconfig(
            tmp_path / f"{sa}.kubeconfig", plane.server, plane.pki.ca_cert, user=sa, token=_token(plane, sa)
        )
        for sa in (agent_sa, scaler_sa)
    }
    stack = GpuStack(
        plane,
        prefix="chart-",
        agent_kubeconfig=kubeconfigs[agent_sa],
        scaler_kubeconfig=kubeconfigs[scaler_sa],
    )
    stack.start()
    yield stack
    logs = {p.name: p.log_path for p in plane.processes if p.name.startswith("chart-")}
    stack.stop()
    forbidden = {
        name: path for name, path in logs.items() if "forbidden" in path.read_text(errors="replace").lower()
    }
    assert not forbidden, f"403s under the chart's RBAC, see {forbidden}"


def test_agent_and_scaler_work_under_the_charts_service_accounts(chart_stack: GpuStack) -> None:
    stack = chart_stack
    client = stack.plane.client
    ns = make_namespace(client, "e2e-chart-rbac")
    try:
        deployment(client, ns, "llm", replicas=1)
        (pod,) = wait_running(client, ns, "llm", 1, 60)
        wait_for(
            "the chart-RBAC agents attribute the pod",
            lambda: (
                True
                if (ns, pod["metadata"]["name"])
                in attributed_pods([a.metrics_url for a in stack.agents.values()])
                else None
            ),
            30,
        )
        so = render_scaled_object(
            "--mode", "external", "--target", "deployment/llm", "--namespace", ns,
            "--scaler-address", stack.scaler_address, "--metric", "gpu_utilization", "--aggregation", "avg",
            "--target-value", "50", "--window", "2", "--min-replicas", "1", "--max-replicas", "3",
            "--polling-interval", "2",
        )  # fmt: skip
        client.apply(fast_scale_down(so))
        stack.set_load(90)
        wait_replicas(client, ns, "llm", lambda n: n == 3, 150, what="== 3 through the chart-RBAC scaler")
    finally:
        delete_namespace(client, ns)
