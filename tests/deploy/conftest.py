"""Fixtures of the deploy tests: a Prometheus that scrapes an agent the way a ServiceMonitor without honorLabels
does. The agent and kubelet fixtures are the suite-wide ones of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.fakes.prometheus import PrometheusServer, run_prometheus


@contextmanager
def prometheus_with_target_labels(tmp: Path, target: str) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``target`` with ``honor_labels: false`` and the target labels a ServiceMonitor gives
    (``namespace``, ``pod`` of the agent's own pod): the agent's workload labels become ``exported_*``."""
    labels = {"namespace": "gpuscale", "pod": "gpuscale-agent-x7k2p", "container": "agent"}
    with run_prometheus(
        tmp, [target], honor_labels=False, target_labels=labels, name="prometheus-exported"
    ) as p:
        yield p
