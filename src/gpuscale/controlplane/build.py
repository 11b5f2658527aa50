"""Build the control plane's binaries from Go modules at pinned versions, into a cache keyed by the versions.

Why: no container images or release downloads here, only the Go module proxy. Each component has a wrapper
module under ``controlplane/go/<module>/`` in the repository (``go.mod`` and ``go.sum`` only: ``tool``
directives name the upstream ``main`` packages; ``replace`` lines pin Kubernetes' staging modules and copy
KEDA's). How: ``go build`` in that directory with ``CGO_ENABLED=0 -trimpath -ldflags=-s -w`` (and the
Kubernetes version stamped as ``hack/lib/version.sh`` does) into
``~/.cache/gpuscale/k8s-<versions>-<hash>/bin``; the hash covers the wrapper files and what this module
puts in the directory, so any pin change builds afresh. A cache that holds every binary is used as it is (no
``go`` run at all). The kwok stages and KEDA's CRDs are copied from the module cache next to the binaries,
so a warm start needs neither Go nor the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..buildcache import cache_base, locked
from .errors import BuildFailed

__all__ = [
    "BINARIES",
    "Binaries",
    "Binary",
    "build",
    "cache_dir",
    "go_modules_dir",
    "versions",
]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Binary:
    name: str  # the file under bin/
    module: str  # the wrapper module directory under controlplane/go/
    package: str  # the main package
    kube_version: bool = False  # stamp k8s.io/component-base/version and client-go's


BINARIES = (
    Binary("etcd", "k8s", "go.etcd.io/etcd/server/v3"),
    Binary("kube-apiserver", "k8s", "k8s.io/kubernetes/cmd/kube-apiserver", kube_version=True),
    Binary(
        "kube-controller-manager", "k8s", "k8s.io/kubernetes/cmd/kube-controller-manager", kube_version=True
    ),
    Binary("kube-scheduler", "k8s", "k8s.io/kubernetes/cmd/kube-scheduler", kube_version=True),
    Binary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    Binary("keda-operator", "keda", "github.com/kedacore/keda/v2/cmd/operator"),
    Binary("keda-adapter", "keda", "github.com/kedacore/keda/v2/cmd/adapter"),
)

# name in versions() -> (wrapper module, required module path)
_PINS = {
    "kubernetes": ("k8s", "k8s.io/kubernetes"),
    "etcd": ("k8s", "go.etcd.io/etcd/server/v3"),
    "kwok": ("kwok", "sigs.k8s.io/kwok"),
    "keda": ("keda", "github.com/kedacore/keda/v2"),
}

_KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
_KEDA_CRDS = (
    "config/crd/bases/keda.sh_scaledobjects.yaml",
    "config/crd/bases/keda.sh_scaledjobs.yaml",
    "config/crd/bases/keda.sh_triggerauthentications.yaml",
    "config/crd/bases/keda.sh_clustertriggerauthentications.yaml",
    # the operator waits for these caches too, and exits when they never sync
    "config/crd/bases/eventing.keda.sh_cloudeventsources.yaml",
    "config/crd/bases/eventing.keda.sh_clustercloudeventsources.yaml",
)


@dataclass(frozen=True)
class Binaries:
    """A complete cache directory: ``path(name)`` is a built binary."""

    root: Path
    versions: dict[str, str]

    def path(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def kwok_stages(self) -> Path:
        return self.root / "kwok-stages.yaml"

    @property
    def keda_crds(self) -> Path:
        return self.root / "keda-crds.yaml"


def go_modules_dir() -> Path:
    """``controlplane/go`` of the repository this package runs from (or $GPUSCALE_CONTROLPLANE_GO)."""
    override = os.environ.get("GPUSCALE_CONTROLPLANE_GO")
    path = Path(override) if override else Path(__file__).resolve().parents[3] / "controlplane" / "go"
    if not (path / "k8s" / "go.mod").is_file():
        raise BuildFailed(
            f"the control plane's Go wrapper modules are not at {path} (a checkout of the gpuscale "
            "repository has them under controlplane/go; set GPUSCALE_CONTROLPLANE_GO to point elsewhere)"
        )
    return path


def versions(go_dir: Path) -> dict[str, str]:
    """The pinned version of each component, read from the wrapper ``go.mod`` files."""
    out: dict[str, str] = {}
    for name, (module, path) in _PINS.items():
        text = (go_dir / module / "go.mod").read_text(encoding="utf-8")
        m = re.search(rf"^\s*(?:require\s+)?{re.escape(path)}\s+(v\S+)", text, re.MULTILINE)
        if m is None:
            raise BuildFailed(f"{go_dir / module / 'go.mod'} requires no {path}")
        out[name] = m.group(1)
    return out


def cache_dir(go_dir: Path) -> Path:
    """``~/.cache/gpuscale/k8s-<kubernetes>-etcd-<v>-kwok-<v>-keda-<v>-<hash of the wrapper files>``."""
    v = versions(go_dir)
    digest = hashlib.sha256()
    for module in sorted({b.module for b in BINARIES}):
        for f in ("go.mod", "go.sum"):
            digest.update((go_dir / module / f).read_bytes())
    digest.update(repr((BINARIES, _KWOK_STAGES, _KEDA_CRDS)).encode())  # what goes into the directory
    base = cache_base()
    name = (
        f"k8s-{v['kubernetes']}-etcd-{v['etcd']}-kwok-{v['kwok']}-keda-{v['keda']}-{digest.hexdigest()[:10]}"
    )
    return base / name


def _ldflags(binary: Binary, kube_version: str) -> str:
    flags = ["-s", "-w"]
    if binary.kube_version:
        m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", kube_version)
        major, minor = (m.group(1), m.group(2)) if m else ("1", "0")
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={kube_version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
            ]
    return " ".join(flags)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-trimpath -buildvcs=false -mod=readonly"
    return env


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise BuildFailed("no Go toolchain: install Go 1.26 (the control plane is built from Go modules)")
    return go


def _run_go(args: list[str], cwd: Path, what: str, progress: Progress, log: Path) -> None:
    """Run go (``build -v`` prints a line per package) to ``log``, reporting every 15 s how far it got; the
    modules it lacks are downloaded on the way."""
    started = time.monotonic()
    with log.open("ab") as out:
        out.write(f"$ go {' '.join(args)}  (in {cwd})\n".encode())
        out.flush()
        proc = subprocess.Popen(
            [_go(), *args], cwd=cwd, env=_go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout is not None
        lines = 0
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(15.0):
                progress(f"  {what}: {lines} packages compiled, {time.monotonic() - started:.0f} s")

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            for line in proc.stdout:
                out.write(line)
                lines += 1
        finally:
            stop.set()
            code = proc.wait()
    if code != 0:
        tail = "\n".join("  " + s for s in log.read_text(errors="replace").splitlines()[-25:])
        raise BuildFailed(f"{what} failed (go exited {code}); the log is {log}:\n{tail}")
    progress(f"  {what}: done in {time.monotonic() - started:.0f} s")


def _module_dir(go_dir: Path, module: str, path: str) -> Path:
    out = subprocess.run(
        [_go(), "list", "-m", "-f", "{{.Dir}}", path],
        cwd=go_dir / module,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise BuildFailed(f"cannot find module {path} in the module cache: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def _concat(sources: list[Path], target: Path) -> None:
    parts = [p.read_text(encoding="utf-8").strip() for p in sources]
    tmp = target.with_suffix(".tmp")
    tmp.write_text("\n---\n".join(parts) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def _complete(b: Binaries) -> bool:
    return (
        all(b.path(x.name).is_file() for x in BINARIES) and b.kwok_stages.is_file() and b.keda_crds.is_file()
    )


def build(progress: Progress | None = None, *, go_dir: Path | None = None) -> Binaries:
    """Every binary of ``BINARIES`` in the cache, built first where missing (minutes the first time)."""
    say = progress or (lambda s: print(s, file=sys.stderr, flush=True))
    go_dir = go_dir or go_modules_dir()
    root = cache_dir(go_dir)
    binaries = Binaries(root, versions(go_dir))
    if _complete(binaries):
        return binaries
    with locked(root):
        if _complete(binaries):  # another process built it while we waited
            return binaries
        started = time.monotonic()
        v = binaries.versions
        say(
            f"building the control plane into {root} (Kubernetes {v['kubernetes']}, etcd {v['etcd']}, "
            f"kwok {v['kwok']}, KEDA {v['keda']}); the first build takes about 21 min on 2 cores"
        )
        bindir = root / "bin"
        bindir.mkdir(exist_ok=True)
        log = root / "build.log"
        for binary in BINARIES:
            target = bindir / binary.name
            if target.is_file():
                continue
            tmp = bindir / f".{binary.name}.tmp"
            _run_go(
                [
                    "build",
                    "-v",
                    "-ldflags",
                    _ldflags(binary, v["kubernetes"]),
                    "-o",
                    str(tmp),
                    binary.package,
                ],
                go_dir / binary.module,
                f"build {binary.name}",
                say,
                log,
            )
            os.replace(tmp, target)
        kwok = _module_dir(go_dir, "kwok", "sigs.k8s.io/kwok")
        _concat([kwok / p for p in _KWOK_STAGES], binaries.kwok_stages)
        keda = _module_dir(go_dir, "keda", "github.com/kedacore/keda/v2")
        _concat([keda / p for p in _KEDA_CRDS], binaries.keda_crds)
        (root / "versions.json").write_text(json.dumps(v, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        say(f"control plane built in {time.monotonic() - started:.0f} s")
    return binaries
