"""The ``gpuscale`` command: one sub-command per module of this package, each with ``register``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..backends.errors import BackendUnavailable
from ..errors import UsageError
from ..logs import LOG_FORMATS, configure_logging

__all__ = ["main"]

# Sub-commands, in the order ``gpuscale --help`` lists them.
COMMANDS = ("probe", "agent", "scaler", "query", "simulate", "calibrate", "render", "demo")


def command_in(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names, or ``None`` (no command, or not one of ours: then every command is
    registered, for the help and the error)."""
    args = iter(argv)
    for arg in args:
        if arg in ("--log-level", "--log-format"):
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names is imported and registered: ``gpuscale agent``
    on every GPU node does not load the simulator, the demo and the renderer (5 MiB of RSS)."""
    parser = argparse.ArgumentParser(
        prog="gpuscale",
        description="Scale Kubernetes workloads on what their GPUs are doing.",
    )
    parser.add_argument("--version", action="version", version=f"gpuscale {__version__}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--log-format",
        default=os.environ.get("GPUSCALE_LOG_FORMAT", "text"),
        help="text (default) or json: one JSON object per line (time, level, logger, message); "
        "GPUSCALE_LOG_FORMAT",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = command_in(argv) if argv is not None else None
    for name in COMMANDS if wanted is None else (wanted,):
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.log_format not in LOG_FORMATS:
        print(
            f'gpuscale: error: --log-format "{args.log_format}" must be one of {", ".join(LOG_FORMATS)}',
            file=sys.stderr,
        )
        return 2
    configure_logging(args.log_level, args.log_format)
    args.argv = list(argv)  # the command line as given (render writes it into its files)
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
