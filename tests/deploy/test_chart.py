"""The Helm chart, rendered and linted by Helm's own Go SDK, every object checked against Kubernetes' schemas."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
import yaml

from gpuscale.scaling.profiles import parse_profiles

from .helpers import (
    CHART,
    IMAGE,
    KUBE_VERSION,
    NAMESPACE,
    find,
    notes_scaledobject,
    objects,
    render_chart,
    validate_all,
    with_image,
)

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "amd": {
        "agent": {
            "backend": "amdsmi",
            "amd": {"enabled": True, "visibleDevices": "all"},
            "nvidia": {"visibleDevices": ""},
        }
    },
    "tls": {"scaler": {"tls": {"enabled": True, "secretName": "gpuscale-tls", "clientAuth": True}}},
    "agent-tls": {"agent": {"tls": {"enabled": True, "secretName": "gpuscale-agent-tls"}}},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        },
    },
    "runtime-class": {"agent": {"runtimeClassName": "nvidia", "hostPID": False}},
    "agent-scaler": {"agent": {"serveExternalScaler": True}, "networkPolicy": {"enabled": True}},
    "platform": {
        "agent": {
            "serviceAccount": {"create": False, "name": "gpu-monitoring"},
            "podSecurityContext": {"fsGroup": 2000},
            "containerSecurityContext": {"readOnlyRootFilesystem": False},
            "extraArgs": ["--attribution-interval=10"],
            "extraVolumes": [{"name": "extra", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "extra", "mountPath": "/extra"}],
            "criticalPodsQuota": 500,
            "tls": {
                "enabled": True,
                "secretName": "gpuscale-agent-tls",
                "certManager": {"enabled": True, "issuerRef": {"name": "ca", "kind": "ClusterIssuer"}},
            },
        },
        "scaler": {
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                }
            ],
            "extraArgs": ["--dns-interval=10"],
            "tls": {
                "enabled": True,
                "secretName": "gpuscale-tls",
                "certManager": {"enabled": True, "issuerRef": {"name": "ca"}, "duration": "2160h"},
            },
        },
    },
    "clusterip-custom": {
        "scaler": {
            "service": {"headless": False},
            "replicas": 3,
            "profiles": {"my-llm": {"extends": "llm-serving", "targetValue": 8}},
        },
        "agent": {"extraResourceNames": ["nvidia.com/gpu.shared"], "runAsUser": 65532},
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, str]]:
    return {name: render_chart(values) for name, values in VARIANTS.items()}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_renders_valid_objects(rendered: dict[str, dict[str, str]], variant: str) -> None:
    objs = objects(rendered[variant])
    validate_all(objs)
    kinds = sorted(o["kind"] for o in objs)
    for kind in (
        "DaemonSet",
        "Deployment",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ):
        assert kind in kinds, kind
    assert notes_scaledobject(rendered[variant]["gpuscale/templates/NOTES.txt"])  # parses


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_clean(variant: str) -> None:
    report = helm.lint(
        str(CHART),
        with_image(VARIANTS[variant]),
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{KUBE_VERSION}.0",
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def _agent_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_agent_is_unprivileged(rendered: dict[str, dict[str, str]]) -> None:
    for variant in ("default", "amd", "runtime-class"):
        pod = _agent_pod(objects(rendered[variant]))
        (c,) = pod["containers"]
        sc = c["securityContext"]
        assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        # user 0 to reach the kubelet's root-owned socket, and nothing more: no capability, no escalation
        assert pod["securityContext"]["runAsUser"] == 0 and pod["securityContext"]["runAsNonRoot"] is False
        assert "hostNetwork" not in pod and "hostIPC" not in pod
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["pod-resources"] == {
            "name": "pod-resources",
            "mountPath": "/var/lib/kubelet/pod-resources",
            "readOnly": True,
        }
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["resources"]["limits"] and c["resources"]["requests"]
        assert "--kubelet-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in c["args"]


def test_agent_gpu_settings(rendered: dict[str, dict[str, str]]) -> None:
    default = _agent_pod(objects(rendered["default"]))
    assert default["hostPID"] is True and "runtimeClassName" not in default
    env = {e["name"]: e.get("value") for e in default["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "AMD_VISIBLE_DEVICES" not in env
    terms = default["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [  # any GPU label: terms are ORed
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
        {
            "matchExpressions": [
                {"key": "feature.node.kubernetes.io/amd-gpu", "operator": "In", "values": ["true"]}
            ]
        },
    ]
    assert {t["key"] for t in default["tolerations"]} == {"nvidia.com/gpu", "amd.com/gpu"}

    rc = _agent_pod(objects(rendered["runtime-class"]))
    assert rc["runtimeClassName"] == "nvidia" and rc["hostPID"] is False

    amd = _agent_pod(objects(rendered["amd"]))
    env = {e["name"]: e.get("value") for e in amd["containers"][0]["env"]}
    assert env["AMD_VISIBLE_DEVICES"] == "all" and "NVIDIA_VISIBLE_DEVICES" not in env
    assert "--backend=amdsmi" in amd["containers"][0]["args"]
    assert {v["name"]: v["hostPath"]["path"] for v in amd["volumes"] if "hostPath" in v} == {
        "pod-resources": "/var/lib/kubelet/pod-resources",
        "dev-kfd": "/dev/kfd",
        "dev-dri": "/dev/dri",
    }

    scaler = _agent_pod(objects(rendered["agent-scaler"]))
    assert "--serve-external-scaler" in scaler["containers"][0]["args"]


def test_rbac_is_least_privilege(rendered: dict[str, dict[str, str]]) -> None:
    objs = objects(rendered["default"])
    assert find(objs, "ClusterRole", "gpuscale-agent")["rules"] == [
        {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    assert find(objs, "ClusterRole", "gpuscale-scaler")["rules"] == [
        {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        # a trigger's requestPath: its Service and the Service's ready endpoints (of those, only its pods,
        # listed with the pods rule above)
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    assert not [o for o in objs if o["kind"] in ("Role", "RoleBinding")]
    for name in ("gpuscale-agent", "gpuscale-scaler"):
        binding = find(objs, "ClusterRoleBinding", name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    narrowed = objects(render_chart({"scaler": {"scaleTargetGroups": ["apps"]}}))
    assert find(narrowed, "ClusterRole", "gpuscale-scaler")["rules"][1]["apiGroups"] == ["apps"]
    assert not [
        o for o in objects(render_chart({"rbac": {"create": False}})) if o["kind"].startswith("Cluster")
    ]


def test_scaler_deployment(rendered: dict[str, dict[str, str]]) -> None:
    objs = objects(rendered["default"])
    dep = find(objs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][:4] == [
        "--log-level=info",
        "--log-format=text",
        "scaler",
        "--agents-dns=gpuscale-agent.gpuscale.svc.cluster.local:6000",
    ]
    (agent_c,) = find(objects(render_chart({"logFormat": "json"})), "DaemonSet")["spec"]["template"]["spec"][
        "containers"
    ]
    assert agent_c["args"][:3] == ["--log-level=info", "--log-format=json", "agent"]
    assert "--profiles=/etc/gpuscale/profiles/profiles.yaml" in c["args"]
    assert "--ingest-workers=0" in c["args"]
    (worker,) = find(objects(render_chart({"scaler": {"ingestWorkers": 2}})), "Deployment")["spec"][
        "template"
    ]["spec"]["containers"]
    assert "--ingest-workers=2" in worker["args"]
    assert "--request-path-interval=1" in c["args"]
    assert not [a for a in c["args"] if a.startswith(("--request-path-namespaces", "--request-path-manual"))]
    values = {
        "scaler": {
            "requestPathNamespaces": ["ai", "gateways"],
            "requestPathInterval": 0.5,
            "requestPathManualEndpoints": True,
        }
    }
    (paths,) = find(objects(render_chart(values)), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {
        "--request-path-namespaces=ai,gateways",
        "--request-path-interval=0.5",
        "--request-path-manual-endpoints",
    } <= set(paths["args"])
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    # Off GPU nodes: one term, every GPU label excluded (ANDed).
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]},
                {"key": "feature.node.kubernetes.io/amd-gpu", "operator": "NotIn", "values": ["true"]},
            ]
        }
    ]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert find(objs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    svc = find(objs, "Service", "gpuscale-scaler")
    assert svc["spec"]["clusterIP"] == "None"
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"grpc": 6001, "metrics": 9401}
    agent_svc = find(objs, "Service", "gpuscale-agent")
    assert agent_svc["spec"]["clusterIP"] == "None"
    assert {p["name"]: p["port"] for p in agent_svc["spec"]["ports"]} == {"grpc": 6000, "metrics": 9400}

    custom = objects(rendered["clusterip-custom"])
    assert "clusterIP" not in find(custom, "Service", "gpuscale-scaler")["spec"]
    assert find(custom, "Deployment")["spec"]["replicas"] == 3
    agent = find(custom, "DaemonSet")["spec"]["template"]["spec"]
    assert agent["securityContext"]["runAsNonRoot"] is True and agent["securityContext"]["runAsUser"] == 65532
    assert "--extra-resource-names=nvidia.com/gpu.shared" in agent["containers"][0]["args"]


def test_profiles_configmap_is_what_the_scaler_reads(rendered: dict[str, dict[str, str]]) -> None:
    for variant, expect in (("default", set()), ("clusterip-custom", {"my-llm"})):
        cm = find(objects(rendered[variant]), "ConfigMap", "gpuscale-scaler-profiles")
        data = yaml.safe_load(cm["data"]["profiles.yaml"])
        profiles = parse_profiles(data, source="configmap")
        assert expect <= set(profiles)
    custom = parse_profiles(
        yaml.safe_load(find(objects(rendered["clusterip-custom"]), "ConfigMap")["data"]["profiles.yaml"])
    )
    assert custom["my-llm"].target_value == 8 and custom["my-llm"].metric == "queue_length"


def test_tls(rendered: dict[str, dict[str, str]]) -> None:
    pod = find(objects(rendered["tls"]), "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert {
        "--tls-cert=/etc/gpuscale/tls/tls.crt",
        "--tls-key=/etc/gpuscale/tls/tls.key",
        "--tls-client-ca=/etc/gpuscale/tls/ca.crt",
    } <= set(args)
    assert {"name": "tls", "secret": {"secretName": "gpuscale-tls"}} in pod["volumes"]
    assert 'enableTLS: "true"' in rendered["tls"]["gpuscale/templates/NOTES.txt"]


def test_agent_tls(rendered: dict[str, dict[str, str]]) -> None:
    """One Secret, mounted in both: the agents serve it and require a client certificate from its CA; the
    scaler presents it and checks the agents' certificate against their Service name (it dials pod IPs)."""
    objs = objects(rendered["agent-tls"])
    volume = {"name": "agent-tls", "secret": {"secretName": "gpuscale-agent-tls"}}
    agent = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    assert {
        "--tls-cert=/etc/gpuscale/agent-tls/tls.crt",
        "--tls-key=/etc/gpuscale/agent-tls/tls.key",
        "--tls-client-ca=/etc/gpuscale/agent-tls/ca.crt",
    } <= set(agent["containers"][0]["args"])
    assert volume in agent["volumes"]
    scaler = find(objs, "Deployment")["spec"]["template"]["spec"]
    args = scaler["containers"][0]["args"]
    assert {
        "--agent-tls-ca=/etc/gpuscale/agent-tls/ca.crt",
        "--agent-tls-cert=/etc/gpuscale/agent-tls/tls.crt",
        "--agent-tls-key=/etc/gpuscale/agent-tls/tls.key",
        "--agent-tls-server-name=gpuscale-agent.gpuscale.svc",
    } <= set(args)
    assert volume in scaler["volumes"]
    assert {"name": "agent-tls", "mountPath": "/etc/gpuscale/agent-tls", "readOnly": True} in (
        scaler["containers"][0]["volumeMounts"]
    )
    assert not any(
        "tls" in a
        for a in find(objects(rendered["default"]), "Deployment")["spec"]["template"]["spec"]["containers"][
            0
        ]["args"]
    )


