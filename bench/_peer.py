"""The Go peer, pmady/keda-gpu-scaler v0.6.0, for ``peer_compare.py``: found, built, started.

Why: the Go module proxy does not serve the peer's module, but its release source sits beside the repository
(``../shared/peer/keda-gpu-scaler-v0.6.0``, the tag unchanged) and the proxy serves every module in its
``go.sum``. How: the wrapper module ``bench/peer/`` (``go.mod``, ``go.sum``, ``main.go``) requires the peer
with a ``replace`` to that folder and serves the peer's own ``pkg/scaler`` with its ``gpu.MockCollector``.
It is built once, with cgo (go-nvml needs it; NVML itself is loaded only when the NVML collector starts,
which this never does), into ``~/.cache/gpuscale/peer-keda-gpu-scaler-v0.6.0-<hash>/bin/peer-scaler``, as
``gpuscale.controlplane`` caches the control plane; the hash covers the wrapper's files, the peer's
``go.mod``, ``go.sum`` and Go files, and the Go version, so any change builds afresh. A cached binary is used
without running ``go``. ``--peer-source`` or ``$GPUSCALE_PEER_SOURCE`` point at another copy of the source; a
missing one (or no Go) is one line and a skip.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as c

from gpuscale.buildcache import cache_base, locked

MODULE = "github.com/pmady/keda-gpu-scaler"
RELEASE = "v0.6.0"
WRAPPER = c.ROOT / "bench" / "peer"
WRAPPER_FILES = ("go.mod", "go.sum", "main.go")
DEFAULT_SOURCE = c.ROOT.parent / "shared" / "peer" / f"keda-gpu-scaler-{RELEASE}"
BINARY = "peer-scaler"
MIB = 1024 * 1024


class PeerUnavailable(Exception):
    """The peer cannot be measured here; ``str()`` is the one line that says why."""


def source_dir(arg: str | None = None) -> Path:
    """The peer's release source: ``arg``, else ``$GPUSCALE_PEER_SOURCE``, else beside the repository."""
    given = arg or os.environ.get("GPUSCALE_PEER_SOURCE")
    return Path(given).resolve() if given else DEFAULT_SOURCE


def check_source(source: Path) -> None:
    """Raise ``PeerUnavailable`` unless ``source`` holds the peer's module and Go is installed."""
    if not (source / "go.mod").is_file():
        raise PeerUnavailable(
            f"keda-gpu-scaler skipped: its release source ({MODULE} {RELEASE}) is not at {source} "
            "(--peer-source or GPUSCALE_PEER_SOURCE name another copy)"
        )
    first = (source / "go.mod").read_text(encoding="utf-8").splitlines()[0].split()
    if first != ["module", MODULE]:
        raise PeerUnavailable(f"keda-gpu-scaler skipped: {source}/go.mod is not module {MODULE}")
    if _go() is None:
        raise PeerUnavailable("keda-gpu-scaler skipped: no Go toolchain to build it (Go 1.25 or newer)")


def _go() -> str | None:
    return shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)


def _go_version(go: str) -> str:
    return subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout.strip()


def cache_dir(source: Path, go: str) -> Path:
    digest = hashlib.sha256()
    for name in WRAPPER_FILES:
        digest.update((WRAPPER / name).read_bytes())
    for f in sorted(
        p for p in source.rglob("*") if p.is_file() and (p.suffix == ".go" or p.name[:3] == "go.")
    ):
        digest.update(str(f.relative_to(source)).encode() + b"\0" + f.read_bytes())
    digest.update(_go_version(go).encode())
    base = cache_base()
    return base / f"peer-keda-gpu-scaler-{RELEASE}-{digest.hexdigest()[:10]}"


