"""Effects repeated by a ``kill -9`` of a worker mid-wave.

    .venv/bin/python bench/kill_wave.py                 # both waves, 3 runs each
    .venv/bin/python bench/kill_wave.py --runs 5 --wave steady

Real ``hookd serve`` and ``hookd worker`` on PostgreSQL with a private Redis. The
handler (``tests.support.handlers:effect_at_end``) works, then records its effect as
its last act, so an effect counted twice is a handler that had finished when its
worker was killed and ran again after the takeover: exactly the repeated work.

- ``steady``: 200 handlers of 0.3 s; two kills, each 0.8 s after the (new) worker's
  first effect.
- ``mixed``: 300 handlers, every 15th working 5 s and the others 0.05 s; one kill
  2.5 s after the first effect (the wave in which a batch waited for its slowest).

Prints one JSON line per run: the wave, doubled effects, events, seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from hookd.providers.signing import sample_event
from store import migrate
from tests.support import services
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.handlers import config, prepare
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

WAVES = {
    # events, every Nth slow (0: none), slow s, quick s, kills, seconds after a first effect
    "steady": (200, 0, 0.0, 0.3, 2, 0.8),
    "mixed": (300, 15, 5.0, 0.05, 1, 2.5),
}


async def post_batch(url: str, count: int) -> None:
    """``count`` signed GitHub deliveries, each acknowledged."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for seq in range(count):
            headers, body = sample_event("github", SECRETS["github"], seq)
            response = await client.post("/hooks/github", content=body, headers=headers)
            if response.status_code != 202:
                raise SystemExit(f"delivery {seq}: {response.status_code} {response.text}")


async def one_run(wave: str, tmp: Path, url: str) -> dict[str, object]:
    count, every, slow_s, quick_s, kills, after_s = WAVES[wave]
    await prepare(url)
    env = {
        "HOOKD_CONFIG": str(config(tmp, "effect_at_end")),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_LEASE_S": "8",
        "HOOKD_HANDLER_TIMEOUT_S": "7",
        "HOOKD_PRUNE_EVERY_S": "0",
        "TEST_SLOW_EVERY": str(every),
        "TEST_SLOW_S": str(slow_s),
        "TEST_HANDLER_SLEEP_S": str(quick_s),
    }
    started = time.monotonic()
    with RedisServer(tmp) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp) as server:
            await post_batch(server.url, count)
            worker = HookdWorker(env, tmp).start()
            try:
                for _ in range(kills):
                    before = await scalar(url, "SELECT count(*) FROM calls")

                    async def effect(before: int = before) -> bool:
                        return await scalar(url, "SELECT count(*) FROM calls") > before

                    await wait_for(effect, timeout_s=60, interval_s=0.01)
                    await asyncio.sleep(after_s)
                    worker.kill9()
                    worker = HookdWorker(env, tmp).start()

                async def done() -> bool:
                    sql = "SELECT count(*) FROM events WHERE status = 'processed'"
                    return await scalar(url, sql) == count

                await wait_for(done, timeout_s=180, interval_s=0.1)
            finally:
                worker.stop()
    doubled = await scalar(
        url,
        "SELECT count(*) FROM (SELECT event_id FROM calls GROUP BY event_id "
        "HAVING count(*) > 1) AS twice",
    )
    return {
        "wave": wave,
        "kills": kills,
        "events": count,
        "doubled": doubled,
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wave", choices=[*WAVES, "both"], default="both")
    args = parser.parse_args()
    waves = list(WAVES) if args.wave == "both" else [args.wave]
    for wave in waves:
        for _ in range(args.runs):
            name = services.create_database()
            try:
                url = services.sqlalchemy_url(name)
                migrate.upgrade(url)
                with tempfile.TemporaryDirectory() as tmp:
                    result = asyncio.run(one_run(wave, Path(tmp), url))
                print(json.dumps(result), flush=True)
            finally:
                services.drop_database(name)


if __name__ == "__main__":
    main()
