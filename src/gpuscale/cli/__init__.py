"""The ``gpuscale`` command: one sub-command per module of this package, each with ``register``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from .. import __version__
from ..backends.errors import BackendUnavailable
from ..errors import UsageError

__all__ = ["main"]

# Sub-commands, in the order ``gpuscale --help`` lists them.
COMMANDS = ("probe", "agent", "scaler", "query", "simulate", "render", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuscale",
        description="Scale Kubernetes workloads on what their GPUs are doing.",
    )
    parser.add_argument("--version", action="version", version=f"gpuscale {__version__}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
    except (UsageError, BackendUnavailable) as e:
        print(f"gpuscale: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
