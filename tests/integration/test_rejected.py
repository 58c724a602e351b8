"""Rejected requests on record: the real receiver refuses each kind of bad request
(over HTTP and through ASGI) and the background writer files one row for each, with
names and safe inputs only; bodies only for a source that opts in, sealed; the writer
drops beyond its bound without blocking; prune keeps the age and the per-source cap;
the API, the admin UI and the CLI list them; the ``rejections`` alert opens for a
burst and resolves when it ages out; and a ``pg_dump`` of the database after a burst
holds neither a secret nor a body."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from hookd.providers.github import github_headers
from hookd.providers.stripe import stripe_headers
from hookd.runtime.alerts import AlertSchedule
from hookd.sources import Sources, parse_sources
from ingest.rejected import Refusal, RejectedNotes
from store.crypto import BodyCipher
from store.intake import rejected as rejected_rows
from store.intake.rejected import RejectedRow
from store.retention.prune import Policy, prune
from tests.support import services
from tests.support.admin import login
from tests.support.asgi import running_app
from tests.support.cli import hookd
from tests.support.constants import GITHUB_SECRET, SECRETS, SOURCES_TOML, STRIPE_SECRET
from tests.support.data import engine_of

pytestmark = pytest.mark.anyio
TOKEN = "rejected-admin-token"
KEEPING = SOURCES_TOML.replace(
    f'secrets = ["{GITHUB_SECRET}"]',
    f'secrets = ["{GITHUB_SECRET}"]\nkeep_rejected_bodies = true',
    1,
)


@pytest.fixture(params=["asgi", "http"])
def via(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def recorded(url: str, **filters: object) -> list[RejectedRow]:
    async with engine_of(url) as engine, engine.connect() as conn:
        return await rejected_rows.recent(conn, limit=500, **filters)  # type: ignore[arg-type]


def everything_said(rows: list[RejectedRow]) -> str:
    return "\n".join(repr(row) for row in rows)


async def send_bad_requests(client: httpx.AsyncClient) -> dict[str, str]:
    """One request for each refusal; the signature values sent, by what they were."""
    now = int(time.time())
    body = json.dumps({"action": "opened", "marker": "github-wrong-secret"}).encode()
    wrong = github_headers("not-the-secret", body, "push", "delivery-1")
    answer = await client.post("/hooks/github", content=body, headers=wrong)
    assert answer.status_code == 401, answer.text
    stripe_body = b'{"id":"evt_1","type":"charge.succeeded","marker":"stripe-tampered"}'
    signed = stripe_headers(STRIPE_SECRET, stripe_body, now)
    answer = await client.post("/hooks/stripe", content=stripe_body + b" ", headers=signed)
    assert answer.status_code == 401, answer.text
    stale = stripe_headers(STRIPE_SECRET, stripe_body, now - 3600)
    answer = await client.post("/hooks/stripe", content=stripe_body, headers=stale)
    assert answer.status_code == 401, answer.text
    big = b"x" * 5000
    answer = await client.post("/hooks/standard", content=big)
    assert answer.status_code == 413, answer.text
    not_json = b"this is not json"
    headers = github_headers(GITHUB_SECRET, not_json, "push", "delivery-2")
    answer = await client.post("/hooks/github", content=not_json, headers=headers)
    assert answer.status_code == 400, answer.text
    answer = await client.post("/hooks/nobody", content=b"{}")
    assert answer.status_code == 404
    return {
        "github": wrong["X-Hub-Signature-256"],
        "stripe": signed["Stripe-Signature"],
        "stale": stale["Stripe-Signature"],
        "good": headers["X-Hub-Signature-256"],
    }


async def test_each_refusal_is_recorded_once_with_names_and_safe_inputs_only(
    via: str, sources: Sources, sqlite_url: str
) -> None:
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        sent = await send_bad_requests(client)
    rows = await recorded(sqlite_url)
    got = sorted((r.source, r.reason, r.status_code) for r in rows)
    assert got == [
        ("github", "bad_signature", 401),
        ("github", "malformed_payload", 400),
        ("standard", "body_too_large", 413),
        ("stripe", "bad_signature", 401),
        ("stripe", "timestamp_too_old", 401),
    ]  # the unknown source is not filed: there is no source to file it under
    said = everything_said(rows)
    for secret in SECRETS.values():
        assert secret not in said
    for value in sent.values():
        assert value not in said
        assert value.split("=", 1)[-1] not in said
    assert "github-wrong-secret" not in said and "stripe-tampered" not in said
    by = {(r.source, r.reason): r for r in rows}
    wrong = by["github", "bad_signature"]
    assert wrong.signature_headers == ["x-hub-signature-256"]
    assert "x-hub-signature-256" in wrong.header_names
    assert wrong.header_names == sorted(wrong.header_names)
    assert wrong.content_type == "application/json"
    assert wrong.body is None and wrong.body_sha256 is not None and len(wrong.body_sha256) == 64
    assert wrong.client is not None and wrong.client.startswith("127.0.0.1:")
    tampered = by["stripe", "bad_signature"]
    assert tampered.signature_headers == ["stripe-signature"]
    assert tampered.scheme_inputs["entries"] == ["t", "v1"]
    assert abs(tampered.scheme_inputs["skew_s"]) < 60
    stale = by["stripe", "timestamp_too_old"]
    assert 3500 < stale.scheme_inputs["skew_s"] < 3700
    assert stale.body_sha256 is None  # refused on its head: the body was never read
    large = by["standard", "body_too_large"]
    assert large.content_length == 5000 and large.body_sha256 is None
    assert all(r.body is None and not r.body_encrypted for r in rows)


async def test_a_source_that_keeps_bodies_keeps_them_sealed(
    tmp_path: Path, sqlite_url: str
) -> None:
    key = Fernet.generate_key().decode()
    kept = parse_sources(KEEPING, tmp_path / "hookd.toml", env={})
    body = b'{"marker":"kept-body"}'
    headers = github_headers("not-the-secret", body, "push", "delivery-9")
    async with running_app(kept, sqlite_url, encryption_keys=key) as (_, client):
        assert (
            await client.post("/hooks/github", content=body, headers=headers)
        ).status_code == 401
        stripe = stripe_headers("whsec_wrong", body, int(time.time()))
        assert (await client.post("/hooks/stripe", content=body, headers=stripe)).status_code == 401
    [github] = await recorded(sqlite_url, source="github")
    [other] = await recorded(sqlite_url, source="stripe")
    assert github.body is not None and github.body_encrypted
    assert body not in github.body
    assert BodyCipher(key).open(github.body, True) == body
    assert other.body is None  # stripe did not opt in


async def test_the_writer_drops_beyond_its_bound_without_blocking(
    sources: Sources, sqlite_url: str
) -> None:
    source = sources.get("github")
    assert source is not None
    async with engine_of(sqlite_url) as engine:
        notes = RejectedNotes(engine, BodyCipher(""), max_queued=3, max_queued_bytes=10)

        def refusal(body: bytes | None) -> Refusal:
            return Refusal(source, "bad_signature", 401, None, time.time(), {}, body=body)

        started = time.perf_counter()
        notes.note(refusal(b"1234"))
        notes.note(refusal(b"5678"))
        notes.note(refusal(b"too-much"))  # 16 bytes held: over the bytes bound
        for _ in range(1000):  # then the count bound
            notes.note(refusal(None))
        assert time.perf_counter() - started < 0.5
        assert notes.dropped == 1 + 999
        await notes.start()
        await notes.stop()
        assert notes.written == 3
    assert len(await recorded(sqlite_url)) == 3


def stored(source: str, at: datetime, reason: str = "bad_signature") -> RejectedRow:
    return RejectedRow(source, at, reason, 401, "10.0.0.1:1", None, None, None, [], [], {}, None)


async def test_prune_removes_old_rows_and_those_beyond_the_cap(
    sources: Sources, db_url: str
) -> None:
    now = datetime.now(UTC)
    rows = [stored("github", now - timedelta(seconds=i + 1)) for i in range(1003)]
    rows += [stored("github", now - timedelta(days=8, seconds=i)) for i in range(2)]
    rows += [stored("stripe", now - timedelta(days=6)), stored("stripe", now - timedelta(days=9))]
    rows.append(stored("gone", now - timedelta(days=8)))  # no longer configured
    async with engine_of(db_url) as engine:
        async with engine.begin() as conn:
            await rejected_rows.record_many(conn, rows)
        policy = Policy(7, 30, 90, 400)
        policies = {s.name: policy for s in sources}
        dry = await prune(engine, policies, now=now, owner="t", dry_run=True)
        assert dry.counts["github"].rejected == 5
        assert dry.counts["stripe"].rejected == 1
        assert dry.counts["gone"].rejected == 1
        done = await prune(engine, policies, now=now, owner="t", batch=100, pause_ratio=0)
        assert done.counts["github"].rejected == 5
        assert done.counts["stripe"].rejected == 1
        assert done.counts["gone"].rejected == 1
    left = await recorded(db_url, source="github")
    assert len(await recorded(db_url, source="github", reason="bad_signature")) == 500  # limit
    async with engine_of(db_url) as engine, engine.connect() as conn:
        again = await rejected_rows.would_prune(conn, now)
    assert again == {}
    assert min(r.received_at for r in left) >= now - timedelta(seconds=1001)


async def seed(url: str) -> None:
    now = datetime.now(UTC)
    async with engine_of(url) as engine, engine.begin() as conn:
        await rejected_rows.record_many(
            conn,
            [
                stored("github", now - timedelta(seconds=3)),
                stored("github", now - timedelta(seconds=2), "timestamp_too_old"),
                stored("stripe", now - timedelta(seconds=1)),
            ],
        )


async def test_the_api_and_the_admin_ui_list_them(sources: Sources, sqlite_url: str) -> None:
    await seed(sqlite_url)
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        every = (await client.get("/api/rejected", headers=auth)).json()["rejected"]
        assert [r["source"] for r in every] == ["stripe", "github", "github"]  # newest first
        one = await client.get(
            "/api/rejected", params={"source": "github", "reason": "bad_signature"}, headers=auth
        )
        assert [r["reason"] for r in one.json()["rejected"]] == ["bad_signature"]
        assert set(one.json()["rejected"][0]) >= {"header_names", "scheme_inputs", "body_kept"}
        assert "body" not in one.json()["rejected"][0]
        limited = await client.get("/api/rejected", params={"limit": "1"}, headers=auth)
        assert len(limited.json()["rejected"]) == 1
        assert (
            await client.get("/api/rejected", params={"limit": "501"}, headers=auth)
        ).status_code == 400
        assert (await client.get("/api/rejected")).status_code == 401
        await login(client, TOKEN)
        page = await client.get("/admin/rejected", params={"source": "github"})
        assert page.status_code == 200
        assert "timestamp_too_old" in page.text and "stripe</td>" not in page.text
        assert 'href="/admin/rejected"' in (await client.get("/admin/alerts")).text


def test_the_cli_lists_them(sqlite_url: str) -> None:
    import anyio

    anyio.run(seed, sqlite_url)
    done = hookd(sqlite_url, "rejected", "list", "--source", "github", "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["reason"] for line in lines] == ["timestamp_too_old", "bad_signature"]
    table = hookd(sqlite_url, "rejected", "list", "--reason", "bad_signature", "--limit", "5")
    assert table.returncode == 0, table.stderr
    assert "bad_signature" in table.stdout and "timestamp_too_old" not in table.stdout


async def test_the_rejections_alert_opens_for_a_burst_and_resolves_when_it_ages_out(
    sources: Sources, sqlite_url: str
) -> None:
    now = datetime.now(UTC)
    burst = [stored("github", now - timedelta(seconds=i)) for i in range(15)]
    burst += [stored("github", now - timedelta(seconds=i), "timestamp_too_old") for i in range(5)]
    burst += [stored("stripe", now - timedelta(seconds=i)) for i in range(19)]  # under 20
    async with engine_of(sqlite_url) as engine:
        async with engine.begin() as conn:
            await rejected_rows.record_many(conn, burst)
        async with httpx.AsyncClient() as http:
            schedule = AlertSchedule(engine, sources, http, prune_every_s=0)
            opened = await schedule.evaluate(now)
            assert opened is not None and len(opened.opened) == 1
            later = await schedule.evaluate(now + timedelta(minutes=6))
            assert later is not None and later.resolved == opened.opened
        from store.admin import alerts as store_alerts

        [alert] = await store_alerts.listed(
            engine, status=None, kind="rejections", source=None, limit=5
        )
    assert alert.key == "github" and alert.severity == "warning"
    assert "20 requests" in alert.summary and "bad_signature 15" in alert.summary
    assert alert.link == "/admin/rejected?source=github"


def dump(database: str) -> str:
    pg_dump = services.require_tool("pg_dump")
    dsn = services.PG_DSN.rsplit("/", 1)[0] + "/" + database
    return subprocess.run(
        [pg_dump, "--data-only", dsn], capture_output=True, text=True, timeout=60, check=True
    ).stdout


@services.ONLY_POSTGRES
async def test_a_dump_after_a_burst_holds_no_secret_and_no_body(
    tmp_path: Path, db_url: str
) -> None:
    key = Fernet.generate_key().decode()
    kept = parse_sources(KEEPING, tmp_path / "hookd.toml", env={})
    now = int(time.time())
    stripe_body = b'{"id":"evt_dump","marker":"stripe-body-never-kept"}'
    github_body = b'{"marker":"github-body-kept-sealed"}'
    async with running_app(kept, db_url, encryption_keys=key) as (_, client):
        for i in range(5):
            wrong = stripe_headers("whsec_wrong_secret", stripe_body, now)
            assert (
                await client.post("/hooks/stripe", content=stripe_body, headers=wrong)
            ).status_code == 401
            right = stripe_headers(STRIPE_SECRET, stripe_body, now)
            tampered = stripe_body.replace(b"never", b"NEVER")
            assert (
                await client.post("/hooks/stripe", content=tampered, headers=right)
            ).status_code == 401
            signed = github_headers("gh-wrong", github_body, "push", f"d-{i}")
            assert (
                await client.post("/hooks/github", content=github_body, headers=signed)
            ).status_code == 401
    assert len(await recorded(db_url)) == 15
    text = dump(db_url.rsplit("/", 1)[1])
    assert "rejected_requests" in text
    for secret in [*SECRETS.values(), key, "whsec_wrong_secret", "gh-wrong"]:
        assert secret not in text
        assert secret.encode().hex() not in text
    for body in (stripe_body, stripe_body.replace(b"never", b"NEVER"), github_body):
        assert body.decode() not in text
        assert body.hex() not in text  # bytea is dumped as hex
    assert b"never-kept".hex() not in text and "kept-sealed" not in text