def test_upgrade_with_reuse_values_from_a_release_without_agent_tls() -> None:
    """``helm upgrade --reuse-values`` renders with the old release's values, which have no ``agent.tls``
    (Helm then drops the new chart's defaults for it): the templates must not dereference it blindly."""
    objs = objects(render_chart({"agent": {"tls": None}}))
    for kind in ("DaemonSet", "Deployment"):
        pod = find(objs, kind)["spec"]["template"]["spec"]
        assert not any("tls" in a for a in pod["containers"][0]["args"]), kind
        assert not any(v["name"] == "agent-tls" for v in pod["volumes"]), kind


def test_monitoring(rendered: dict[str, dict[str, str]]) -> None:
    objs = objects(rendered["monitoring"])
    monitors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"gpuscale-agent", "gpuscale-scaler"}
    (ep,) = monitors["gpuscale-agent"]["spec"]["endpoints"]
    assert ep["honorLabels"] is True and ep["port"] == "metrics"
    assert monitors["gpuscale-agent"]["metadata"]["labels"]["release"] == "kps"
    assert find(objs, "PrometheusRule")["metadata"]["labels"]["release"] == "kps"
    assert not [o for o in objects(rendered["default"]) if o["kind"] == "PrometheusRule"]
    policies = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "NetworkPolicy"}
    grpc_from = policies["gpuscale-scaler"]["ingress"][0]["from"]
    assert grpc_from == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}]
    agent_grpc = policies["gpuscale-agent"]["ingress"][0]["from"]
    assert len(agent_grpc) == 1 and "podSelector" in agent_grpc[0]  # the scaler only
    open_agent = {
        o["metadata"]["name"]: o["spec"]
        for o in objects(rendered["agent-scaler"])
        if o["kind"] == "NetworkPolicy"
    }["gpuscale-agent"]
    assert len(open_agent["ingress"][0]["from"]) == 2  # and KEDA, which the agent answers


