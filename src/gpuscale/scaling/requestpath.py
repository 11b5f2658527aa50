"""The request path: what the gateway, router or ingress in front of a workload sees of its demand, at zero
replicas and while every pod loads, when the workload's own pods cannot speak yet.

Why: a workload's engines say its demand only once a pod is Ready. At zero replicas, and for a whole cold
start after a wake, the answer from the engines can only hold the count, so a burst that arrives then is
answered one replica at a time, one cold start per step. The request path counts every request the moment
it arrives, whether a pod is there to take it or not (Knative's activator, the KEDA HTTP add-on's
interceptor and llm-d's endpoint picker read it there for the same reason).

What: the scaler reads the source itself (``gpuscale.scaler.requestpath``: a Service in the ScaledObject's
namespace, never an address from trigger metadata) about once a second into ``PathReading``s:

* ``arrived``: the requests that reached the workload through it, a counter since the source started;
* ``held``: the requests it holds or queues in front of the workload now (no pod to take them, or a
  flow-control queue), a gauge.

A source exposes one or both (``None``: not exposed). ``demand`` turns the readings into requests per
second: the arrivals' rate over ``RATE_WINDOW_S`` (a counter that goes back, a restarted source, starts the
rate over, never negative) plus what is held, drained within ``drain_seconds`` (the time a held request's
client waits: ``maxQueueSeconds`` of the simulator, ingress-nginx's 60 s read timeout). ``None``: the source
is missing (its last read failed, or too old) or says nothing yet; never a made-up 0.

Pure: readings and ``now`` in, numbers out.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PATH",
    "RATE_WINDOW_S",
    "STALE_AFTER_S",
    "PathDemand",
    "PathReading",
    "RequestPath",
    "RequestPathRef",
    "demand",
    "parse_ref",
]

# The arrivals' rate is over the last 5 s of readings (taken about every second): short enough that a burst
# is seen within a second or two, long enough that whole-number counters at a few requests per second are
# not noise.
RATE_WINDOW_S = 5.0
# A reading older than this is not the present: the source is missing.
STALE_AFTER_S = 10.0
DEFAULT_PATH = "/metrics"


@dataclass(frozen=True, slots=True)
class PathReading:
    """One read of the request path at ``timestamp`` (Unix seconds): ``arrived`` (counter, requests since the
    source started) and ``held`` (gauge, requests held in front of the workload now), each ``None`` where the
    source does not expose it."""

    timestamp: float
    arrived: float | None = None
    held: float | None = None


@dataclass(frozen=True, slots=True)
class RequestPath:
    """What the scaler holds of one request path: its readings, oldest first, and ``missing``, why there is no
    honest value now (the last read failed: unreachable, timed out, too large, not parsable, no series of
    the workload), or ``None``. ``source`` names it for people (``Service ai/gateway:9090/metrics
    (envoy)``)."""

    readings: Sequence[PathReading] = ()
    missing: str | None = None
    source: str = "the request path"


@dataclass(frozen=True, slots=True)
class PathDemand:
    """The request path's demand at one instant: ``rate`` (requests/s arriving, ``None`` where the source
    counts no arrivals or has one reading yet), ``held`` (requests held now, ``None`` where not exposed) and
    ``demand``, requests/s: ``rate + held / drain_seconds``."""

    demand: float
    rate: float | None
    held: float | None


def demand(path: RequestPath, now: float, drain_seconds: float) -> PathDemand | None:
    """The request path's demand at ``now``: ``None`` when the source is missing, its newest reading is older
    than ``STALE_AFTER_S`` (or from the future), or it says neither a rate nor a held count yet."""
    if path.missing is not None or not path.readings:
        return None
    readings = path.readings
    hi = bisect.bisect_right(readings, now + 1e-9, key=_timestamp)
    if hi == 0:
        return None
    newest = readings[hi - 1]
    if now - newest.timestamp > STALE_AFTER_S:
        return None
    rate = _rate(readings, hi, now)
    held = newest.held if newest.held is not None and math.isfinite(newest.held) else None
    if held is not None:
        held = max(0.0, held)
    if rate is None and held is None:
        return None
    total = (rate or 0.0) + ((held or 0.0) / drain_seconds if drain_seconds > 0 else 0.0)
    return PathDemand(total, rate, held)


def _timestamp(r: PathReading) -> float:
    return r.timestamp


def _rate(readings: Sequence[PathReading], hi: int, now: float) -> float | None:
    """The arrivals counter's rate over the readings in ``(now - RATE_WINDOW_S, now]`` (the newest ``hi``),
    starting over after a counter that went back; ``None`` with fewer than two counted readings.

    A counter that stood still at the start of the window and then moved is demand that began within it: the
    rate is from the last reading it stood still at (or, once it has moved twice, from the first that
    moved, which the partial second of its start does not dilute, whichever is higher), so a burst after
    idle reads as its rate at once, not as a ramp over the window."""
    lo = bisect.bisect_right(readings, now - RATE_WINDOW_S, key=_timestamp, hi=hi)
    points: list[tuple[float, float]] = []
    for r in (readings[i] for i in range(lo, hi)):
        if r.arrived is None or not math.isfinite(r.arrived):
            continue
        if points and r.arrived < points[-1][1]:
            points = []  # the source restarted: count from here
        points.append((r.timestamp, r.arrived))
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    (t0, v0), (t1, v1) = points[0], points[-1]
    still = 0
    while still + 1 < len(points) and points[still + 1][1] == v0:
        still += 1
    if still == 0 or still + 1 == len(points):  # moving from the start, or not at all
        return max(0.0, (v1 - v0) / (t1 - t0))
    ts, vs = points[still]
    rate = (v1 - vs) / (t1 - ts)
    if still + 2 < len(points):
        tm, vm = points[still + 1]
        rate = max(rate, (v1 - vm) / (t1 - tm))
    return max(0.0, rate)


# -- where the request path is: a Service, never an address --------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$")  # IANA_SVC_NAME: at most 15, a letter
_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]{0,255}$")


@dataclass(frozen=True, slots=True)
class RequestPathRef:
    """``requestPath``: a Service (``service``, in ``namespace``, ``None``: the ScaledObject's), one of its
    ports (``port``: a number or the port's name) and the HTTP ``path`` of its metrics."""

    service: str
    port: int | str
    path: str = DEFAULT_PATH
    namespace: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.service}" if self.namespace else self.service
        return f"{where}:{self.port}{self.path}"


def parse_ref(text: str) -> tuple[RequestPathRef | None, str | None]:
    """``[namespace/]service:port[/path]`` into a ``RequestPathRef``, or ``(None, "must be …")``. Only a
    Service's name: no scheme, host, IP address or user info can be written here."""
    allowed = (
        'must be a Service of the ScaledObject\'s namespace as "name:port[/path]" (port: a number from 1 to '
        '65535 or the port\'s name; path: default "/metrics"), or "namespace/name:port[/path]" for a '
        "namespace the scaler's --request-path-namespaces allows; never a URL or an address"
    )
    if not isinstance(text, str) or text != text.strip() or "://" in text or "@" in text:
        return None, allowed
    namespace: str | None = None
    head, slash, rest = text.partition("/")
    if ":" not in head and slash:  # namespace/…
        namespace, text = head, rest
        if not _DNS_LABEL.fullmatch(namespace):
            return None, allowed
    service, colon, rest = text.partition(":")
    if not colon or not _DNS_LABEL.fullmatch(service):
        return None, allowed
    port_text, slash, path = rest.partition("/")
    path = "/" + path if slash else DEFAULT_PATH
    if not _PATH.fullmatch(path) or "/../" in path + "/" or "//" in path:
        return None, allowed
    port: int | str
    if port_text.isascii() and port_text.isdigit():
        port = int(port_text)
        if not 1 <= port <= 65535 or port_text != str(port):
            return None, allowed
    elif _PORT_NAME.fullmatch(port_text) and any(c.isalpha() for c in port_text) and "--" not in port_text:
        port = port_text
    else:
        return None, allowed
    return RequestPathRef(service, port, path, namespace), None
