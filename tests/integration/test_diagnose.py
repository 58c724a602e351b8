"""``hookd diagnose SOURCE`` naming the cause of each usual misconfiguration, each
produced by a real misconfigured sender against a real ``hookd serve``: a wrong
secret, a secret rotated at the provider, a sender's clock 412 s behind, Stripe's
headers at a GitHub source, a proxy that gzips the body, a form content type chosen at
the provider, bodies over the limit; and a
source that nobody sends wrong, which exits 0."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hookd.providers.github import github_headers
from hookd.providers.stripe import stripe_headers
from tests.support.data import scalar
from tests.support.server import ROOT, HookdServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

STRIPE_SECRET = "whsec_diagnose"
SOURCES = """
[[sources]]
name = "wrong-secret"
provider = "github"
secrets = ["the-right-one"]

[[sources]]
name = "rotated"
provider = "github"
secrets = ["new-secret", "old-secret"]

[[sources]]
name = "skewed"
provider = "stripe"
secrets = ["whsec_diagnose"]

[[sources]]
name = "misrouted"
provider = "github"
secrets = ["gh"]

[[sources]]
name = "gzipped"
provider = "github"
secrets = ["gz"]

[[sources]]
name = "small"
provider = "github"
secrets = ["sm"]
max_body_bytes = 1024

[[sources]]
name = "form"
provider = "stripe"
secrets = ["whsec_diagnose"]

[[sources]]
name = "quiet"
provider = "github"
secrets = ["q"]
"""


def body(n: int, size: int = 0) -> bytes:
    return json.dumps({"action": "opened", "n": n, "pad": "x" * size}).encode()


def diagnose(env: dict[str, str], source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", "diagnose", source],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_diagnose_names_each_misconfiguration_a_real_sender_makes(
    sqlite_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "hookd.toml"
    config.write_text(SOURCES)
    env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": sqlite_url}
    with HookdServer(env, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:

            async def post(source: str, payload: bytes, headers: dict[str, str]) -> int:
                answer = await client.post(f"/hooks/{source}", content=payload, headers=headers)
                return answer.status_code

            for n in range(3):  # a secret that is not the provider's
                assert (
                    await post(
                        "wrong-secret", body(n), github_headers("typo", body(n), "issues", f"w{n}")
                    )
                    == 401
                )
            # Rotated at the provider: what verified with the old secret comes again,
            # signed with a secret hookd does not have.
            for n in range(2):
                assert (
                    await post(
                        "rotated", body(n), github_headers("old-secret", body(n), "issues", f"r{n}")
                    )
                    == 202
                )
                assert (
                    await post(
                        "rotated",
                        body(n),
                        github_headers("newest", body(n), "issues", f"r{n}-again"),
                    )
                    == 401
                )
            for n in range(3):  # a sender whose clock is 412 s behind
                headers = stripe_headers(STRIPE_SECRET, body(n), int(time.time()) - 412)
                assert await post("skewed", body(n), headers) == 401
            for n in range(2):  # Stripe's deliveries sent to the GitHub source's URL
                headers = stripe_headers(STRIPE_SECRET, body(n), int(time.time()))
                assert await post("misrouted", body(n), headers) == 401
            for n in range(2):  # a proxy that compresses what GitHub signed
                headers = github_headers("gz", body(n), "issues", f"g{n}")
                headers["Content-Encoding"] = "gzip"
                status = await post("gzipped", gzip.compress(body(n)), headers)
                assert status >= 400
            for n in range(2):  # a sender set to post a form where JSON is expected
                form = f"type=invoice.paid&n={n}".encode()
                headers = stripe_headers(STRIPE_SECRET, form, int(time.time()))
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                assert await post("form", form, headers) >= 400
            big = body(0, size=4096)
            assert await post("small", big, github_headers("sm", big, "issues", "big")) == 413

        async def recorded() -> bool:
            return await scalar(sqlite_url, "SELECT count(*) FROM rejected_requests") >= 15

        await wait_for(recorded, timeout_s=30, interval_s=0.2)
        expected: dict[str, str | re.Pattern[str]] = {
            "wrong-secret": "matches none of 1 secret",
            "rotated": "verified earlier with secret #2",
            # 412 s as signed, a second or two more by the time it arrives on a busy box.
            "skewed": re.compile(r"41[2-6] s behind this server's clock"),
            "misrouted": "stripe's signature headers but the source misrouted is provider 'github'",
            "gzipped": "Content-Encoding: gzip",
            "small": "max_body_bytes = 1,024",
            "form": "not what stripe sends (Content-Type: application/x-www-form-urlencoded)",
        }
        results = await asyncio.gather(
            *(asyncio.to_thread(diagnose, env, source) for source in [*expected, "quiet"])
        )
    for (source, said), result in zip(expected.items(), results, strict=False):
        assert result.returncode == 1, (source, result.stdout, result.stderr)
        found = (
            said.search(result.stdout) if isinstance(said, re.Pattern) else said in result.stdout
        )
        assert found, (source, result.stdout)
    quiet = results[-1]
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "nothing looks wrong" in quiet.stdout
