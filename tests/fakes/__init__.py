"""Local stand-ins that speak the real protocols: the kubelet's PodResources gRPC API on a unix socket
(``kubelet``) and the Kubernetes API server over HTTP (``apiserver``). Test-only code."""
