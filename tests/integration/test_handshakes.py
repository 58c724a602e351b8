"""Registration handshakes through the real app: answered exactly as Dropbox, X and
Microsoft Graph document, junk refused with 400, no row ever stored by a handshake, and
the source's signed deliveries still verified as before."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from hookd.sources import Sources, parse_sources
from store.models import EVENTS
from tests.support.asgi import running_app
from tests.support.data import engine_of

pytestmark = pytest.mark.anyio
SECRET = "handshake-secret"
VERIFY = 'header = "X-Signature"\nprefix = "sha256="\ndedupe = "json:id"\n'
GRAPH_TOKEN = "Validation: Testing client application reachability for subscription Request-Id: 42"


def sources() -> Sources:
    text = ""
    for name, provider, handshake in [
        ("dropbox", "hmac", "dropbox"),
        ("x", "hmac", "x_crc"),
        ("graph", "hmac", "graph"),
        ("tokendrop", "token", "dropbox"),
    ]:
        verify = VERIFY if provider == "hmac" else 'header = "X-Token"\ndedupe = "json:id"\n'
        text += (
            f'[[sources]]\nname = "{name}"\nprovider = "{provider}"\nsecrets = ["{SECRET}"]\n'
            f'[sources.verify]\n{verify}handshake = "{handshake}"\n\n'
        )
    return parse_sources(text, Path("hookd.toml"), {})


async def row_count(url: str) -> int:
    async with engine_of(url) as engine, engine.connect() as conn:
        count = (await conn.execute(sa.select(sa.func.count()).select_from(EVENTS))).scalar()
    return int(count or 0)


def signed(body: bytes) -> dict[str, str]:
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Signature": f"sha256={digest}", "Content-Type": "application/json"}


async def test_handshakes_are_answered_and_store_nothing(sqlite_url: str) -> None:
    crc = "9b4507b3-9040-4669-9ca3-6b94edb50553"
    async with running_app(sources(), sqlite_url, reconcile_schedule=False) as (_, client):
        dropbox = await client.get("/hooks/dropbox", params={"challenge": "Zt9Yq_AbC-123"})
        token_dropbox = await client.get("/hooks/tokendrop?challenge=abc")
        x = await client.get("/hooks/x", params={"crc_token": crc})
        graph = await client.post(
            f"/hooks/graph?validationToken={quote(GRAPH_TOKEN)}",
            content=b"",
            headers={"Content-Type": "text/plain; charset=utf-8"},
        )
        bare_get = await client.get("/hooks/dropbox")
        x_post = await client.post("/hooks/x", params={"crc_token": crc}, content=b"{}")
    assert (dropbox.status_code, dropbox.content) == (200, b"Zt9Yq_AbC-123")
    for echo in (dropbox, token_dropbox, graph):
        assert echo.headers["content-type"].split(";")[0] == "text/plain"
        assert echo.headers["x-content-type-options"] == "nosniff"
    assert (token_dropbox.status_code, token_dropbox.content) == (200, b"abc")
    mac = hmac.new(SECRET.encode(), crc.encode(), hashlib.sha256).digest()
    assert x.status_code == 200
    assert x.headers["content-type"] == "application/json"
    assert x.json() == {"response_token": "sha256=" + base64.b64encode(mac).decode()}
    assert (graph.status_code, graph.content) == (200, GRAPH_TOKEN.encode())
    assert bare_get.status_code == 405
    # A POST is a delivery to verify, whatever its query says: this one is unsigned.
    assert (x_post.status_code, x_post.json()) == (401, {"error": "missing_header"})
    assert await row_count(sqlite_url) == 0


async def test_junk_is_400_and_deliveries_still_verify(sqlite_url: str) -> None:
    body = json.dumps({"id": "evt_1"}).encode()
    async with running_app(sources(), sqlite_url, reconcile_schedule=False) as (_, client):
        markup = await client.get("/hooks/dropbox", params={"challenge": "<b>hi</b>"})
        doubled = await client.get("/hooks/x?crc_token=a&crc_token=b")
        long = await client.post(f"/hooks/graph?validationToken={'x' * 513}", content=b"")
        delivered = await client.post("/hooks/graph", content=body, headers=signed(body))
        again = await client.post("/hooks/graph", content=body, headers=signed(body))
        forged = await client.post("/hooks/dropbox", content=body, headers=signed(body + b" "))
        crowded = await client.get("/hooks/dropbox?" + "&".join(f"p{i}=1" for i in range(40)))
    for refused in (markup, doubled, long, crowded):
        assert refused.status_code == 400
        assert refused.json()["error"] == "malformed_payload"
        assert b"<b>" not in refused.content
    assert delivered.status_code == 202, delivered.text
    assert again.status_code == 200
    assert (forged.status_code, forged.json()) == (401, {"error": "bad_signature"})
    assert await row_count(sqlite_url) == 1
