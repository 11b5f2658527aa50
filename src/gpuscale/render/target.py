"""The workload a manifest scales (``--target deployment/llm``) and how PromQL finds its pods by name.

Prometheus knows a GPU's pod only by its name (the ``pod`` label), not by the pod's labels, so the
Prometheus paths select a workload's pods with a regular expression on the name, derived from how the
controller names them:

- Deployment ``llm``: ReplicaSet ``llm-<pod-template-hash>``, pods ``llm-<hash>-<5 characters>``, so
  ``llm-[a-z0-9]+-[a-z0-9]{5}``. PromQL anchors regexes, so ``llm-embed-<hash>-<x>`` (Deployment
  ``llm-embed``) does not match; a bare pod named ``llm-<a>-<5 chars>`` would.
- StatefulSet ``db``: pods ``db-0``, ``db-1``… so ``db-[0-9]+``.

``--pod-regex`` replaces the derived one (other controllers, or names that collide).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["KINDS", "Target", "check_name", "check_namespace", "check_regex", "parse_target"]

# --target KIND -> (apiVersion, Kind, pod-name regex suffix after "<name>-")
KINDS: dict[str, tuple[str, str, str]] = {
    "deployment": ("apps/v1", "Deployment", "[a-z0-9]+-[a-z0-9]{5}"),
    "statefulset": ("apps/v1", "StatefulSet", "[0-9]+"),
}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # the --target spelling: deployment, statefulset
    name: str
    api_version: str
    kind_name: str  # the Kubernetes Kind: Deployment, StatefulSet

    @property
    def pod_regex(self) -> str:
        """The regex (PromQL ``=~``, anchored) matching this workload's pod names."""
        return self.name.replace(".", "[.]") + "-" + KINDS[self.kind][2]

    def ref(self) -> dict[str, str]:
        """``scaleTargetRef`` of an HPA or a ScaledObject."""
        return {"apiVersion": self.api_version, "kind": self.kind_name, "name": self.name}


def parse_target(text: str) -> Target:
    """``KIND/NAME`` with KIND deployment or statefulset (also ``deploy``, ``sts``)."""
    kind, sep, name = text.partition("/")
    kind = {"deploy": "deployment", "sts": "statefulset"}.get(kind.lower(), kind.lower())
    if not sep or kind not in KINDS or not name:
        raise UsageError(
            f'--target "{text}" must be KIND/NAME with KIND one of [{", ".join(sorted(KINDS))}], '
            "e.g. deployment/llm"
        )
    if not _NAME.match(name):
        raise UsageError(f'--target "{text}": "{name}" is not a valid Kubernetes object name')
    api_version, kind_name, _ = KINDS[kind]
    return Target(kind, name, api_version, kind_name)


def check_namespace(namespace: str, flag: str = "--namespace") -> str:
    if not _DNS_LABEL.match(namespace):
        raise UsageError(f'{flag} "{namespace}" must be a Kubernetes namespace name (a DNS label)')
    return namespace


def check_name(name: str, flag: str = "--name") -> str:
    if not _NAME.match(name):
        raise UsageError(
            f'{flag} "{name}" must be a Kubernetes object name (lowercase letters, digits, "-", ".")'
        )
    return name


def check_regex(regex: str) -> str:
    """A regex for PromQL's ``=~`` (RE2); Python's ``re`` accepts what RE2 does for these simple cases."""
    try:
        re.compile(regex)
    except re.error as e:
        raise UsageError(f'--pod-regex "{regex}" is not a valid regular expression: {e}') from None
    if '"' in regex or "\\" in regex:
        raise UsageError(f'--pod-regex "{regex}" must not contain quotes or backslashes')
    return regex
