"""deploy/Dockerfile built and run for real: the image (on a base made from Debian's
packages by deploy/base-image.sh when no registry can be reached) runs `db upgrade`,
`serve` and `worker` containers against the test PostgreSQL and a private Redis, on
the host's network (loopback only). Signed events sent to the serve container are
processed by the worker container and forwarded to a destination on the host.

Needs a Docker engine (scripts/container-engine.sh starts one): skipped without it
on a laptop, a failure under CI=true.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from hookd.providers.signing import sample_event
from tests.support import containers, services
from tests.support.constants import SECRETS
from tests.support.containers import Container, docker
from tests.support.server import RedisServer, free_port
from tests.support.waiting import wait_for_sync

pytestmark = pytest.mark.timeout(1200)
ADMIN_TOKEN = "container-admin-token"
METRICS_TOKEN = "container-metrics-token"
FORWARD_SECRET = "whsec_" + base64.b64encode(b"container-forward-secret").decode()
EVENTS = 5
HOOKD_UID = "10001"


class Destination:
    """A forward target on the host's loopback: records what it was sent."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append({"headers": dict(self.headers), "body": self.rfile.read(length)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stack:
    def __init__(self, serve: Container, worker: Container, url: str, destination: Destination):
        self.serve = serve
        self.worker = worker
        self.url = url
        self.destination = destination


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    services.require_pg()
    tmp = tmp_path_factory.mktemp("stack")
    database = services.create_database()  # empty: the db upgrade container migrates it
    destination = Destination()
    config = tmp / "hookd.toml"
    config.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["${{GITHUB_WEBHOOK_SECRET}}"]

[sources.forward]
url = "{destination.url}"
allow_insecure = true
secret = "{FORWARD_SECRET}"
"""
    )
    config.chmod(0o644)
    redis = RedisServer(tmp).start()
    port, metrics_port = free_port(), free_port()
    env = {
        "HOOKD_DATABASE_URL": services.sqlalchemy_url(database),
        "HOOKD_REDIS_URL": redis.url,
        "HOOKD_ADMIN_TOKEN": ADMIN_TOKEN,
        "HOOKD_METRICS_TOKEN": METRICS_TOKEN,
        "HOOKD_LOG_JSON": "true",
        "GITHUB_WEBHOOK_SECRET": SECRETS["github"],
    }
    volumes = [f"{config}:/etc/hookd/hookd.toml:ro"]
    # The image's own HEALTHCHECK command, checked every second instead of every 30.
    health = ["--health-interval", "1s", "--health-start-period", "0s"]
    started: list[Container] = []
    try:
        upgrade = docker(
            "run", "--rm", "--network", "host", "-v", volumes[0],
            *(arg for k, v in env.items() for arg in ("-e", f"{k}={v}")),
            image, "db", "upgrade", timeout_s=180,
        )  # fmt: skip
        assert "at schema" in upgrade.stdout + upgrade.stderr, upgrade.stderr
        serve = Container(
            image,
            ["serve", "--host", "127.0.0.1", "--port", str(port)],
            env={**env, "HOOKD_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"},
            volumes=volumes,
            options=health,
            logs_dir=tmp,
        )
        started.append(serve)
        worker = Container(
            image,
            ["worker"],
            env={
                **env,
                "HOOKD_WORKER_METRICS_PORT": str(metrics_port),
                "HOOKD_HEALTHCHECK_URL": f"http://127.0.0.1:{metrics_port}/healthz",
            },
            volumes=volumes,
            options=health,
            logs_dir=tmp,
        )
        started.append(worker)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(url + "/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for_sync(ready, timeout_s=60, interval_s=0.2, message=serve.logs)
        yield Stack(serve, worker, url, destination)
    finally:
        for container in started:
            container.remove()
        redis.stop()
        destination.close()
        services.drop_database(database)


def test_signed_events_sent_to_the_serve_container_are_processed_by_the_worker_container(
    stack: Stack,
) -> None:
    ids = []
    with httpx.Client(base_url=stack.url, timeout=10) as client:
        for seq in range(EVENTS):
            headers, body = sample_event("github", SECRETS["github"], seq)
            accepted = client.post("/hooks/github", content=body, headers=headers)
            assert accepted.status_code == 202, accepted.text
            ids.append(accepted.json()["event_id"])
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

        def statuses() -> set[str]:
            return {client.get(f"/api/events/{i}", headers=auth).json()["status"] for i in ids}

        wait_for_sync(
            lambda: statuses() == {"processed"},
            timeout_s=60,
            interval_s=0.25,
            message=lambda: f"{statuses()}; worker log: {stack.worker.logs()}",
        )
    # Forwarded by the worker container, one delivery per event (its webhook-id is
    # the event id), signed for the destination.
    received = [{k.lower(): v for k, v in d["headers"].items()} for d in stack.destination.received]
    assert {h["webhook-id"] for h in received} == set(ids)
    assert all(h["webhook-signature"].startswith("v1,") for h in received)


def test_serve_and_worker_containers_pass_the_image_healthcheck(stack: Stack) -> None:
    for container in (stack.serve, stack.worker):
        container.wait_healthy(timeout_s=30)
        check = containers.inspect(container.name)["Config"]["Healthcheck"]["Test"]
        assert check[0] == "CMD" and "/healthz" in " ".join(check)


def test_containers_run_as_the_non_root_hookd_user(stack: Stack, image: str) -> None:
    assert containers.inspect(image)["Config"]["User"] == "hookd"
    for container in (stack.serve, stack.worker):
        # PID 1 (hookd itself), not just a shell started later.
        status = container.exec("cat", "/proc/1/status")
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert set(uids) == {HOOKD_UID}, status
        assert container.exec("id", "-un").strip() == "hookd"
