"""A provider is one registry entry: a fifth one, declared only in
``tests/support/fifth_provider.py`` and registered here, works in the sources file,
``hookd send-test``, the receiver and reconciliation with no other change to hookd.
"""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from hookd.cli.parser import build_parser
from hookd.cli.send_test import cmd_send_test
from hookd.errors import ConfigError
from hookd.providers import PROVIDERS, register
from hookd.providers.reconciling import ReconcileConfig
from hookd.providers.signing import sample_event
from hookd.settings import Settings
from hookd.sources import api_url, parse_sources
from reconcile.poller import Reconciler
from reconcile.providers import adapter_class
from reconcile.providers.base import ListAdapter
from store import db
from store.crypto import BodyCipher
from store.models import EVENTS
from store.reconcile import runs as rstate
from tests.support import fifth_provider
from tests.support.asgi import running_app
from tests.support.fifth_provider import FifthAdapter, FifthEmulator, FifthReconcile
from tests.support.http import serve_app

ROOT = Path(__file__).resolve().parents[2]
P = Path("hookd.toml")
SECRET = "fifth-webhook-secret"
TOKEN = "fifth-api-token"
STREAM = "orders"
# Every provider hookd registers, as an unknown provider's line lists them.
BUILT_IN = ", ".join(repr(name) for name in PROVIDERS)


def source_toml(reconcile: str = f'token = "{TOKEN}"\nstream = "{STREAM}"\n') -> str:
    head = f'[[sources]]\nname = "f5"\nprovider = "fifth"\nsecrets = ["{SECRET}"]\n'
    return head + (f"[sources.reconcile]\n{reconcile}" if reconcile else "")


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_sources(text, P, {})
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.fixture
def fifth() -> Iterator[None]:
    """The fifth provider registered for one test, and gone again after it."""
    register(fifth_provider.PROVIDER)
    try:
        yield
    finally:
        del PROVIDERS[fifth_provider.NAME]


# --- the registry ----------------------------------------------------------------


def test_every_registered_provider_declares_a_usable_list_adapter() -> None:
    """An adapter is named by a string, so check that each name resolves."""
    assert list(PROVIDERS)[:6] == ["github", "stripe", "slack", "standard", "hmac", "token"]
    for name, provider in PROVIDERS.items():
        if provider.reconcile is None:
            with pytest.raises(Exception, match="has no list API"):
                adapter_class(name)
            continue
        assert issubclass(provider.reconcile.settings, ReconcileConfig)
        assert provider.reconcile.api_url.startswith("https://")
        assert issubclass(adapter_class(name), ListAdapter)


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(PROVIDERS["github"])


# The generic parts: a provider's name in them is a per-provider rule in the wrong place.
GENERIC = ["reconcile/poller.py", "reconcile/run.py", "reconcile/page.py", "reconcile/service.py"]
GENERIC += ["reconcile/providers/__init__.py"]
GENERIC += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "ingest").glob("*.py"))]


