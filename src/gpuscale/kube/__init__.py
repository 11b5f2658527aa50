"""Thin clients for the kubelet and the Kubernetes API, and the parsing that goes with them.

Modules (import them directly; this package re-exports nothing so that importing one client does not pull in
the others' dependencies):

* ``podresources``: the kubelet PodResources v1 API over its unix socket (``PodResourcesClient``)
* ``pods``: list+watch of this node's pods (``NodePodWatcher``, ``api_client_from``: the service account in a
  pod, ``incluster.py``, else a kubeconfig through kubernetes_asyncio)
* ``workloads``: ScaledObject → scale target → ``/scale`` label selector (``WorkloadResolver``)
* ``cgroup``: ``/proc/<pid>/cgroup`` → pod UID and container id (``container_of_pid``)
* ``errors``: the domain errors of this layer
"""

from __future__ import annotations

__all__: list[str] = []
