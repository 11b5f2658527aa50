"""A real Prometheus server (Debian's ``prometheus`` package) started for a test on a free loopback port."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.poll import until_sync

__all__ = ["PrometheusServer", "free_port", "prometheus_binary", "run_prometheus"]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (each item with ``metric`` labels and ``value``)."""
        body = self._get("/api/v1/query", query=promql)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 20.0, min_series: int = 1) -> list[dict[str, Any]]:
        """``query(promql)`` until it returns at least ``min_series`` series."""
        return until_sync(
            lambda: self.query(promql),
            timeout,
            f"{min_series} or more series for {promql!r}",
            interval=0.25,
            ok=lambda result: len(result) >= min_series,
        )

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts, pending or firing (each with ``labels``, ``annotations``, ``state``)."""
        body = self._get("/api/v1/alerts")
        assert body["status"] == "success", body
        alerts: list[dict[str, Any]] = body["data"]["alerts"]
        return alerts

    def targets_up(self) -> bool:
        body = self._get("/api/v1/targets")
        active = body["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


@contextmanager
def run_prometheus(
    tmp: Path,
    targets: Sequence[str],
    *,
    scrape_interval: str = "1s",
    honor_labels: bool = True,
    target_labels: Mapping[str, str] | None = None,
    name: str = "prometheus",
    scrape_configs: Sequence[Mapping[str, Any]] | None = None,
    rule_files: Sequence[Path] = (),
) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``targets``. ``target_labels``: labels Prometheus attaches to the targets (as a
    ServiceMonitor does with the scraped pod's ``namespace``/``pod``); with ``honor_labels=False`` they win,
    and the agent's own labels of those names arrive as ``exported_*``. ``scrape_configs``: whole scrape
    configs instead (``targets`` is then unused), e.g. what the Prometheus Operator makes of a
    ServiceMonitor. ``rule_files``: recording and alerting rules to load."""
    import yaml

    binary = prometheus_binary()
    assert binary, "prometheus is not installed"
    port = free_port()
    cfg = tmp / f"{name}.yml"
    if scrape_configs is None:
        job: dict[str, Any] = {
            "job_name": "gpuscale-agent",
            "honor_labels": honor_labels,
            "static_configs": [{"targets": list(targets)}],
        }
        if target_labels:
            job["static_configs"][0]["labels"] = dict(target_labels)
        scrape_configs = [job]
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [dict(c) for c in scrape_configs],
    }
    if rule_files:
        config["rule_files"] = [str(f) for f in rule_files]
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    data = tmp / f"{name}-data"
    log = (tmp / f"{name}.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    server = PrometheusServer(port)
    try:
        _started(proc, server, tmp / f"{name}.log")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _started(proc: subprocess.Popen[bytes], server: PrometheusServer, log: Path) -> None:
    """Until Prometheus answers ``/-/ready``; a ``RuntimeError`` with its log if it exits or takes 30 s."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with code {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        until_sync(ready, 30, "prometheus answering /-/ready", interval=0.1)
    except AssertionError as e:
        raise RuntimeError(f"prometheus did not start ({e}): {log.read_text()[-2000:]}") from None