@pytest.mark.parametrize("path", GENERIC)
def test_generic_code_names_no_provider(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text())
    names = {"github", "stripe", "slack", "standard"}
    strings = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    modules = {
        f"{node.module}.{alias.name}" if node.module else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    } | {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not strings & names
    assert not {m for m in modules if m.rpartition(".")[2] in names}


# --- the sources file -------------------------------------------------------------


def test_config_takes_the_fifth_provider_and_its_reconcile_table(fifth: None) -> None:
    source = parse_sources(source_toml(), P, {}).get("f5")
    assert source is not None
    assert source.provider == "fifth"
    assert isinstance(source.config.reconcile, FifthReconcile)
    assert source.config.reconcile.stream == STREAM
    assert api_url(source.config) == "https://fifth.invalid/api"


def test_config_errors_for_the_fifth_provider_are_the_usual_one_liners(fifth: None) -> None:
    bad_key = source_toml(f'token = "{TOKEN}"\nstrem = "{STREAM}"\n')
    assert error_of(bad_key) == (
        "hookd.toml: source 'f5': key 'reconcile.strem': unknown key (did you mean 'stream'?)"
    )
    assert error_of(source_toml(f'token = "{TOKEN}"\n')) == (
        "hookd.toml: source 'f5': key 'reconcile.stream': is required for fifth"
    )
    assert error_of(source_toml(f'stream = "{STREAM}"\n')) == (
        "hookd.toml: source 'f5': key 'reconcile.token': is required"
    )
    assert error_of(source_toml('token = "t"\nstream = "s"\nchannels = ["C1"]\n')) == (
        "hookd.toml: source 'f5': key 'reconcile.channels': not a fifth setting"
    )
    github = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\n'
    github += '[sources.reconcile]\ntoken = "t"\nhook = "app"\nstream = "s"\n'
    assert error_of(github) == (
        "hookd.toml: source 'gh': key 'reconcile.stream': not a github setting"
    )
    unknown = source_toml("").replace('"fifth"', '"sixth"')
    assert error_of(unknown) == (
        "hookd.toml: source 'f5': key 'provider': unknown provider 'sixth' "
        "(did you mean 'fifth'?); use one of "
        f"{BUILT_IN} or 'fifth'"
    )


def test_without_registration_there_is_no_fifth_provider() -> None:
    *first, last = (repr(name) for name in PROVIDERS)
    assert error_of(source_toml("")) == (
        "hookd.toml: source 'f5': key 'provider': unknown provider 'fifth'; "
        f"use one of {', '.join(first)} or {last}"
    )


# --- send-test, the receiver, reconciliation ---------------------------------------


@pytest.mark.anyio
async def test_fifth_provider_send_test_receive_and_reconcile(
    fifth: None, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    emulator = FifthEmulator(TOKEN, STREAM)
    async with serve_app(emulator.app) as provider_api:
        text = source_toml(
            f'api_url = "{provider_api}"\nallow_insecure = true\ntoken = "{TOKEN}"\n'
            f'stream = "{STREAM}"\n'
        )
        sources = parse_sources(text, P, {})
        source = sources.get("f5")
        assert source is not None
        async with running_app(sources, sqlite_url, reconcile_schedule=False) as (app, client):
            # `hookd send-test f5`: its sample events, signed by its signer, over HTTP.
            async with serve_app(app) as hookd_url:
                args = build_parser().parse_args(
                    ["send-test", "f5", "--count", "2", "--url", f"{hookd_url}/hooks/f5"]
                )
                settings = Settings(database_url=sqlite_url)
                assert await asyncio.to_thread(cmd_send_test, args, settings, sources) == 0
            sent = capsys.readouterr().out.splitlines()
            assert [line.split(" ", 1)[0] for line in sent] == ["202", "202"]

            # The receiver: accepted once, a duplicate after.
            headers, body = sample_event("fifth", SECRET, 3)
            first = await client.post("/hooks/f5", content=body, headers=headers)
            again = await client.post("/hooks/f5", content=body, headers=headers)
            assert first.status_code == 202, first.text
            assert again.status_code == 200
            assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
            forged = await client.post("/hooks/f5", content=body + b" ", headers=headers)
            assert forged.status_code == 401
            assert forged.json() == {"error": "bad_signature"}

            # Reconciliation: three events listed, one brought by its webhook.
            delivered = emulator.add("ev_delivered", now - 30)
            emulator.add("ev_missed_1", now - 20)
            emulator.add("ev_missed_2", now - 10)
            hooked = await emulator.send_webhook(client, "/hooks/f5", SECRET, delivered)
            assert hooked.status_code == 202, hooked.text

    # The list API served by a real loopback server again, now for the poller.
    async with serve_app(emulator.app) as provider_api:
        text = source_toml(
            f'api_url = "{provider_api}"\nallow_insecure = true\ntoken = "{TOKEN}"\n'
            f'stream = "{STREAM}"\n'
        )
        source = parse_sources(text, P, {}).get("f5")
        assert source is not None
        engine = db.create_engine(sqlite_url)
        try:
            async with httpx.AsyncClient() as http:
                reconciler = Reconciler(engine, http, BodyCipher(""))
                outcome = await reconciler.run(source)
                assert (outcome.status, outcome.checked, outcome.missing) == ("succeeded", 3, 2)
                assert outcome.repaired == 2
                assert emulator.calls == 2  # two pages of two
                rerun = await reconciler.run(source)
                assert (rerun.status, rerun.missing) == ("succeeded", 0)
            async with engine.connect() as conn:
                rows = {r.dedupe_key: r for r in await conn.execute(sa.select(EVENTS))}
                state = await rstate.get_state(conn, "f5")
        finally:
            await engine.dispose()
    listed = {"ev_delivered", "ev_missed_1", "ev_missed_2"}
    assert {k: r.origin for k, r in rows.items() if k in listed} == {
        "ev_delivered": "webhook",
        "ev_missed_1": "reconcile",
        "ev_missed_2": "reconcile",
    }
    # Besides: the two from send-test and the one sent twice, all by webhook.
    assert sorted(r.origin for k, r in rows.items() if k not in listed) == ["webhook"] * 3
    assert {r.provider for r in rows.values()} == {"fifth"}
    missed = rows["ev_missed_1"]
    assert (missed.provider, missed.type, missed.verified_with) == (
        "fifth",
        "thing.happened",
        "reconcile:fifth-api",
    )
    # What the adapter asked to keep reached its next run (and is kept again).
    assert state is not None
    assert state.meta == {"runs": "2"}
    assert FifthAdapter.request_interval_s(source) == fifth_provider.REQUEST_INTERVAL_S
