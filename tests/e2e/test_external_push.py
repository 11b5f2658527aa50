"""``external-push``: a pool-scope trigger (the GPUs of the nodes matching ``nodeSelector``) wakes a
Deployment from zero replicas through the scaler's ``StreamIsActive``, and KEDA's polling takes it back to
zero once the pool is idle for ``cooldownPeriod``. Workload scope cannot wake a workload from zero (it has
no GPUs then, docs/metadata.md), so activation from zero is a pool's."""

from __future__ import annotations

from gpuscale.controlplane.stack import GpuStack

from .helpers import (
    condition,
    delete_namespace,
    deployment,
    make_namespace,
    render_scaled_object,
    scaled_object,
    sleep_watching,
    spec_replicas,
    wait_replicas,
    wait_running,
)


def test_external_push_wakes_from_zero_and_returns_to_zero(gpus: GpuStack) -> None:
    client = gpus.plane.client
    ns = make_namespace(client, "e2e-push")
    try:
        deployment(client, ns, "batch", replicas=0)
        so = render_scaled_object(
            "--mode", "external-push", "--target", "deployment/batch", "--namespace", ns,
            "--scaler-address", gpus.scaler_address, "--scope", "pool",
            "--node-selector", "kubernetes.io/hostname=gpu-node-2", "--metric", "gpu_utilization",
            "--aggregation", "avg", "--target-value", "50", "--activation-value", "30", "--window", "2",
            "--min-replicas", "0", "--max-replicas", "2", "--polling-interval", "5", "--cooldown-period", "5",
        )  # fmt: skip
        assert so["spec"]["triggers"][0]["type"] == "external-push"
        client.apply(so)
        # idle pool: stays at zero, the ScaledObject is ready and inactive
        sleep_watching(8, lambda: None)
        assert spec_replicas(client, ns, "batch") == 0
        status = scaled_object(client, ns, "batch")
        assert condition(status, "Ready") == "True", status.get("status")
        assert condition(status, "Active") == "False", status.get("status")

        gpus.set_load(10, {"gpu-node-2": 80})  # only the pool's node is busy
        wait_replicas(client, ns, "batch", lambda n: n >= 1, 60, what=">= 1 once the pool is busy")
        wait_running(client, ns, "batch", spec_replicas(client, ns, "batch"), 60)
        assert condition(scaled_object(client, ns, "batch"), "Active") == "True"

        gpus.set_load(0)
        wait_replicas(client, ns, "batch", lambda n: n == 0, 90, what="== 0 once the pool is idle")
        assert condition(scaled_object(client, ns, "batch"), "Active") == "False"
    finally:
        delete_namespace(client, ns)
