"""Bodies at rest: ``hookd keys rotate`` and what a database dump shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from hookd.providers.github import github_headers
from hookd.providers.signing import sample_event
from hookd.sources import Sources
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of, new_event
from tests.support.server import ROOT
from tests.support.services import PG_DSN, in_ci

pytestmark = pytest.mark.anyio
TOKEN = "admin-token-never-in-the-dump-5c2e"


def hookd(url: str, keys: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOOKD_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    env.pop("HOOKD_ENCRYPTION_KEYS", None)
    if keys is not None:
        env["HOOKD_ENCRYPTION_KEYS"] = keys
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def dump_data(pg_dump: str, dsn: str) -> str:
    return subprocess.run(
        [pg_dump, "--data-only", dsn], capture_output=True, text=True, timeout=60, check=True
    ).stdout


async def bodies(url: str) -> list[tuple[str, bytes, bool]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.id, EVENTS.c.body, EVENTS.c.body_encrypted).order_by(EVENTS.c.id)
        )
        return [(r.id, r.body, r.body_encrypted) for r in rows]


async def test_rotation_leaves_every_body_readable_with_only_the_new_key(
    sources: Sources, db_url: str
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    sent: list[bytes] = []
    # Some bodies stored before encryption was turned on, the rest under the old key.
    async with running_app(sources, db_url) as (_, client):
        for i in range(3):
            headers, body = sample_event("stripe", SECRETS["stripe"], i)
            assert (
                await client.post("/hooks/stripe", content=body, headers=headers)
            ).status_code == 202
            sent.append(body)
    async with running_app(sources, db_url, encryption_keys=old) as (_, client):
        for i in range(3, 620):
            headers, body = sample_event("stripe", SECRETS["stripe"], i)
            assert (
                await client.post("/hooks/stripe", content=body, headers=headers)
            ).status_code == 202
            sent.append(body)

    assert hookd(db_url, None, "keys", "rotate").returncode == 2
    wrong = hookd(db_url, Fernet.generate_key().decode(), "keys", "rotate")
    assert wrong.returncode == 2 and "opens" in wrong.stderr
    rotated = hookd(db_url, f"{new},{old}", "keys", "rotate")
    assert rotated.returncode == 0, rotated.stderr
    assert "617 bodies re-encrypted, 3 plain bodies encrypted" in rotated.stdout

    stored = await bodies(db_url)
    assert len(stored) == 620 and all(encrypted for _, _, encrypted in stored)
    only_new, only_old = BodyCipher(new), BodyCipher(old)
    assert sorted(only_new.open(body, True) for _, body, _ in stored) == sorted(sent)
    with pytest.raises(Exception):  # noqa: B017 - ConfigError: the old key opens none
        only_old.open(stored[0][1], True)
    # Running it again is harmless.
    assert hookd(db_url, new, "keys", "rotate").returncode == 0
    assert sorted(BodyCipher(new).open(b, True) for _, b, _ in await bodies(db_url)) == sorted(sent)


async def test_a_database_dump_holds_no_secret_token_or_encrypted_body(
    sources: Sources, pg_url: str
) -> None:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        if in_ci():
            pytest.fail("pg_dump not installed (CI=true)")
        pytest.skip("pg_dump not installed")
    key = Fernet.generate_key().decode()
    marker = "card-number-4242-4242"
    async with running_app(sources, pg_url, encryption_keys=key, admin_token=TOKEN) as (_, client):
        marked = json.dumps({"action": "opened", "note": marker}).encode()
        github = github_headers(SECRETS["github"], marked, "issues", str(uuid.uuid4()))
        response = await client.post("/hooks/github", content=marked, headers=github)
        assert response.status_code == 202, response.text
        for provider in ("stripe", "slack", "standard"):
            headers, body = sample_event(provider, SECRETS[provider], 7)
            response = await client.post(f"/hooks/{provider}", content=body, headers=headers)
            assert response.status_code in (200, 202), (provider, response.text)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/api/events", headers=auth)).status_code == 200
        for attempt in ("wrong-token", TOKEN + "x"):
            await client.get("/api/events", headers={"Authorization": f"Bearer {attempt}"})
    database = pg_url.rsplit("/", 1)[1]
    dump = dump_data(pg_dump, PG_DSN.rsplit("/", 1)[0] + "/" + database)
    assert "COPY public.events" in dump, "the dump must contain the events"
    for secret in [*SECRETS.values(), TOKEN, key, marker]:
        assert secret not in dump, f"{secret[:6]}… is in the dump"


async def store_bodies(url: str, cipher: BodyCipher, count: int, tag: str) -> list[str]:
    """``count`` events whose bodies are sealed with ``cipher``; their ids."""
    async with engine_of(url) as engine:
        async with engine.begin() as conn:
            stored = await insert_events(
                conn,
                [new_event(f"{tag}-{i}", body=f"{tag} body {i}".encode()) for i in range(count)],
                cipher,
            )
        return [s.event_id for s in stored]


async def test_rotation_skips_and_names_the_bodies_no_key_opens(sqlite_url: str) -> None:
    """A key lost: its bodies are named and left as they were, the rest rotated, and
    the exit status says something was skipped; --stop-on-error stops at the first."""
    old, new, lost = (Fernet.generate_key().decode() for _ in range(3))
    kept = await store_bodies(sqlite_url, BodyCipher(old), 3, "kept")
    orphans = await store_bodies(sqlite_url, BodyCipher(lost), 12, "lost")
    kept += await store_bodies(sqlite_url, BodyCipher(old), 2, "later")
    orphans.sort()  # in id order, as the rotation meets them
    before = sum(1 for i in kept if i < orphans[0])

    stopped = hookd(sqlite_url, f"{new},{old}", "keys", "rotate", "--stop-on-error")
    assert stopped.returncode == 1, stopped.stderr
    assert stopped.stderr == (
        f"hookd: keys rotate: event {orphans[0]}: no key in HOOKD_ENCRYPTION_KEYS opens its "
        f"body; stopped there ({before} bodies re-encrypted, 0 plain bodies encrypted with "
        "the first key before it); add the key it was stored with and run again, or run without "
        '--stop-on-error to skip such bodies (docs/operations.md, "Encryption keys")\n'
    )
    assert stopped.stdout == ""

    rotated = hookd(sqlite_url, f"{new},{old}", "keys", "rotate")
    assert rotated.returncode == 1, rotated.stderr
    assert rotated.stdout == (
        "hookd: 5 bodies re-encrypted, 0 plain bodies encrypted with the first key\n"
    )
    assert rotated.stderr == (
        "hookd: keys rotate: 12 bodies no key opens, left as they were: ids "
        f"{', '.join(orphans[:10])} and 2 more; their events cannot be processed or "
        "replayed until the key they were stored with is back in HOOKD_ENCRYPTION_KEYS "
        '(docs/operations.md, "Encryption keys")\n'
    )
    stored = {event_id: body for event_id, body, _ in await bodies(sqlite_url)}
    assert all(BodyCipher(new).open(stored[i], True).startswith(b"kept") for i in kept[:3])
    assert all(BodyCipher(lost).open(stored[i], True).startswith(b"lost") for i in orphans)


async def test_rotation_with_keys_that_open_nothing_changes_nothing(sqlite_url: str) -> None:
    """No key opens any body: the keys are wrong, not one lost. Plain bodies are not
    encrypted with a key nobody keeps; exit 2."""
    old = Fernet.generate_key().decode()
    await store_bodies(sqlite_url, BodyCipher(""), 2, "plain")
    await store_bodies(sqlite_url, BodyCipher(old), 2, "sealed")
    before = await bodies(sqlite_url)
    wrong = hookd(sqlite_url, Fernet.generate_key().decode(), "keys", "rotate")
    assert wrong.returncode == 2, wrong.stderr
    [line] = wrong.stderr.splitlines()
    assert line.startswith("hookd: environment: HOOKD_ENCRYPTION_KEYS: no key opens any")
    assert "nothing changed" in line
    assert await bodies(sqlite_url) == before
