"""A destination as a real HTTP server on loopback: it verifies each delivery's Standard
Webhooks signature, records what it accepted (and when), and fails on demand.

Used by the destination tests and ``bench/destinations.py``.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookd.providers import PROVIDERS


def whsec(label: str) -> str:
    """A Standard Webhooks secret of its own per destination."""
    raw = f"{label}-destination-secret".ljust(32, "-")[:32].encode()
    return "whsec_" + base64.b64encode(raw).decode()


@dataclass
class Delivery:
    event_id: str
    event_type: str | None
    body: bytes
    headers: dict[str, str]
    at: float  # time.monotonic() at arrival


@dataclass
class Destination:
    """``status`` is what it answers (200 unless a test says otherwise); every request
    whose signature does not verify is kept in ``unsigned`` and answered 401."""

    secret: str
    status: int = 200
    accepted: list[Delivery] = field(default_factory=list)
    refused: list[Delivery] = field(default_factory=list)
    unsigned: list[dict[str, str]] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        at = time.monotonic()
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        standard = PROVIDERS["standard"]
        try:
            standard.verify_request(
                {k: [v] for k, v in headers.items()},
                body,
                [standard.parse_secret(self.secret)],
                int(time.time()),
                300,
            )
        except Exception:
            self.unsigned.append(headers)
            return Response(status_code=401)
        delivery = Delivery(
            headers["webhook-id"], headers.get("x-hookd-event-type"), body, headers, at
        )
        if self.status >= 300:
            self.refused.append(delivery)
            return Response(status_code=self.status)
        self.accepted.append(delivery)
        return Response(status_code=self.status)

    def ids(self) -> list[str]:
        return [d.event_id for d in self.accepted]

    def json_bodies(self) -> list[Any]:
        return [json.loads(d.body) for d in self.accepted]


def app(destinations: dict[str, Destination]) -> Starlette:
    """One server, a path per destination: ``/NAME``."""
    return Starlette(
        routes=[Route(f"/{name}", d.endpoint, methods=["POST"]) for name, d in destinations.items()]
    )


def max_in_window(times: list[float], window_s: float = 1.0) -> int:
    """The most arrivals within any window of ``window_s`` (sliding, half-open)."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window_s:
            start += 1
        most = max(most, end - start + 1)
    return most