def test_notes_scaledobject_points_at_the_scaler(rendered: dict[str, dict[str, str]]) -> None:
    notes = rendered["default"]["gpuscale/templates/NOTES.txt"]
    so = notes_scaledobject(notes)
    validate_all([so])
    (trigger,) = so["spec"]["triggers"]
    assert trigger["metadata"]["scalerAddress"] == "gpuscale-scaler.gpuscale.svc:6001"
    assert trigger["metricType"] == "AverageValue"
    other = render_chart({"fullnameOverride": "gs"})["gpuscale/templates/NOTES.txt"]
    assert (
        notes_scaledobject(other)["spec"]["triggers"][0]["metadata"]["scalerAddress"]
        == "gs-scaler.gpuscale.svc:6001"
    )


def _disruptions_allowed(pdb: dict[str, Any] | None, replicas: int) -> int:
    """``status.disruptionsAllowed`` of a PDB over ``replicas`` healthy pods of a Deployment, as Kubernetes'
    disruption controller computes it (pkg/controller/disruption ``getExpectedPodCount``: integer or
    percentage, percentages rounded up); no PDB: every pod may be evicted."""
    if pdb is None:
        return replicas
    spec = pdb["spec"]

    def scaled(v: int | str) -> int:
        return -(-int(v[:-1]) * replicas // 100) if isinstance(v, str) else v

    desired_healthy = (
        scaled(spec["minAvailable"]) if "minAvailable" in spec else replicas - scaled(spec["maxUnavailable"])
    )
    return max(0, replicas - desired_healthy)


@pytest.mark.parametrize(
    ("scaler", "allowed"),
    [
        ({"replicas": 1}, 1),  # no budget over one pod: a drain evicts it, KEDA's fallback covers the gap
        ({}, 1),  # two replicas, maxUnavailable 1
        ({"replicas": 3}, 1),
        ({"replicas": 3, "podDisruptionBudget": {"minAvailable": 2}}, 1),
        ({"replicas": 4, "podDisruptionBudget": {"minAvailable": "50%"}}, 2),
        ({"replicas": 4, "podDisruptionBudget": {"maxUnavailable": "25%"}}, 1),
        # a release installed with the old default (minAvailable: 1), upgraded with --reuse-values
        ({"replicas": 1, "podDisruptionBudget": {"enabled": True, "minAvailable": 1}}, 1),
        ({"replicas": 2, "podDisruptionBudget": {"enabled": True, "minAvailable": 1}}, 1),
    ],
)
def test_the_scaler_budget_never_blocks_a_node_drain(scaler: dict[str, Any], allowed: int) -> None:
    objs = objects(render_chart({"scaler": scaler}))
    validate_all(objs)
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    replicas = find(objs, "Deployment")["spec"]["replicas"]
    assert len(pdbs) == (0 if replicas == 1 else 1)
    assert _disruptions_allowed(pdbs[0] if pdbs else None, replicas) == allowed


def test_a_budget_that_would_block_every_drain_fails_the_install() -> None:
    with pytest.raises(helm.HelmError) as e:
        render_chart({"scaler": {"replicas": 2, "podDisruptionBudget": {"minAvailable": 2}}})
    assert (
        "scaler.podDisruptionBudget.minAvailable 2 must be less than scaler.replicas 2: with every replica "
        "required, no node that runs one can be drained"
    ) in str(e.value)


def test_service_accounts(rendered: dict[str, dict[str, str]]) -> None:
    default = objects(rendered["default"])
    assert {o["metadata"]["name"] for o in default if o["kind"] == "ServiceAccount"} == {
        "gpuscale-agent",
        "gpuscale-scaler",
    }
    objs = objects(rendered["platform"])
    (scaler_sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]  # the agent's is not made: it exists
    assert scaler_sa["metadata"]["name"] == "gpuscale-scaler"
    assert scaler_sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}
    assert find(objs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-monitoring"
    assert find(objs, "ClusterRoleBinding", "gpuscale-agent")["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-monitoring", "namespace": NAMESPACE}
    ]
    named = objects(render_chart({"scaler": {"serviceAccount": {"name": "keda-facing"}}}))
    assert (
        find(named, "ServiceAccount", "keda-facing")
        and find(named, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "keda-facing"
    )


def test_security_context_overrides_merge_over_the_charts(rendered: dict[str, dict[str, str]]) -> None:
    pod = find(objects(rendered["platform"]), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    sc = pod["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is False  # overridden
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False  # kept


def test_extra_args_volumes_and_spread(rendered: dict[str, dict[str, str]]) -> None:
    objs = objects(rendered["platform"])
    agent = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    assert agent["containers"][0]["args"][-1] == "--attribution-interval=10"
    assert {"name": "extra", "emptyDir": {}} in agent["volumes"]
    assert {"name": "extra", "mountPath": "/extra"} in agent["containers"][0]["volumeMounts"]
    scaler = find(objs, "Deployment")["spec"]["template"]["spec"]
    assert scaler["containers"][0]["args"][-1] == "--dns-interval=10"
    assert scaler["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "gpuscale",
                    "app.kubernetes.io/instance": "gpuscale",
                    "app.kubernetes.io/component": "scaler",
                }
            },
        }
    ]
    assert (
        "topologySpreadConstraints"
        not in find(objects(rendered["default"]), "Deployment")["spec"]["template"]["spec"]
    )


