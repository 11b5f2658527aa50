"""From a ScaledObject to the label selector of its workload's pods, the way the HPA finds them.

``keda.sh/v1alpha1`` ScaledObject → ``spec.scaleTargetRef`` (``apiVersion`` default ``apps/v1``, ``kind``
default ``Deployment``) → API discovery for the kind's resource name → ``GET …/<name>/scale`` →
``status.selector``. Works for any kind with a ``/scale`` subresource (Deployments, StatefulSets, Argo
Rollouts, …). Results are cached for ``ttl_s`` (at most ``maxsize`` ScaledObjects); concurrent lookups of one
ScaledObject share one request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._http import Json, KubeApi, get_json
from .errors import KubeApiError, WorkloadResolutionError

__all__ = ["ResolvedWorkload", "ScaleTarget", "WorkloadResolver"]

_Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    api_version: str
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class ResolvedWorkload:
    """A ScaledObject, its target, and the target's pod selector (``app=web,tier in (a,b)``)."""

    namespace: str
    scaled_object: str
    target: ScaleTarget
    selector: str


async def _cancel(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait for them to end, their outcome retrieved (so none is logged as never
    retrieved)."""
    pending = list(tasks)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


def _api_base(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class WorkloadResolver:
    def __init__(
        self,
        api: KubeApi,
        *,
        ttl_s: float = 30.0,
        request_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        maxsize: int = 4096,
    ) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self.maxsize = maxsize
        self.request_timeout_s = request_timeout_s
        self._clock = clock
        self._cache: dict[_Key, tuple[float, ResolvedWorkload]] = {}
        self._inflight: dict[_Key, asyncio.Task[ResolvedWorkload]] = {}
        self._plurals: dict[tuple[str, str], str] = {}  # (apiVersion, kind) → resource name

    async def selector(self, namespace: str, name: str) -> str:
        """The label selector of the pods of ScaledObject ``namespace/name``'s target."""
        return (await self.resolve(namespace, name)).selector

    async def resolve(self, namespace: str, name: str) -> ResolvedWorkload:
        """Raises ``WorkloadResolutionError`` naming the ScaledObject and the step that failed."""
        key = (namespace, name)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._resolve(namespace, name))
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        result = await asyncio.shield(task)
        self._cache.pop(key, None)
        self._cache[key] = (self._clock() + self.ttl_s, result)
        while len(self._cache) > self.maxsize:  # churn: the least recently resolved go first
            del self._cache[next(iter(self._cache))]
        return result

    def __len__(self) -> int:
        return len(self._cache)

    def invalidate(self, namespace: str, name: str) -> None:
        self._cache.pop((namespace, name), None)

    async def close(self) -> None:
        """End the lookups in flight, before the API client closes: a caller's cancellation does not reach
        them (they are shared, behind ``asyncio.shield``), and one left running would fail on the closed
        client."""
        await _cancel(self._inflight.values())

    async def _get(self, path: str) -> Json:
        return await get_json(self.api, path, timeout=self.request_timeout_s)

    async def _resolve(self, namespace: str, name: str) -> ResolvedWorkload:
        def fail(problem: str, e: KubeApiError | None = None) -> WorkloadResolutionError:
            if e is None:
                return WorkloadResolutionError(namespace, name, problem)
            return WorkloadResolutionError(
                namespace, name, f"{problem}: {e}", status=e.status, reason=e.reason
            )

        try:
            so = await self._get(f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/{name}")
        except KubeApiError as e:
            raise fail("cannot read the ScaledObject", e) from e
        ref = (so.get("spec") or {}).get("scaleTargetRef") or {}
        if not isinstance(ref, dict) or not ref.get("name"):
            raise fail("spec.scaleTargetRef.name is missing")
        target = ScaleTarget(
            api_version=str(ref.get("apiVersion") or "apps/v1"),
            kind=str(ref.get("kind") or "Deployment"),
            name=str(ref["name"]),
        )
        what = f"scale target {target.kind} {namespace}/{target.name} ({target.api_version})"
        plural = await self._plural(target, fail)
        try:
            scale = await self._get(
                f"{_api_base(target.api_version)}/namespaces/{namespace}/{plural}/{target.name}/scale"
            )
        except KubeApiError as e:
            raise fail(f"cannot read the /scale of {what}", e) from e
        selector = (scale.get("status") or {}).get("selector")
        if not isinstance(selector, str) or not selector:
            raise fail(
                f"the /scale of {what} reports no status.selector, so its pods cannot be found; "
                "set podSelector in the trigger metadata"
            )
        return ResolvedWorkload(namespace=namespace, scaled_object=name, target=target, selector=selector)

    async def _plural(
        self, target: ScaleTarget, fail: Callable[[str, KubeApiError | None], WorkloadResolutionError]
    ) -> str:
        key = (target.api_version, target.kind)
        if (plural := self._plurals.get(key)) is not None:
            return plural
        try:
            discovery = await self._get(_api_base(target.api_version))
        except KubeApiError as e:
            raise fail(f"cannot discover the resources of {target.api_version}", e) from e
        names = {str(r.get("name")) for r in discovery.get("resources") or [] if isinstance(r, dict)}
        for r in discovery.get("resources") or []:
            if isinstance(r, dict) and r.get("kind") == target.kind and "/" not in str(r.get("name")):
                plural = str(r["name"])
                if f"{plural}/scale" not in names:
                    raise fail(f"{target.kind} ({target.api_version}) has no /scale subresource", None)
                self._plurals[key] = plural
                return plural
        raise fail(f"the API server serves no kind {target.kind} in {target.api_version}", None)
