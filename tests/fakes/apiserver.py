"""The fake Kubernetes API server of the tests: the demo cluster's local API server, under its test name.

One implementation (``gpuscale.demo.apiserver``) serves both the demo and the tests.
"""

from __future__ import annotations

from gpuscale.demo.apiserver import LocalApiServer as FakeApiServer
from gpuscale.demo.apiserver import format_label_selector, make_pod, match_labels, write_kubeconfig

__all__ = ["FakeApiServer", "format_label_selector", "make_pod", "match_labels", "write_kubeconfig"]
