"""``python -m gpuscale.controlplane`` (``scripts/control-plane``): build, start, or serve a node's kubelet.

build                       build every binary into the cache (prints its directory)
up [--workdir D] [--nodes N] [--gpus G]
                            start the control plane, and per kwok node a PodResources stand-in and a mock
                                gpuscale agent, and gpuscale scaler; Ctrl-C stops
kubelet --kubeconfig K --node N --gpus G --socket S
                            the PodResources stand-in of one kwok node (the launcher and tests run it)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

from .build import build
from .client import KubeClient
from .errors import ControlPlaneError
from .launcher import ControlPlane, GpuNode
from .stack import GpuStack


def _client_from_kubeconfig(path: Path) -> KubeClient:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    cluster = doc["clusters"][0]["cluster"]
    user = doc["users"][0]["user"]
    cert, key = user.get("client-certificate"), user.get("client-key")
    return KubeClient(
        cluster["server"],
        Path(cluster["certificate-authority"]),
        cert=Path(cert) if cert else None,
        key=Path(key) if key else None,
        token=user.get("token"),
    )


def _positive(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        print(f'control-plane: {flag} "{text}" must be a whole number of at least 1', file=sys.stderr)
        raise SystemExit(2)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="control-plane", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build every binary into the cache")
    up = sub.add_parser("up", help="start the control plane and gpuscale on it until Ctrl-C")
    up.add_argument("--workdir", help="where certificates, logs and etcd's data go (default: a temp dir)")
    up.add_argument("--nodes", default="2", help="kwok GPU nodes (default 2)")
    up.add_argument("--gpus", default="4", help="nvidia.com/gpu per node (default 4)")
    up.add_argument("--no-keda", action="store_true", help="leave KEDA out")
    k = sub.add_parser("kubelet", help="serve one node's PodResources stand-in")
    k.add_argument("--kubeconfig", required=True)
    k.add_argument("--node", required=True)
    k.add_argument("--gpus", default="4")
    k.add_argument("--socket", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "build":
            print(build().root)
            return 0
        if args.command == "kubelet":
            gpus = _positive(args.gpus, "--gpus")
            client = _client_from_kubeconfig(Path(args.kubeconfig))
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_kubelet(client, args.node, gpus, Path(args.socket)))
            return 0
        return _up(args)
    except ControlPlaneError as e:
        print(f"control-plane: {e}", file=sys.stderr)
        return 1


async def _kubelet(client: KubeClient, node: str, gpus: int, socket: Path) -> None:
    from .kubelet import serve_kubelet

    task = asyncio.create_task(serve_kubelet(client, node, gpus, socket))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _up(args: argparse.Namespace) -> int:
    nodes = _positive(args.nodes, "--nodes")
    gpus = _positive(args.gpus, "--gpus")
    binaries = build()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpuscale-cp-"))
    plane = ControlPlane(
        binaries,
        workdir,
        nodes=[GpuNode(f"gpu-node-{i + 1}", gpus) for i in range(nodes)],
        keda=not args.no_keda,
        say=lambda s: print(s, file=sys.stderr, flush=True),
    )
    with plane:
        stack = GpuStack(plane)
        stack.start()
        print(plane.describe(), flush=True)
        print(
            f"gpuscale scaler on {stack.scaler_address}; mock load: {workdir}/<node>-demand.json", flush=True
        )
        print(f"export KUBECONFIG={plane.kubeconfig}   # Ctrl-C stops the control plane", flush=True)
        stop = False

        def _stop(*_: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _stop)
        try:
            while not stop:
                plane.check()
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
