"""Options shared by the commands that read GPUs (``probe``, ``agent``): backend choice and mock settings.

Every option also reads a ``GPUSCALE_*`` environment variable (flags win), read here, in the CLI layer only.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends import BACKEND_NAMES, Backend, create_backend, open_backend
from ..backends.mock import MAX_GPUS, FileDemand, MockBackend, MockConfig, find_model, mig_layout_problem
from ..backends.patterns import PATTERN_SYNTAX, parse_patterns
from ..errors import UsageError
from ..files import read_text
from ..lifecycle import EVENT_LOOPS, event_loop_factory
from ..tls import TlsFiles

if TYPE_CHECKING:
    from ..scaling.profiles import ProfileSet

__all__ = [
    "add_backend_arguments",
    "add_server_arguments",
    "add_server_tls_arguments",
    "backend_from_args",
    "check_pem",
    "check_server_arguments",
    "count_in_range",
    "env",
    "env_flag",
    "existing_file",
    "kubeconfig_errors",
    "kubeconfig_from_args",
    "mock_config_from_args",
    "positive_seconds",
    "profiles_from_option",
    "server_tls_from_args",
]


def env(name: str, default: str | None = None) -> str | None:
    """The value of ``GPUSCALE_<NAME>``, or ``default``."""
    return os.environ.get(f"GPUSCALE_{name}", default)


_TRUE = ("1", "true", "yes", "on", "y", "t")
_FALSE = ("0", "false", "no", "off", "n", "f")


def env_flag(name: str, given: bool | None, default: bool = False) -> bool:
    """An on/off flag: ``given`` when the flag was on the command line (``store_true`` with default
    ``None``), else ``GPUSCALE_<NAME>`` read as a boolean (true/false, 1/0, yes/no, on/off, any case; empty:
    ``default``). Any other value is a ``UsageError`` naming the variable, never a silent off."""
    if given is not None:
        return given
    text = env(name, "") or ""
    value = text.strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise UsageError(
        f'GPUSCALE_{name} "{text}" must be true or false (also 1/0, yes/no, on/off; empty: '
        f"{'true' if default else 'false'})"
    )


def _int(text: str | None, flag: str) -> int:
    try:
        return int(text or "")
    except ValueError:
        raise UsageError(f'{flag} "{text}" must be an integer') from None


def count_in_range(given: str | None, flag: str, name: str, *, default: int, maximum: int) -> int:
    """A whole number from 0 to ``maximum``: ``given`` when the flag was on the command line (an option with
    default ``None``), else ``GPUSCALE_<NAME>``, else ``default``. A bad value is a ``UsageError`` naming
    where it came from (the flag or the variable), the value and what is allowed."""
    source, text = (flag, given) if given is not None else (f"GPUSCALE_{name}", env(name))
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= maximum:
        raise UsageError(f'{source} "{text}" must be a whole number from 0 to {maximum}')
    return value


def positive_seconds(text: str, flag: str, *, within: tuple[float, float] | None = None) -> float:
    """Seconds: finite and greater than 0; with ``within``, from its first to its second (both allowed)."""
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f'{flag} "{text}" must be a number of seconds') from None
    if within is not None:
        if not within[0] <= v <= within[1]:
            raise UsageError(f'{flag} "{text}" must be from {within[0]:g} to {within[1]:g} seconds')
    elif not v > 0:
        raise UsageError(f'{flag} "{text}" must be greater than 0')
    elif not math.isfinite(v):
        raise UsageError(f'{flag} "{text}" must be a finite number of seconds')
    return v


def profiles_from_option(path: str | None) -> ProfileSet | None:
    """``--profiles FILE``: the built-in profiles plus the file's (``None`` without the option). A bad file is
    a ``UsageError`` naming every problem. The scaler's modules are imported only here."""
    if path is None:
        return None
    from ..scaler.profiles_file import load_profiles
    from ..scaling.errors import ProfileError

    try:
        return load_profiles(path)
    except ProfileError as e:
        raise UsageError(f"--profiles {e.source}: " + "; ".join(e.problems)) from e


