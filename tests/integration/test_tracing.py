"""OpenTelemetry tracing across processes: a real ``hookd serve`` and ``hookd worker``
(PostgreSQL, a private Redis) export to an OTLP/HTTP receiver on loopback, and a
``[sources.forward]`` target records the ``traceparent`` it was sent; a handler that
fails once makes two attempts, each a claim, a processing span and a handler span; a
``hookd reconcile`` run against the GitHub emulator exports its run and pages."""

from __future__ import annotations

import gzip
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookd.providers.signing import sample_event
from tests.integration.test_reconcile_processes import reconcile_cli, seeded_github
from tests.support import destinations
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.destinations import Destination, whsec
from tests.support.handlers import github_source
from tests.support.http import serve_app
from tests.support.reconcile_world import sources_toml
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class SpanSeen:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    process: str  # the resource's hookd.process: serve, worker
    attributes: dict[str, str]
    # Its links: (trace id, span id, the link's attributes).
    links: list[tuple[str, str, dict[str, str]]]
    status: int  # 0 unset, 1 ok, 2 error


def _text(value: AnyValue) -> str:
    """An attribute's value as text; an array's joined with commas."""
    if value.HasField("array_value"):
        return ",".join(_text(v) for v in value.array_value.values)
    return value.string_value or str(value.int_value)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, str]:
    return {a.key: _text(a.value) for a in pairs}


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` with protobuf, decoded."""

    spans: list[SpanSeen] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)

    async def traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        self.raw.append(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        for resource_spans in message.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        SpanSeen(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            process=resource.get("hookd.process", ""),
                            attributes=_attributes(span.attributes),
                            links=[
                                (
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    _attributes(link.attributes),
                                )
                                for link in span.links
                            ],
                            status=span.status.code,
                        )
                    )
        return Response(status_code=200, media_type="application/x-protobuf")

    def named(self, name: str) -> list[SpanSeen]:
        return [s for s in self.spans if s.name == name]


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    seen = Collector()
    app = Starlette(routes=[Route("/v1/traces", seen.traces, methods=["POST"])])
    async with serve_app(app) as url:
        yield seen, url


async def stored_context(url: str, event_id: str) -> tuple[str | None, str]:
    """An event's ``traceparent`` column and its stored headers, as text."""
    async with engine_of(url) as engine, engine.connect() as conn:
        sql = sa.text("SELECT traceparent, headers FROM events WHERE id = :id")
        row = (await conn.execute(sql, {"id": event_id})).one()
        return row[0], str(row[1])


FAILS_ONCE = "tests.support.handlers:fails_once"


def config(tmp_path: Path, forward_url: str) -> Path:
    forward = (
        f'[sources.forward]\nurl = "{forward_url}"\nallow_insecure = true\n'
        f'secret = "{whsec("forward")}"\n'
    )
    return github_source(tmp_path / "tracing.toml", FAILS_ONCE, forward)


async def test_one_github_delivery_is_one_trace_across_receiver_worker_and_forward(
    tmp_path: Path, pg_url: str, collector: tuple[Collector, str]
) -> None:
    seen, otlp_url = collector
    target = Destination(whsec("forward"))
    async with serve_app(destinations.app({"forward": target})) as target_url:
        env = {
            "HOOKD_CONFIG": str(config(tmp_path, f"{target_url}/forward")),
            "HOOKD_DATABASE_URL": pg_url,
            "HOOKD_LOG_LEVEL": "INFO",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_url,
            "OTEL_SERVICE_NAME": "hookd-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            # The handler's failed first attempt is due again at once, found by a sweep.
            "HOOKD_RETRY_BASE_S": "0.01",
            "HOOKD_SWEEP_S": "1",
        }
        with RedisServer(tmp_path) as redis:
            env["HOOKD_REDIS_URL"] = redis.url
            with HookdServer(env, tmp_path) as server, HookdWorker(env, tmp_path) as worker:
                headers, body = sample_event("github", SECRETS["github"], 7)
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                    response = await client.post("/hooks/github", content=body, headers=headers)
                assert response.status_code == 202
                event_id = response.json()["event_id"]

                async def forwarded() -> bool:
                    return len(target.accepted) == 1

                await wait_for(forwarded, timeout_s=60, message=worker.log)

                async def exported() -> bool:
                    names = [s.name for s in seen.spans]
                    return (
                        {"hookd.receive", "hookd.deliver"} <= set(names)
                        and names.count("hookd.process") == 2
                        and names.count("hookd.handler") == 2
                        and names.count("hookd.claim") == 2
                    )

                await wait_for(exported, timeout_s=30, message=lambda: [s.name for s in seen.spans])
                server_log = server.log()

    (receive,) = seen.named("hookd.receive")
    first, second = sorted(seen.named("hookd.process"), key=lambda s: s.attributes["hookd.attempt"])
    (forward,) = seen.named("hookd.deliver")
    assert (receive.process, first.process, forward.process) == ("serve", "worker", "worker")
    assert (first.attributes["hookd.attempt"], second.attributes["hookd.attempt"]) == ("1", "2")
    trace_id = receive.trace_id
    # A claim takes events of many traces: it and its wake-up are in traces of their own.
    batch = {"hookd.claim", "hookd.wake"}
    traced = [s for s in seen.spans if s.name not in batch]
    assert {s.trace_id for s in traced} == {trace_id}, "one trace across the processes"
    for process in (first, second):
        assert process.parent_id == receive.span_id, "processing continues the stored context"
    # Each attempt's claim: a span of the worker, linked to the event's stored context
    # (the receive span), and linked to from that attempt's processing span.
    claims = {c.span_id: c for c in seen.named("hookd.claim")}
    for process in (first, second):
        ((link_trace, link_span, _),) = process.links
        claim = claims.pop(link_span)
        assert claim.trace_id == link_trace != trace_id
        assert claim.process == "worker"
        assert claim.attributes["hookd.claim.count"] == "1"
        assert claim.attributes["hookd.sources"] == "github"
        assert claim.links == [(trace_id, receive.span_id, {"hookd.event_id": event_id})]
        # Its wake-up's span is its parent, when a wake-up (not a sweep) started its drain.
        wakes = {w.span_id: w for w in seen.named("hookd.wake")}
        if claim.parent_id:
            assert wakes[claim.parent_id].trace_id == claim.trace_id
            assert wakes[claim.parent_id].attributes["hookd.wake.via"] == "arq"
    assert not claims, "one claim per attempt"
    # A hookd.handler span per handler attempt, in its attempt's processing span; the
    # failed one marked failed with the error's type only.
    failed, succeeded = sorted(
        seen.named("hookd.handler"), key=lambda s: s.parent_id != first.span_id
    )
    assert (failed.parent_id, succeeded.parent_id) == (first.span_id, second.span_id)
    assert failed.attributes["hookd.handler"] == succeeded.attributes["hookd.handler"] == FAILS_ONCE
    assert (failed.status, failed.attributes["error.type"]) == (2, "RuntimeError")
    assert succeeded.status != 2 and "error.type" not in succeeded.attributes
    assert (first.attributes["hookd.outcome"], second.attributes["hookd.outcome"]) == (
        "failed",
        "processed",
    )
    process = first
    column, stored_headers = await stored_context(pg_url, event_id)
    assert column is not None and column.startswith(f"00-{trace_id}-{receive.span_id}-")
    assert "traceparent" not in stored_headers, "the provider's headers are left as they came"
    assert receive.attributes["hookd.event_id"] == process.attributes["hookd.event_id"] == event_id
    assert receive.attributes["hookd.outcome"] == "accepted"
    assert forward.attributes["hookd.destination"] == "forward"
    assert forward.parent_id == process.span_id
    assert {"hookd.verify", "hookd.commit"} <= {s.name for s in seen.spans}
    # The forward target was sent the trace context of the delivery's span (W3C).
    sent = target.accepted[0].headers["traceparent"]
    flags = re.fullmatch(rf"00-{trace_id}-{forward.span_id}-([0-9a-f]{{2}})", sent)
    assert flags is not None and int(flags[1], 16) & 1, f"not this span's, sampled: {sent}"
    # Logs made inside a span carry its ids.
    (accepted,) = [line for line in server_log.splitlines() if f"event_id={event_id}" in line]
    assert " accepted " in accepted and f"trace_id={trace_id}" in accepted
    assert f"span_id={receive.span_id}" in accepted
    # No payload in what was exported: not the body, not the delivery's signature.
    exported_bytes = b"".join(seen.raw)
    assert body[:40] not in exported_bytes
    assert headers["X-Hub-Signature-256"].encode() not in exported_bytes


async def test_a_reconcile_run_and_its_pages_are_spans_of_one_trace(
    tmp_path: Path, pg_url: str, collector: tuple[Collector, str]
) -> None:
    seen, otlp_url = collector
    emulator, _ = await seeded_github(pg_url, 30, 5)
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("github", api_url))
        env = {
            "HOOKD_CONFIG": str(config),
            "HOOKD_DATABASE_URL": pg_url,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{otlp_url}/v1/traces",
        }
        proc, out = await reconcile_cli(env, "github")
        output = (await out).decode()
        assert await proc.wait() == 0, output
    assert "github: succeeded" in output
    # The process exported what it buffered before it exited.
    (run,) = seen.named("hookd.reconcile.run")
    pages = seen.named("hookd.reconcile.page")
    assert run.process == "reconcile"
    assert run.attributes["hookd.source"] == "github"
    assert run.attributes["hookd.outcome"] == "succeeded"
    assert pages and {p.parent_id for p in pages} == {run.span_id}
    assert {p.trace_id for p in pages} == {run.trace_id}
    assert [p.attributes["hookd.page"] for p in pages] == [str(n) for n in range(1, len(pages) + 1)]
