"""Item 10: the admin surface refuses everyone without the token, and what lands on disk
holds no secret. A real ``hookd serve`` on PostgreSQL with an admin token and an encryption
key; schemathesis generates requests for every operation of the served OpenAPI document and
sends them with no token, a wrong token and a malformed header; every admin page and action
and ``/metrics`` are tried the same way; then ``pg_dump`` is searched for every secret, and
``hookd keys rotate`` is run and the old key removed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import sqlalchemy as sa
from cryptography.fernet import Fernet

from chaos.harness import (
    SECRETS,
    Delivery,
    HookdServer,
    config,
    main,
    pg_database,
    send,
    workdir,
)
from hookd.providers.github import github_headers
from hookd.providers.signing import sample_event
from store import db
from store.crypto import BodyCipher
from store.models import EVENTS
from tests.support.server import ROOT
from tests.support.services import PG_DSN

TITLE = "Admin surface and data at rest"
QUICK: dict[str, Any] = {"events": 200, "examples": 4}
FULL: dict[str, Any] = {"events": 5000, "examples": 200}

TOKEN = "chaos-admin-token-" + "5c2e9a"
MARKER = "card-number-4242-4242-chaos"
ADMIN_GETS = [
    "/admin",
    "/admin/events",
    "/admin/dead",
    "/admin/runs",
    "/admin/events/x",
    "/admin/runs/x",
    "/metrics",
]
ADMIN_POSTS = [
    "/admin/logout",
    "/admin/events/x/replay",
    "/admin/sources/github/enable",
    "/admin/sources/github/reconcile",
    "/admin/sources/github/replay-dead",
]
BAD_AUTH: dict[str, dict[str, str]] = {
    "none": {},
    "wrong": {"Authorization": "Bearer wrong-token"},
    "prefix": {"Authorization": f"Bearer {TOKEN[:-1]}"},
    "longer": {"Authorization": f"Bearer {TOKEN}x"},
    "no-scheme": {"Authorization": TOKEN},
    "basic": {"Authorization": f"Basic {TOKEN}"},
    "cookie": {"Cookie": f"hookd_admin={TOKEN}"},
}


def _schemathesis_statuses(url: str, examples: int) -> dict[str, Counter[int]]:
    """Per bad-auth variant, the statuses of generated requests to every API operation."""
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    out: dict[str, Counter[int]] = {}
    with requests.Session() as session:
        document = session.get(
            f"{url}/api/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        document.raise_for_status()
        schema = schemathesis.openapi.from_dict(document.json())
        operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
        for variant, headers in BAD_AUTH.items():
            seen: Counter[int] = Counter()
            for operation in operations:
                strategies = [operation.as_strategy()]
                if operation.path_parameters or operation.query:
                    strategies.append(operation.as_strategy(schemathesis.GenerationMode.NEGATIVE))

                def send_one(
                    case: Any, headers: dict[str, str] = headers, seen: Counter[int] = seen
                ) -> None:
                    response = case.call(base_url=url, session=session, headers=headers, timeout=10)
                    seen[response.status_code] += 1

                settings(
                    max_examples=examples * len(strategies),
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )(given(case=st.one_of(strategies))(_positional(send_one)))()
            out[variant] = seen
    return out


def _positional(fn: Callable[..., None]) -> Callable[[Any], None]:
    """``@given`` refuses functions with defaults: wrap one that has them."""

    def call(case: Any) -> None:
        fn(case)

    return call


async def _admin_statuses(url: str) -> dict[str, Counter[int]]:
    out: dict[str, Counter[int]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=10, follow_redirects=False) as client:
        for variant, headers in BAD_AUTH.items():
            seen: Counter[int] = Counter()
            for path in ADMIN_GETS:
                seen[(await client.get(path, headers=headers)).status_code] += 1
            for path in ADMIN_POSTS:
                response = await client.post(path, headers=headers, data={"csrf": "x"})
                seen[response.status_code] += 1
            # A login with a wrong token must not hand out a session.
            login = await client.post("/admin/login", headers=headers, data={"token": "wrong"})
            seen[login.status_code] += 1
            out[variant] = seen
            if "set-cookie" in login.headers:
                seen[299] += 1  # counted as a 2xx: a session for a wrong token
    return out


def _dump(pg_dump: str, database: str) -> str:
    return subprocess.run(
        [pg_dump, "--data-only", PG_DSN.rsplit("/", 1)[0] + "/" + database],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout


def _hookd(url: str, keys: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOOKD_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    env["HOOKD_ENCRYPTION_KEYS"] = keys
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


async def _bodies(url: str) -> list[tuple[bytes, bool]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.select(EVENTS.c.body, EVENTS.c.body_encrypted))
            return [(r.body, r.body_encrypted) for r in rows]
    finally:
        await engine.dispose()


def _readable(cipher: BodyCipher, stored: list[tuple[bytes, bool]]) -> int:
    ok = 0
    for body, encrypted in stored:
        try:
            cipher.open(body, encrypted)
        except Exception:
            continue
        ok += 1
    return ok


async def run(events: int = 200, examples: int = 10) -> dict[str, Any]:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    figures: dict[str, Any] = {"events": events, "examples_per_operation": examples}
    async with workdir() as work:
        with pg_database() as url:
            env = {
                "HOOKD_CONFIG": str(config(work, handler=None)),
                "HOOKD_DATABASE_URL": url,
                "HOOKD_ADMIN_TOKEN": TOKEN,
                "HOOKD_ENCRYPTION_KEYS": old,
            }
            marked = json.dumps({"action": "opened", "note": MARKER}).encode()
            items = [
                Delivery(
                    "github",
                    github_headers(SECRETS["github"], marked, "issues", str(uuid.uuid4())),
                    marked,
                )
            ]
            providers = list(SECRETS)
            for i in range(events - 1):
                provider = providers[i % len(providers)]
                items.append(Delivery(provider, *sample_event(provider, SECRETS[provider], i)))
            with HookdServer(env, work) as server:
                results = await send(server.url, items, concurrency=16)
                figures["acked"] = sum(r.status in (200, 202) for r in results)
                api = await asyncio.to_thread(_schemathesis_statuses, server.url, examples)
                admin = await _admin_statuses(server.url)
            figures["api"] = {k: dict(sorted(v.items())) for k, v in api.items()}
            figures["admin"] = {k: dict(sorted(v.items())) for k, v in admin.items()}
            api_requests = sum(sum(v.values()) for v in api.values())
            admin_requests = sum(sum(v.values()) for v in admin.values())
            api_2xx = sum(n for v in api.values() for s, n in v.items() if 200 <= s < 300)
            admin_2xx = sum(n for v in admin.values() for s, n in v.items() if 200 <= s < 300)
            figures.update(
                api_requests=api_requests,
                api_2xx=api_2xx,
                admin_requests=admin_requests,
                admin_2xx=admin_2xx,
            )

            stored = await _bodies(url)
            figures["rows"] = len(stored)
            figures["encrypted_rows"] = sum(encrypted for _, encrypted in stored)
            pg_dump = shutil.which("pg_dump")
            if pg_dump is None:
                raise RuntimeError("pg_dump is not installed")
            database = url.rsplit("/", 1)[1]
            dump = await asyncio.to_thread(_dump, pg_dump, database)
            needles = {**{f"{p} secret": s for p, s in SECRETS.items()}}
            needles.update({"admin token": TOKEN, "encryption key": old, "payload": MARKER})
            figures["dump_bytes"] = len(dump)
            figures["dump_has_events"] = "COPY public.events" in dump
            figures["dump_hits"] = {name: dump.count(value) for name, value in needles.items()}

            rotated = await asyncio.to_thread(_hookd, url, f"{new},{old}", "keys", "rotate")
            figures["rotate_exit"] = rotated.returncode
            figures["rotate_output"] = rotated.stdout.strip()
            after = await _bodies(url)
            figures["readable_new_key_only"] = _readable(BodyCipher(new), after)
            figures["readable_old_key_only"] = _readable(BodyCipher(old), after)

    figures["checks"] = {
        "every delivery acknowledged": figures["acked"] == events,
        "no 2xx without the token (API)": api_2xx == 0 and api_requests > 0,
        "no 2xx without the token (admin, /metrics)": admin_2xx == 0 and admin_requests > 0,
        "bodies encrypted at rest": figures["encrypted_rows"] == figures["rows"] > 0,
        "no secret, token, key or payload in pg_dump": figures["dump_has_events"]
        and not any(figures["dump_hits"].values()),
        "rotation succeeded": figures["rotate_exit"] == 0,
        "every row readable with only the new key": figures["readable_new_key_only"]
        == figures["rows"],
        "no row readable with only the old key": figures["readable_old_key_only"] == 0,
    }
    return figures


def report(figures: dict[str, Any]) -> str:
    variants = ", ".join(f"`{v}`" for v in BAD_AUTH)
    api_statuses: Counter[int] = Counter()
    for seen in figures["api"].values():
        api_statuses.update({int(k): v for k, v in seen.items()})
    admin_statuses: Counter[int] = Counter()
    for seen in figures["admin"].values():
        admin_statuses.update({int(k): v for k, v in seen.items()})
    hits = sum(figures["dump_hits"].values())
    return "\n".join(
        [
            f"A real `hookd serve` on PostgreSQL took {figures['events']:,} events (one carrying "
            "a marker string in its payload) with an admin token and an encryption key set. "
            f"Requests were sent with each of these credentials: {variants}.",
            "",
            "| what | figure |",
            "|---|---|",
            f"| API requests generated by schemathesis (positive and negative, "
            f"{figures['examples_per_operation']} per operation and mode) | "
            f"{figures['api_requests']:,} |",
            f"| their statuses | {_statuses(api_statuses)} |",
            f"| of them 2xx | **{figures['api_2xx']}** |",
            f"| admin pages, admin actions, wrong-token logins and `/metrics` | "
            f"{figures['admin_requests']:,} ({_statuses(admin_statuses)}) |",
            f"| of them 2xx or a session cookie | **{figures['admin_2xx']}** |",
            f"| rows stored / encrypted at rest | {figures['rows']:,} / "
            f"{figures['encrypted_rows']:,} |",
            f"| `pg_dump --data-only` size | {figures['dump_bytes']:,} bytes |",
            f"| occurrences of the 4 signing secrets, the admin token, the key or the "
            f"payload marker in the dump | **{hits}** |",
            f"| `hookd keys rotate` | exit {figures['rotate_exit']}: {figures['rotate_output']} |",
            f"| rows readable with only the new key / only the old key | "
            f"{figures['readable_new_key_only']:,} / {figures['readable_old_key_only']} |",
        ]
    )


def _statuses(counter: Counter[int]) -> str:
    return ", ".join(f"{status}: {n:,}" for status, n in sorted(counter.items()))


if __name__ == "__main__":
    main(__name__)