def build(source: Path, say: Callable[[str], None] | None = None) -> Path:
    """The wrapper built against ``source`` (cached); raises ``PeerUnavailable`` or ``RuntimeError``."""
    say = say or (lambda s: print(s, file=sys.stderr, flush=True))
    check_source(source)
    go = _go()
    assert go is not None
    root = cache_dir(source, go)
    binary = root / "bin" / BINARY
    if binary.is_file():
        return binary
    with locked(root):
        if binary.is_file():
            return binary
        say(f"building keda-gpu-scaler {RELEASE} (bench/peer, cgo) into {root}; about 2 min the first time")
        started = time.monotonic()
        work = root / "src"  # the wrapper with its replacement pointed at this source
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for f in WRAPPER_FILES:
            shutil.copy2(WRAPPER / f, work / f)
        env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": "-trimpath -buildvcs=false -mod=readonly"}
        log = root / "build.log"
        binary.parent.mkdir(exist_ok=True)
        tmp = binary.with_name(f".{BINARY}.tmp")
        with log.open("w") as out:
            for args in (
                ["mod", "edit", f"-replace={MODULE}={source}"],
                ["build", "-ldflags", "-s -w", "-o", str(tmp), "."],
            ):
                out.write(f"$ go {' '.join(args)}\n")
                out.flush()
                done = subprocess.run([go, *args], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
                if done.returncode != 0:
                    tail = log.read_text(errors="replace").splitlines()[-20:]
                    raise RuntimeError(f"go {args[0]} failed (log {log}):\n" + "\n".join(tail))
        os.replace(tmp, binary)
        (root / "built.json").write_text(
            json.dumps({"source": str(source), "go": _go_version(go), "release": RELEASE}, indent=2) + "\n"
        )
        say(f"keda-gpu-scaler built in {time.monotonic() - started:.0f} s")
    return binary


# -- the GPUs: gpuscale's mock backend's, in the peer's gpu.Metrics -----------------------------------------
def mock_gpus(node: str, utilizations: Sequence[float]) -> list[dict[str, Any]]:
    """The GPUs gpuscale's mock backend gives ``node`` (model h100, seed 0) at ``utilizations``, one sample
    each, as the peer's ``gpu.Metrics`` (its units: whole %, MiB, °C, W; PCIe in KB/s, NVLink in MB/s)."""
    from gpuscale.backends.mock import Demand, MockBackend, MockConfig, StaticDemand, find_model

    demand = StaticDemand()
    for i, u in enumerate(utilizations):
        demand.set(i, Demand(u))
    backend = MockBackend(
        MockConfig(gpus=len(utilizations), model=find_model("h100"), node=node), demand=demand
    )
    backend.open()
    out = []
    for d in backend.devices():
        s = backend.sample(d)
        out.append(
            {
                "Index": d.index,
                "UUID": d.uuid,
                "Name": d.name,
                "GPUUtilization": round(s.gpu_utilization or 0),
                "MemoryUtilization": round(s.memory_utilization or 0),
                "MemoryUsedMiB": (s.memory_used_bytes or 0) // MIB,
                "MemoryTotalMiB": (s.memory_total_bytes or 0) // MIB,
                "TemperatureCelsius": int(s.temperature_celsius or 0),
                "PowerDrawWatts": int(s.power_watts or 0),
                "PowerLimitWatts": int(s.power_limit_watts or 0),
                "PCIeTxKBps": (s.pcie_tx_bytes_per_s or 0) // 1024,
                "PCIeRxKBps": (s.pcie_rx_bytes_per_s or 0) // 1024,
                "NVLinkTxMBps": (s.nvlink_tx_bytes_per_s or 0) // MIB,
                "NVLinkRxMBps": (s.nvlink_rx_bytes_per_s or 0) // MIB,
                "ParentIndex": -1,
            }
        )
    backend.close()
    return out


def write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


@dataclass
class PeerProcess:
    proc: subprocess.Popen[str]
    port: int
    metrics_port: int
    gpus_file: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def set_gpus(self, gpus: list[dict[str, Any]]) -> None:
        """Rewrite the GPUs and tell the peer (SIGHUP): it swaps them in at once."""
        write_json(self.gpus_file, gpus)
        os.kill(self.proc.pid, signal.SIGHUP)


@contextlib.contextmanager
def peer_scaler(binary: Path, gpus: list[dict[str, Any]]) -> Iterator[PeerProcess]:
    """The peer's scaler as a process, as its main wires it (/metrics on, the probe server on), on free
    loopback ports."""
    with tempfile.TemporaryDirectory(prefix="gpuscale-peer-") as tmp:
        gpus_file = Path(tmp) / "gpus.json"
        write_json(gpus_file, gpus)
        cmd = [str(binary), "--gpus", str(gpus_file), "--metrics-port", "0", "--probe-port", "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the ports, once it listens
            if not line:
                raise RuntimeError(f"the peer ({binary}) exited before listening: {proc.wait()}")
            ports = json.loads(line)
            yield PeerProcess(proc, int(ports["port"]), int(ports["metrics_port"]), gpus_file)
        finally:
            c.stop(proc)


def scrape_cost(binary: Path, url: str, n: int, cpus: str | None = None) -> dict[str, Any]:
    """The peer's ``vllm.Client.Scrape`` ``n`` times on ``url``, in its own process: CPU and walls."""
    cmd = [str(binary), "scrape-cost", "--url", url, "--n", str(n)]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"peer scrape-cost failed: {out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result
