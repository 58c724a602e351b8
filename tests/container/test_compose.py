"""deploy/compose.yaml brought up for real: PostgreSQL, Redis, the migration, two
receivers' worth of `serve --workers 2`, a worker, Prometheus and Grafana.

Registries cannot be reached, so the four upstream images are replaced by stand-ins
built from Debian's packages (tests/container/compose.standins.yaml; Debian packages
no Grafana, so its stand-in serves Grafana's provisioning formats and API paths and
is not Grafana). The only other change to compose.yaml: its published ports are bound
to free ports on 127.0.0.1, so the stack cannot clash with anything on this host.
The stack's own traffic stays on the compose network Docker makes for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hookd.providers.signing import sample_event
from tests.support import containers
from tests.support.constants import SECRETS
from tests.support.server import free_port
from tests.support.services import require_tool
from tests.support.waiting import wait_for_sync

pytestmark = pytest.mark.timeout(1200)
ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERRIDE = Path(__file__).with_name("compose.standins.yaml")
ADMIN_TOKEN = "compose-admin-token"
METRICS_TOKEN = "compose-metrics-token"
GRAFANA_AUTH = ("admin", "compose-grafana-password")
HOOKD_JOBS = {"hookd-receiver", "hookd-worker"}
# Grafana's variables in the dashboard's queries, as Grafana would fill them in.
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$source": ".*"}


class Stack:
    def __init__(self, command: list[str], env: dict[str, str], ports: dict[str, int]) -> None:
        self.command = command
        self.env = env
        self.ports = ports

    def compose(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def logs(self, *services: str) -> str:
        done = self.compose("logs", "--no-color", "--tail", "40", *services, timeout_s=60)
        return done.stdout[-6000:]


def local_ports(compose: dict[str, Any]) -> dict[str, int]:
    """Rebind every published port to a free port on 127.0.0.1 (in place)."""
    ports: dict[str, int] = {}
    for name, service in compose["services"].items():
        published = []
        for entry in service.get("ports", []):
            target = str(entry).rsplit(":", 1)[-1]
            ports[name] = free_port()
            published.append(f"127.0.0.1:{ports[name]}:{target}")
        if published:
            service["ports"] = published
    return ports


@pytest.fixture(scope="module")
def stack(image: str, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    compose_tool = require_tool("docker-compose")
    started = time.monotonic()
    for name in ("postgres", "redis", "prometheus", "grafana"):
        containers.build_standin(name, base_image)
    print(f"\nstand-in images built or found in {time.monotonic() - started:.1f} s")
    tmp = tmp_path_factory.mktemp("compose")
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    ports = local_ports(compose)
    assert {"receiver", "prometheus", "grafana"} <= set(ports)
    (tmp / "compose.yaml").write_text(yaml.safe_dump(compose, sort_keys=False))
    project = f"hookdtest{uuid.uuid4().hex[:8]}"
    command = [
        compose_tool,
        "--project-name", project,
        # Relative paths (./hookd.toml, ./prometheus, ./grafana) as from deploy/.
        "--project-directory", str(DEPLOY),
        "-f", str(tmp / "compose.yaml"),
        "-f", str(OVERRIDE),
    ]  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOOKD_IMAGE": image,
        "HOOKD_ADMIN_TOKEN": ADMIN_TOKEN,
        "HOOKD_METRICS_TOKEN": METRICS_TOKEN,
        "GITHUB_WEBHOOK_SECRET": SECRETS["github"],
        "STRIPE_WEBHOOK_SECRET": SECRETS["stripe"],
        "POSTGRES_PASSWORD": "compose-pg-password",
        "GRAFANA_ADMIN_PASSWORD": GRAFANA_AUTH[1],
    }
    stack = Stack(command, env, ports)
    try:
        up = stack.compose("up", "-d", "--no-build", timeout_s=600)
        assert up.returncode == 0, up.stderr[-4000:] + stack.logs()

        def ready() -> bool:
            try:
                return httpx.get(stack.url("receiver") + "/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for_sync(ready, timeout_s=180, interval_s=0.5, message=stack.logs)
        print(f"compose stack up and ready in {time.monotonic() - started:.1f} s")
        yield stack
    finally:
        (tmp / "compose.log").write_text(stack.logs())
        stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout_s=300)


def prometheus_query(stack: Stack, query: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        stack.url("prometheus") + "/api/v1/query", params={"query": query}, timeout=5
    )
    answer.raise_for_status()
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def test_prometheus_scrapes_both_hookd_targets_with_the_metrics_token(stack: Stack) -> None:
    def up_jobs() -> dict[str, str]:
        try:
            rows = prometheus_query(stack, 'up{job=~"hookd-.*"}')
        except httpx.HTTPError:
            return {}
        return {row["metric"]["job"]: row["value"][1] for row in rows}

    # The first scrape comes within scrape_interval (15 s) of Prometheus' start.
    wait_for_sync(
        lambda: up_jobs() == dict.fromkeys(HOOKD_JOBS, "1"),
        timeout_s=90,
        interval_s=1,
        message=lambda: f"{up_jobs()}; {stack.logs('prometheus', 'worker')}",
    )
    # hookd's families came with them: the receiver's and the worker's own.
    jobs = {r["metric"]["job"] for r in prometheus_query(stack, "hookd_events_pending")}
    assert "hookd-receiver" in jobs
    processed = prometheus_query(stack, "hookd_events_processed_total")
    assert "hookd-worker" in {r["metric"]["job"] for r in processed}


def test_a_signed_event_sent_to_the_compose_receiver_is_processed(stack: Stack) -> None:
    headers, body = sample_event("github", SECRETS["github"], 1)
    with httpx.Client(base_url=stack.url("receiver"), timeout=10) as client:
        accepted = client.post("/hooks/github", content=body, headers=headers)
        assert accepted.status_code == 202, accepted.text
        event = f"/api/events/{accepted.json()['event_id']}"
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

        def status() -> str:
            return str(client.get(event, headers=auth).json()["status"])

        wait_for_sync(
            lambda: status() == "processed",
            timeout_s=60,
            interval_s=0.25,
            message=lambda: f"{status()}: {stack.logs('worker')}",
        )
        # The metrics token opens /metrics, and nothing else.
        assert client.get(
            event, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
        ).status_code in (401, 403)


def panel_queries(dashboard: dict[str, Any]) -> list[str]:
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found += [t["expr"] for t in inner.get("targets", []) if t.get("expr")]
    return found


def filled_in(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace("${" + name[1:] + "}", value).replace(name, value)
    assert not re.search(r"\$\{?\w", expr), f"a dashboard variable this test does not fill: {expr}"
    return expr


def test_grafana_loads_the_dashboard_and_its_queries_run_against_prometheus(stack: Stack) -> None:
    with httpx.Client(base_url=stack.url("grafana"), auth=GRAFANA_AUTH, timeout=20) as client:

        def health() -> bool:
            try:
                return client.get("/api/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for_sync(health, timeout_s=60, interval_s=0.5, message=lambda: stack.logs("grafana"))
        search = client.get("/api/search").json()
        assert {(d["uid"], d["folderTitle"]) for d in search} == {("hookd", "hookd")}
        loaded = client.get("/api/dashboards/uid/hookd").json()
        assert loaded["meta"]["provisioned"] is True
        queries = panel_queries(loaded["dashboard"])
        assert len(queries) >= 10
        request = {
            "queries": [
                {"refId": f"Q{i}", "datasource": {"uid": "prometheus"}, "expr": filled_in(q)}
                for i, q in enumerate(queries)
            ]
        }
        results = client.post("/api/ds/query", json=request).json()["results"]
        failed = {
            q: results[f"Q{i}"] for i, q in enumerate(queries) if results[f"Q{i}"]["status"] != 200
        }
        assert failed == {}, "Prometheus refused these dashboard queries"