def test_the_agent_is_node_critical_by_default(rendered: dict[str, dict[str, str]]) -> None:
    assert _agent_pod(objects(rendered["default"]))["priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in _agent_pod(objects(render_chart({"agent": {"priorityClassName": ""}})))
    assert not [o for o in objects(rendered["default"]) if o["kind"] == "ResourceQuota"]
    quota = find(objects(rendered["platform"]), "ResourceQuota")["spec"]
    assert quota == {
        "hard": {"pods": "500"},
        "scopeSelector": {
            "matchExpressions": [
                {
                    "scopeName": "PriorityClass",
                    "operator": "In",
                    "values": ["system-node-critical", "system-cluster-critical"],
                }
            ]
        },
    }


def test_cert_manager_certificates_name_what_is_dialled(rendered: dict[str, dict[str, str]]) -> None:
    objs = objects(rendered["platform"])
    certs = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "Certificate"}
    agent, scaler = certs["gpuscale-agent-tls"], certs["gpuscale-scaler-tls"]
    # the agents' Secret, mounted by both, names what the scaler checks
    deployment = find(objs, "Deployment")["spec"]["template"]["spec"]
    server_name = next(
        a.split("=", 1)[1]
        for a in deployment["containers"][0]["args"]
        if a.startswith("--agent-tls-server-name=")
    )
    assert agent["dnsNames"] == [server_name] and agent["usages"] == ["server auth", "client auth"]
    assert agent["secretName"] == "gpuscale-agent-tls"
    assert agent["issuerRef"] == {"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    # the scaler's names the address KEDA dials (the NOTES' scalerAddress)
    address = notes_scaledobject(rendered["platform"]["gpuscale/templates/NOTES.txt"])["spec"]["triggers"][0][
        "metadata"
    ]["scalerAddress"]
    assert address.rsplit(":", 1)[0] in scaler["dnsNames"] and scaler["usages"] == ["server auth"]
    assert scaler["secretName"] == "gpuscale-tls" and scaler["duration"] == "2160h"
    assert {"name": "tls", "secret": {"secretName": "gpuscale-tls"}} in deployment["volumes"]
    assert not [o for o in objects(rendered["tls"]) if o["kind"] == "Certificate"]


BAD_VALUES = [
    ({"agent": {"backend": "cuda"}}, "/agent/backend"),
    ({"agent": {"bakend": "nvml"}}, "'bakend' not allowed"),
    ({"agent": {"hostnameLabel": "HOSTNAME"}}, "/agent/hostnameLabel"),
    ({"agent": {"interval": 0}}, "/agent/interval"),
    ({"agent": {"grpcPort": 70000}}, "/agent/grpcPort"),
    ({"agent": {"podResourcesDir": "var/lib"}}, "/agent/podResourcesDir"),
    ({"scaler": {"replicas": 0}}, "/scaler/replicas"),
    (
        {"scaler": {"podDisruptionBudget": {"minAvailable": "100%"}}},
        "/scaler/podDisruptionBudget/minAvailable",
    ),
    ({"scaler": {"podDisruptionBudget": {"minAvailable": 0}}}, "/scaler/podDisruptionBudget/minAvailable"),
    (
        {"scaler": {"podDisruptionBudget": {"maxUnavailable": 0}}},
        "/scaler/podDisruptionBudget/maxUnavailable",
    ),
    (
        {"scaler": {"podDisruptionBudget": {"maxUnavailable": "150%"}}},
        "/scaler/podDisruptionBudget/maxUnavailable",
    ),
    ({"scaler": {"ingestWorkers": -1}}, "/scaler/ingestWorkers"),
    ({"scaler": {"requestPathNamespaces": ["Bad_NS"]}}, "/scaler/requestPathNamespaces/0"),
    ({"scaler": {"requestPathNamespaces": "ai,gateways"}}, "/scaler/requestPathNamespaces"),
    ({"scaler": {"requestPathInterval": 0}}, "/scaler/requestPathInterval"),
    ({"scaler": {"requestPathManualEndpoints": "yes"}}, "/scaler/requestPathManualEndpoints"),
    ({"scaler": {"tls": {"enabled": True}}}, "/scaler/tls/secretName"),
    ({"agent": {"tls": {"enabled": True}}}, "/agent/tls/secretName"),
    ({"scaler": {"profiles": {"Bad_Name": {}}}}, "/scaler/profiles"),
    ({"scaler": {"service": {"headless": "yes"}}}, "/scaler/service/headless"),
    ({"serviceMonitor": {"interval": "fast"}}, "/serviceMonitor/interval"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
    ({"prometheusRule": {"unavailableRatio": 0}}, "/prometheusRule/unavailableRatio"),
    ({"logFormat": "logfmt"}, "/logFormat"),
    (
        {"agent": {"tls": {"enabled": True, "secretName": "x", "certManager": {"enabled": True}}}},
        "/agent/tls/certManager",
    ),
    ({"scaler": {"tls": {"certManager": {"duration": "90 days"}}}}, "/scaler/tls/certManager/duration"),
    ({"agent": {"criticalPodsQuota": -1}}, "/agent/criticalPodsQuota"),
    ({"agent": {"serviceAccount": {"nmae": "x"}}}, "'nmae' not allowed"),
    ({"image": {"digest": "latest"}}, "/image/digest"),
    ({"gpuNodeLabels": [{"values": ["true"]}]}, "/gpuNodeLabels/0"),
    # the scaler's own rules for a profile (gpuscale.scaling.keys), so a bad one fails the install instead of
    # crash-looping the scaler
    ({"scaler": {"profiles": {"my-llm": {"aggregation": "mean"}}}}, "/scaler/profiles/my-llm"),
    ({"scaler": {"profiles": {"my-llm": {"targetValue": 0}}}}, "/scaler/profiles/my-llm"),
    ({"scaler": {"profiles": {"my-llm": {"podSelector": "app=x"}}}}, "/scaler/profiles/my-llm"),
    ({"scaler": {"profiles": {"My_LLM": {}}}}, "/scaler/profiles"),
]


@pytest.mark.parametrize(("values", "key"), BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_bad_values_fail_install_naming_the_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(helm.HelmValuesError, match="schema") as e:
        render_chart(values)
    assert key in str(e.value)
    # And a real `helm install` (client dry run: no cluster) refuses them the same way.
    cfg = helm.Config(
        storage_driver="memory",
        namespace=NAMESPACE,
        kubeconfig_content="apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    try:
        with pytest.raises(helm.HelmError) as install_error:
            cfg.install(
                helm.Chart.load(str(CHART)),
                "gpuscale",
                with_image(values),
                namespace=NAMESPACE,
                dry_run="client",
            )
    finally:
        cfg.close()
    assert key in str(install_error.value)


def test_default_install_dry_run() -> None:
    cfg = helm.Config(
        storage_driver="memory",
        namespace=NAMESPACE,
        kubeconfig_content="apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    try:
        release = cfg.install(
            helm.Chart.load(str(CHART)), "gpuscale", with_image({}), namespace=NAMESPACE, dry_run="client"
        )
    finally:
        cfg.close()
    assert (
        "kind: DaemonSet" in release["manifest"] and "gpuscale-scaler.gpuscale.svc:6001" in release["notes"]
    )
    assert f"Image (agent and scaler): {IMAGE}:0.1.0\n" in release["notes"]


def _needs_operator(key: str) -> str:
    return (
        f"{key}.enabled=true needs the Prometheus Operator's API (monitoring.coreos.com/v1), which this "
        "cluster does not serve: install the Prometheus Operator (e.g. the kube-prometheus-stack chart) first, "
        f"or set {key}.enabled=false; with helm template, pass --api-versions monitoring.coreos.com/v1"
    )


@pytest.mark.parametrize("key", ["serviceMonitor", "prometheusRule"])
def test_monitoring_without_the_prometheus_operator_fails_saying_so(key: str) -> None:
    """A cluster without the Prometheus Operator's API: ``helm template`` and a real ``helm install`` (client
    dry run: Kubernetes' own APIs only) fail with one message naming the value and the two ways out; with the
    API served, the object renders."""
    with pytest.raises(helm.HelmRenderError) as e:
        render_chart({key: {"enabled": True}}, api_versions=())
    assert _needs_operator(key) in str(e.value)
    cfg = helm.Config(
        storage_driver="memory",
        namespace=NAMESPACE,
        kubeconfig_content="apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    try:
        with pytest.raises(helm.HelmError) as install_error:
            cfg.install(
                helm.Chart.load(str(CHART)),
                "gpuscale",
                with_image({key: {"enabled": True}}),
                namespace=NAMESPACE,
                dry_run="client",
            )
    finally:
        cfg.close()
    assert _needs_operator(key) in str(install_error.value)
    kind = {"serviceMonitor": "ServiceMonitor", "prometheusRule": "PrometheusRule"}[key]
    rendered = objects(render_chart({key: {"enabled": True}}, api_versions=["monitoring.coreos.com/v1"]))
    assert any(o["kind"] == kind for o in rendered)
    assert not any(
        o["apiVersion"].startswith("monitoring.coreos.com")
        for o in objects(render_chart({}, api_versions=()))
    )


def test_an_install_without_an_image_says_to_build_and_push_one() -> None:
    """Nothing publishes a gpuscale image: installing without image.repository fails, saying what to do,
    instead of pods that cannot pull a default image."""
    cfg = helm.Config(
        storage_driver="memory",
        namespace=NAMESPACE,
        kubeconfig_content="apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    try:
        with pytest.raises(helm.HelmError) as e:
            cfg.install(helm.Chart.load(str(CHART)), "gpuscale", {}, namespace=NAMESPACE, dry_run="client")
    finally:
        cfg.close()
    assert (
        "image.repository is required: nothing publishes a gpuscale image; build this repository's "
        "Dockerfile for your nodes' architectures, push it to your registry and set image.repository "
        '(docs/install.md, "The image")'
    ) in str(e.value)


@pytest.mark.parametrize(
    ("image", "reference"),
    [
        ({}, f"{IMAGE}:0.1.0"),  # the chart's appVersion
        ({"tag": "0.1.0-rc1"}, f"{IMAGE}:0.1.0-rc1"),
        ({"digest": "sha256:" + "a" * 64}, f"{IMAGE}@sha256:{'a' * 64}"),
        ({"tag": "dev", "digest": "sha256:" + "b" * 64}, f"{IMAGE}@sha256:{'b' * 64}"),  # the digest pins it
    ],
)
def test_both_run_the_image_the_notes_name(image: dict[str, str], reference: str) -> None:
    rendered = render_chart({"image": image})
    objs = objects(rendered)
    for kind in ("DaemonSet", "Deployment"):
        (c,) = find(objs, kind)["spec"]["template"]["spec"]["containers"]
        assert c["image"] == reference, kind
    assert f"Image (agent and scaler): {reference}\n" in rendered["gpuscale/templates/NOTES.txt"]


def test_the_documented_gke_and_eks_presets_install() -> None:
    """docs/install.md's presets, as written: each passes the schema and renders valid objects, with the agent
    on nodes with those labels."""
    import re

    text = (CHART.parents[2] / "docs" / "install.md").read_text()
    section = text[text.index("## GKE and EKS") : text.index("## Next")]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    presets = [d for d in yaml.safe_load_all(block) if d]
    assert len(presets) == 2
    for preset in presets:
        objs = objects(render_chart(preset))
        validate_all(objs)
        terms = _agent_pod(objs)["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert [t["matchExpressions"][0]["key"] for t in terms] == [g["key"] for g in preset["gpuNodeLabels"]]
