"""Tampered requests against a real ``hookd serve``: none accepted, none a 5xx, nothing stored.

Every request starts as a genuine one (signed by ``tests.support.signing``, by hand from
the provider's documented scheme, at the current time) and is then tampered with in one
way, chosen round-robin over the categories below so that each gets the same share; a
seeded random generator picks the details (which bit, which header, how far off the
clock). The receiver runs on a fresh PostgreSQL database with a private Redis, so that both
what was stored (rows in ``events``) and what was enqueued (arq wake-up jobs) can be
counted. Afterwards one untampered request per provider, built the same way, must be
accepted: the tampering, not the builder, is what the server refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from chaos import harness
from chaos.harness import HookdServer, RedisServer
from chaos.tamper_requests import APPLIES, CATEGORIES, PROVIDERS, Request, genuine, requests

TITLE = "Tampered requests are refused"
QUICK: dict[str, Any] = {"per_provider": 400}
FULL: dict[str, Any] = {"per_provider": 10_000}


@dataclass
class Outcome:
    provider: str
    category: str
    status: int  # 0: no answer
    reason: str


async def send_all(
    base_url: str, items: Iterator[Request], concurrency: int, timeout_s: float = 30.0
) -> list[Outcome]:
    outcomes: list[Outcome] = []

    async def worker(client: httpx.AsyncClient) -> None:
        for item in items:  # one shared generator: each request is built just before it goes
            try:
                headers = [(name.encode(), value) for name, value in item.headers]
                response = await client.post(
                    f"/hooks/{item.provider}", content=item.body, headers=headers
                )
            except httpx.HTTPError as exc:
                outcomes.append(Outcome(item.provider, item.category, 0, type(exc).__name__))
                continue
            reason = ""
            with contextlib.suppress(ValueError, AttributeError):
                reason = str(json.loads(response.content).get("error", ""))
            outcomes.append(Outcome(item.provider, item.category, response.status_code, reason))

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return outcomes


def redis_int(redis: RedisServer, *words: str) -> int:
    answer = redis.command(*words)
    assert answer.startswith(b":"), answer
    return int(answer[1:].split(b"\r\n", 1)[0])


async def run(per_provider: int = 400, concurrency: int = 16, seed: int = 7) -> dict[str, Any]:
    async with harness.workdir() as work:
        database = harness.pg_database()
        url = await asyncio.to_thread(database.__enter__)
        try:
            return await _run(work, url, per_provider, concurrency, seed)
        finally:
            await asyncio.to_thread(database.__exit__, None, None, None)


async def _run(
    work: Path, url: str, per_provider: int, concurrency: int, seed: int
) -> dict[str, Any]:
    config = harness.config(work, handler=None)
    redis = RedisServer(work).start()
    try:
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": url, "HOOKD_REDIS_URL": redis.url}
        server = HookdServer(env, work)
        await asyncio.to_thread(server.start)
        try:
            started = time.monotonic()
            outcomes = await send_all(server.url, requests(per_provider, seed), concurrency)
            send_s = time.monotonic() - started
            await asyncio.sleep(0.5)  # a wake-up job would be enqueued right after a commit
            rows_before = await harness.count(url, "SELECT count(*) FROM events")
            keys_before = redis_int(redis, "DBSIZE")
            jobs_before = redis_int(redis, "ZCARD", "arq:queue")
            controls = [genuine(p, 10**9 + i) for i, p in enumerate(PROVIDERS)]
            control_items = iter(
                [Request(g.provider, "control", g.copy(), g.body) for g in controls]
            )
            control_outcomes = await send_all(server.url, control_items, 4)
            for _ in range(100):  # the wake-up job follows the commit
                if redis_int(redis, "ZCARD", "arq:queue") >= 1:
                    break
                await asyncio.sleep(0.1)
            rows_after = await harness.count(url, "SELECT count(*) FROM events")
            jobs_after = redis_int(redis, "ZCARD", "arq:queue")
            log = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
        finally:
            await asyncio.to_thread(server.stop)
    finally:
        redis.stop()
    return figures(
        per_provider,
        outcomes,
        control_outcomes,
        send_s=send_s,
        rows_before=rows_before,
        rows_after=rows_after,
        keys_before=keys_before,
        jobs_before=jobs_before,
        jobs_after=jobs_after,
        tracebacks=log.count("Traceback"),
        concurrency=concurrency,
        seed=seed,
    )


def per_provider_figures(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Each provider's requests: answered how, per kind of tampering."""
    by_provider: dict[str, dict[str, Any]] = {}
    for provider in PROVIDERS:
        mine = [o for o in outcomes if o.provider == provider]
        categories: dict[str, dict[str, Any]] = {}
        for name in APPLIES[provider]:
            these = [o for o in mine if o.category == name]
            categories[name] = {
                "sent": len(these),
                "statuses": dict(sorted(Counter(str(o.status) for o in these).items())),
                "reasons": dict(Counter(o.reason for o in these).most_common()),
            }
        by_provider[provider] = {
            "sent": len(mine),
            "accepted": sum(200 <= o.status < 300 for o in mine),
            "server_errors": sum(o.status >= 500 for o in mine),
            "no_answer": sum(o.status == 0 for o in mine),
            "statuses": dict(sorted(Counter(str(o.status) for o in mine).items())),
            "categories": categories,
        }
    return by_provider


