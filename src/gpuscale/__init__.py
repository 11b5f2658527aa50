"""gpuscale: scale Kubernetes workloads on what their GPUs are doing.

The package is layered (each layer imports only those below it):

- ``model``: plain frozen data (devices, samples).
- ``backends``: GPU readers (NVML, AMD SMI, mock) behind one Protocol.
- ``kube``: thin clients for the kubelet and the Kubernetes API.
- ``agent`` / ``scaler``: the node agent and the cluster scaler (services).
- ``sim``: the pure HPA/KEDA simulator (imports nothing above ``model``).
- ``cli``: the ``gpuscale`` command.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
