"""A real Prometheus server (Debian's ``prometheus`` package) started for a test on a free loopback port."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if len(result) >= min_series:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no result for {promql!r} within {timeout}s")
            time.sleep(0.25)

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
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not start: " + (tmp / f"{name}.log").read_text()[-2000:])
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