def checks_of(
    per_provider: int,
    outcomes: list[Outcome],
    by_provider: dict[str, dict[str, Any]],
    controls: dict[str, int],
    counts: dict[str, Any],
) -> dict[str, bool]:
    """Every property the run must show."""
    providers = by_provider.values()
    return {
        "every_request_sent": all(p["sent"] == per_provider for p in providers),
        "every_category_used": all(
            c["sent"] > 0 for p in providers for c in p["categories"].values()
        ),
        "none_accepted": sum(p["accepted"] for p in providers) == 0,
        "no_5xx": sum(p["server_errors"] for p in providers) == 0,
        "every_request_answered": sum(p["no_answer"] for p in providers) == 0,
        "only_400_or_401": all(o.status in (400, 401) for o in outcomes),
        "no_rows_stored": counts["rows_before"] == 0,
        "no_jobs_enqueued": counts["keys_before"] == 0 and counts["jobs_before"] == 0,
        "controls_accepted": controls == dict.fromkeys(PROVIDERS, 202),
        "controls_stored_4_rows": counts["rows_after"] == len(PROVIDERS),
        "controls_enqueued_a_job": counts["jobs_after"] >= 1,
        "no_traceback_in_server_log": counts["tracebacks"] == 0,
    }


def figures(
    per_provider: int,
    outcomes: list[Outcome],
    control_outcomes: list[Outcome],
    **counts: Any,
) -> dict[str, Any]:
    by_provider = per_provider_figures(outcomes)
    sent = len(outcomes)
    controls = {o.provider: o.status for o in control_outcomes}
    send_s = counts["send_s"]
    return {
        "per_provider": per_provider,
        "sent": sent,
        "accepted": sum(p["accepted"] for p in by_provider.values()),
        "server_errors": sum(p["server_errors"] for p in by_provider.values()),
        "no_answer": sum(p["no_answer"] for p in by_provider.values()),
        "requests_per_s": round(sent / send_s, 1) if send_s else 0.0,
        "send_s": round(send_s, 2),
        "rows_before_controls": counts["rows_before"],
        "redis_keys_before_controls": counts["keys_before"],
        "jobs_before_controls": counts["jobs_before"],
        "controls": controls,
        "rows_after_controls": counts["rows_after"],
        "jobs_after_controls": counts["jobs_after"],
        "server_log_tracebacks": counts["tracebacks"],
        "concurrency": counts["concurrency"],
        "seed": counts["seed"],
        "providers": by_provider,
        "checks": checks_of(per_provider, outcomes, by_provider, controls, counts),
    }


def report(figures: dict[str, Any]) -> str:
    names = list(CATEGORIES)
    controls = ", ".join(f"{p} {s}" for p, s in figures["controls"].items())
    lines = [
        f"{figures['sent']:,} tampered requests ({figures['per_provider']:,} per provider, "
        f"{len(names)} kinds of tampering, seed {figures['seed']}) sent to a real `hookd serve` "
        f"on PostgreSQL with Redis, {figures['concurrency']} at a time, "
        f"{figures['requests_per_s']:,} requests/s: **{figures['accepted']} accepted, "
        f"{figures['server_errors']} 5xx, {figures['rows_before_controls']} rows stored, "
        f"{figures['jobs_before_controls']} jobs enqueued**. Then one untampered request per "
        f"provider: {controls}; {figures['rows_after_controls']} rows, "
        f"{figures['jobs_after_controls']} wake-up job(s).",
        "",
        "`wrong_scheme` is a genuine signature in a scheme the source does not take: for "
        "Standard Webhooks a `v1a` (ed25519) signature alone where only a `whsec_` (v1) "
        "secret is configured; GitHub's legacy SHA-1; Stripe's `v0`; Slack under `v1=`. "
        "`signed_bad_payload` is not tampered with: authentic signatures over bodies that "
        "cannot be used.",
        "",
        "Requests and HTTP statuses per provider and kind (401: refused as not authentic, "
        "400: authentic but unusable payload):",
        "",
        "| kind | " + " | ".join(PROVIDERS) + " | reasons given |",
        "| --- | " + " | ".join("---" for _ in PROVIDERS) + " | --- |",
    ]
    for name in names:
        cells = []
        reasons: Counter[str] = Counter()
        for provider in PROVIDERS:
            category = figures["providers"][provider]["categories"].get(name)
            if category is None:
                cells.append("n/a")
                continue
            reasons.update(category["reasons"])
            statuses = ", ".join(f"{n:,} x {s}" for s, n in category["statuses"].items())
            cells.append(statuses or "0")
        given = ", ".join(f"`{r}`" for r, _ in reasons.most_common())
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {given} |")
    totals = []
    for provider in PROVIDERS:
        p = figures["providers"][provider]
        totals.append(f"{p['sent']:,} sent, {p['accepted']} 2xx, {p['server_errors']} 5xx")
    lines.append("| **total** | " + " | ".join(totals) + " | |")
    lines.append("")
    lines.append(
        "Checks: " + ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in figures["checks"].items())
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    harness.main(__name__)