def existing_file(text: str, flag: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise UsageError(f'{flag} "{text}" is not a readable file')
    return path


def kubeconfig_from_args(args: argparse.Namespace) -> str | None:
    """``--kubeconfig`` (``GPUSCALE_KUBECONFIG_PATH``): a file that exists and reads as UTF-8 text, or
    ``None`` when not given (or empty). Checked before anything starts, so a wrong path or a binary file is
    one line, not a failed start (or a ``UnicodeDecodeError`` from the kubeconfig loader)."""
    if not args.kubeconfig:
        return None
    path = existing_file(args.kubeconfig, "--kubeconfig")
    read_text(path, "--kubeconfig")
    return str(path)


@contextlib.contextmanager
def kubeconfig_errors(kubeconfig: str | None) -> Iterator[None]:
    """A kubeconfig that cannot be loaded (not YAML, no current context) or an in-cluster service account
    that is missing becomes a ``UsageError``: one line naming the flag, exit 2."""
    from ..kube.errors import KubeConfigError

    try:
        yield
    except KubeConfigError as e:
        raise UsageError(f"--kubeconfig: {e}" if kubeconfig else str(e)) from None


def add_server_arguments(
    parser: argparse.ArgumentParser,
    *,
    grpc_port: int,
    metrics_port: int,
    grpc_serves: str,
    event_loop: str = "auto",
    event_loop_why: str = "uvloop when installed, else asyncio's own",
) -> None:
    """``--grpc-address``, ``--metrics-address`` and ``--event-loop``, as the agent and the scaler take."""
    parser.add_argument(
        "--grpc-address",
        default=env("GRPC_ADDRESS", f"[::]:{grpc_port}"),
        help=f"HOST:PORT of the gRPC server: {grpc_serves}, health, reflection (default [::]:{grpc_port}: "
        "IPv4 and IPv6; 0.0.0.0: IPv4 only)",
    )
    parser.add_argument(
        "--metrics-address",
        default=env("METRICS_ADDRESS", f"[::]:{metrics_port}"),
        help=f"HOST:PORT of /metrics, /healthz, /readyz (default [::]:{metrics_port})",
    )
    parser.add_argument(
        "--event-loop",
        default=env("EVENT_LOOP", event_loop),
        help=f"{', '.join(EVENT_LOOPS)} (default {event_loop}: {event_loop_why})",
    )


def check_server_arguments(args: argparse.Namespace) -> None:
    """Refuse a malformed ``--grpc-address``/``--metrics-address`` or an unknown or missing ``--event-loop``
    before anything starts."""
    from ..netaddr import parse_host_port

    parse_host_port(args.grpc_address, "--grpc-address")
    parse_host_port(args.metrics_address, "--metrics-address")
    try:
        event_loop_factory(args.event_loop)
    except ValueError as e:
        raise UsageError(f"--event-loop: {e}") from None


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("GPU backend")
    g.add_argument(
        "--backend",
        default=env("BACKEND", "auto"),
        help=f"where to read GPUs: {', '.join(BACKEND_NAMES)} (default auto: NVML, else AMD SMI)",
    )
    m = parser.add_argument_group("mock backend")
    m.add_argument("--mock-gpus", default=env("MOCK_GPUS", "1"), help="number of mock GPUs (default 1)")
    m.add_argument(
        "--mock-model",
        default=env("MOCK_MODEL", "h100"),
        help="mock GPU model: a100, a10g, h100, h200, l4, mi300x (default h100)",
    )
    m.add_argument("--mock-seed", default=env("MOCK_SEED", "0"), help="seed for random patterns (default 0)")
    m.add_argument(
        "--mock-pattern",
        default=env("MOCK_PATTERN", "constant:0"),
        help=f"load per GPU, comma-separated, the last repeats: {PATTERN_SYNTAX}",
    )
    m.add_argument(
        "--mock-mig",
        default=env("MOCK_MIG", ""),
        help="MIG instances on every mock GPU, comma-separated profiles, e.g. 3g.40gb,3g.40gb",
    )
    m.add_argument(
        "--mock-demand-file",
        default=env("MOCK_DEMAND_FILE"),
        help="JSON file of per-GPU demand that another program rewrites (overrides the pattern)",
    )


def mock_config_from_args(args: argparse.Namespace, *, node: str = "mock") -> MockConfig:
    gpus = _int(args.mock_gpus, "--mock-gpus")
    if not 1 <= gpus <= MAX_GPUS:
        raise UsageError(f'--mock-gpus "{args.mock_gpus}" must be from 1 to {MAX_GPUS}')
    seed = _int(args.mock_seed, "--mock-seed")
    model = find_model(args.mock_model)
    mig = tuple(p.strip() for p in args.mock_mig.split(",") if p.strip()) if args.mock_mig else ()
    problem = mig_layout_problem(model, mig)
    if problem is not None:
        raise UsageError(f'--mock-mig "{args.mock_mig}": {problem}')
    return MockConfig(
        gpus=gpus,
        model=model,
        seed=seed,
        patterns=parse_patterns(args.mock_pattern, seed=seed),
        node=node,
        mig_profiles=mig,
    )


def backend_from_args(args: argparse.Namespace, *, node: str = "mock", open_it: bool = True) -> Backend:
    """Build (and by default open) the backend the flags ask for."""
    name = args.backend
    if name == "mock":
        cfg = mock_config_from_args(args, node=node)
        demand = FileDemand(Path(args.mock_demand_file)) if args.mock_demand_file else None
        backend: Backend = MockBackend(cfg, demand=demand)
        if open_it:
            backend.open()
        return backend
    if name not in BACKEND_NAMES:
        raise UsageError(f'--backend "{name}" is unknown; choose one of {", ".join(BACKEND_NAMES)}')
    if not open_it:  # the agent opens it, and retries while no driver is loaded (auto included)
        return create_backend(name)
    return open_backend(name)


def add_server_tls_arguments(parser: argparse.ArgumentParser, title: str, clients: str) -> None:
    """``--tls-cert``, ``--tls-key``, ``--tls-client-ca`` (``GPUSCALE_TLS_*``) of a gRPC server."""
    t = parser.add_argument_group(title)
    t.add_argument("--tls-cert", default=env("TLS_CERT"), help="PEM certificate of the gRPC server")
    t.add_argument("--tls-key", default=env("TLS_KEY"), help="PEM private key of the gRPC server")
    t.add_argument(
        "--tls-client-ca",
        default=env("TLS_CLIENT_CA"),
        help=f"PEM CA bundle; when given, {clients} must present a certificate it signed (mutual TLS)",
    )


def server_tls_from_args(args: argparse.Namespace) -> TlsFiles | None:
    if not (args.tls_cert or args.tls_key or args.tls_client_ca):
        return None
    if not (args.tls_cert and args.tls_key):
        raise UsageError("TLS needs both --tls-cert and --tls-key (and optionally --tls-client-ca)")
    ca = existing_file(args.tls_client_ca, "--tls-client-ca") if args.tls_client_ca else None
    files = TlsFiles(existing_file(args.tls_cert, "--tls-cert"), existing_file(args.tls_key, "--tls-key"), ca)
    check_pem(("--tls-cert", files.cert), ("--tls-key", files.key), ("--tls-client-ca", files.client_ca))
    return files


def check_pem(
    cert: tuple[str, Path | None], key: tuple[str, Path | None], ca: tuple[str, Path | None]
) -> None:
    """The files, each ``(flag, path)`` (path ``None``: not given), load as a certificate with its key and
    as a CA bundle: said here, before anything starts, not as a failed bind or a connection that fails at
    every try (gRPC: "Could not load any root certificate"). The servers and the scaler's connections still
    read them again when they change."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cert[1] is not None and key[1] is not None:
        try:
            context.load_cert_chain(cert[1], key[1], password=lambda: b"")
        except (ssl.SSLError, OSError) as e:
            raise UsageError(
                f"{cert[0]} {cert[1]} and {key[0]} {key[1]}: not a PEM certificate and its unencrypted "
                f"private key ({e.strerror or e})"
            ) from None
    if ca[1] is not None:
        try:
            context.load_verify_locations(ca[1])
        except (ssl.SSLError, OSError) as e:
            raise UsageError(f"{ca[0]} {ca[1]}: not a PEM CA bundle ({e.strerror or e})") from None
