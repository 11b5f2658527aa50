"""Raw JSON GETs through a ``KubeApi``: in a pod, an ``InClusterApi`` (the service account, plain aiohttp);
from a kubeconfig, a kubernetes_asyncio ``ApiClient`` (its configuration, TLS and credentials), without its
model classes either way: gpuscale reads a few fields of a few objects, and a node's pod list is large.

The one place where kubernetes_asyncio and aiohttp exceptions, and API ``Status`` answers, become
``KubeApiError``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Union

import aiohttp

from .errors import KubeApiError
from .incluster import InClusterApi

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

__all__ = ["Json", "KubeApi", "get_json", "iter_lines", "open_stream"]

Json = dict[str, Any]
KubeApi = Union["ApiClient", InClusterApi]  # what api_client_from gives: close() it when done
_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError)


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


async def _request(
    api: KubeApi, path: str, query: Sequence[tuple[str, str]], timeout: aiohttp.ClientTimeout
) -> aiohttp.ClientResponse:
    if isinstance(api, InClusterApi):
        try:
            response = await api.get(path, query, timeout)
        except _TRANSPORT_ERRORS as e:
            raise KubeApiError(path, 0, "", _describe(e)) from e
    else:
        response = await _request_client(api, path, query, timeout)
    if response.status >= 300:
        try:
            body = await response.read()
        except _TRANSPORT_ERRORS:
            body = b""
        finally:
            response.release()
        reason, message = response.reason or "", body.decode("utf-8", "replace")[:500]
        try:
            status = json.loads(body)
            if isinstance(status, dict) and status.get("kind") == "Status":
                reason, message = str(status.get("reason") or reason), str(status.get("message") or message)
        except ValueError:
            pass
        raise KubeApiError(path, response.status, reason, message)
    return response


async def _request_client(
    api: ApiClient, path: str, query: Sequence[tuple[str, str]], timeout: aiohttp.ClientTimeout
) -> aiohttp.ClientResponse:
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        response: aiohttp.ClientResponse = await api.call_api(
            path,
            "GET",
            query_params=list(query),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
    except ApiException as e:
        raise KubeApiError(path, int(e.status or 0), str(e.reason or ""), str(e.body or "")) from e
    except _TRANSPORT_ERRORS as e:
        raise KubeApiError(path, 0, "", _describe(e)) from e
    return response


async def get_json(
    api: KubeApi, path: str, query: Sequence[tuple[str, str]] = (), *, timeout: float = 30.0
) -> Json:
    """``GET path?query`` → the JSON object answered; ``KubeApiError`` for anything else."""
    response = await _request(api, path, query, aiohttp.ClientTimeout(total=timeout))
    try:
        body = await response.read()
    except _TRANSPORT_ERRORS as e:
        raise KubeApiError(path, response.status, "", _describe(e)) from e
    finally:
        response.release()
    try:
        data = json.loads(body)
    except ValueError as e:
        raise KubeApiError(path, response.status, "", f"response is not JSON: {body[:200]!r}") from e
    if not isinstance(data, dict):
        raise KubeApiError(path, response.status, "", f"response is not a JSON object: {body[:200]!r}")
    return data


async def open_stream(
    api: KubeApi,
    path: str,
    query: Sequence[tuple[str, str]],
    *,
    connect_timeout: float,
    read_timeout: float,
) -> aiohttp.ClientResponse:
    """Start a streaming GET (a watch). The caller must ``release()`` the response."""
    timeout = aiohttp.ClientTimeout(
        connect=connect_timeout, sock_connect=connect_timeout, sock_read=read_timeout
    )
    return await _request(api, path, query, timeout)


async def iter_lines(response: aiohttp.ClientResponse, path: str) -> AsyncIterator[bytes]:
    """The newline-separated chunks of a streaming body, of any length (aiohttp's ``readline`` caps a line at
    128 KiB, less than a large Pod)."""
    buffer = b""
    try:
        async for chunk in response.content.iter_any():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line
    except _TRANSPORT_ERRORS as e:
        raise KubeApiError(path, response.status, "", f"stream broken: {_describe(e)}") from e
    if buffer.strip():
        yield buffer
