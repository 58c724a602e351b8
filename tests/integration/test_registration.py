"""The registration check against the emulated GitHub hook and Stripe webhook endpoint:
each reconcile run and ``hookd sources check`` read the provider's registration and
compare it with the source's expectations (``public_url``, ``expect_events`` or else the
types its handlers and destinations take); drift is reported with its reason on the run,
in ``GET /api/sources``, on the admin sources page, and as
``hookd_source_registration_ok``."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hookd.cli.parser import build_parser
from hookd.cli.reconcile import cmd_sources
from hookd.settings import Settings
from hookd.sources import parse_sources
from tests.support.asgi import running_app
from tests.support.cli import hookd_async
from tests.support.constants import SECRETS, STANDARD_SECRET
from tests.support.emulators import GitHubEmulator, StripeEmulator
from tests.support.http import serve_app
from tests.support.reconcile_world import run_to_end
from tests.support.server import free_port

pytestmark = pytest.mark.anyio
TOKEN = "registration-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_TOKEN = "provider-api-token"
STRIPE_KEY = "sk_test_registration"
HOOK = "repos/octo/hello/hooks/42"
PUBLIC = {
    "github": "https://hookd.example/hooks/github",
    "stripe": "https://hookd.example/hooks/stripe",
}
ELSEWHERE = "https://old-host.example/hooks/{provider}?token=abc"

Emulator = GitHubEmulator | StripeEmulator
# A run's registration check as its resource shows it.
AS_EXPECTED = {"ok": True, "state": "ok", "reason": None, "problems": []}


def drift(*problems: str) -> dict[str, Any]:
    return {"ok": False, "state": "drift", "reason": None, "problems": list(problems)}


def sources_toml(
    provider: str,
    api_url: str,
    *,
    public_url: bool = True,
    extra: str = "",
    routing: tuple[str, str] = ("", ""),
) -> str:
    """``routing``: the source's keys before ``[sources.reconcile]`` (``handlers``) and
    the tables after it (``[[sources.destinations]]``)."""
    if provider == "github":
        secret, token, specific = SECRETS["github"], API_TOKEN, f'hook = "{HOOK}"'
    else:
        secret, token, specific = SECRETS["stripe"], STRIPE_KEY, ""
    public = f'public_url = "{PUBLIC[provider]}"' if public_url else ""
    return f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{secret}"]
{public}
{routing[0]}

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token}"
{specific}
{extra}
{routing[1]}
"""


def registered_emulator(provider: str) -> Emulator:
    """The provider's registration as the source expects it: active, posting to its
    public_url, sending every event."""
    if provider == "github":
        github = GitHubEmulator(API_TOKEN, hook=HOOK)
        github.hook_url = PUBLIC["github"]
        github.add_events(3, start=time.time() - 600, step_s=1.0)
        return github
    stripe = StripeEmulator(STRIPE_KEY)
    stripe.add_webhook_endpoint("https://someone-else.example/stripe", ["charge.refunded"])
    stripe.add_webhook_endpoint(PUBLIC["stripe"], ["*"], api_version="2024-06-20")
    stripe.add_events(3, start=time.time() - 600, step_s=1.0)
    return stripe


@dataclass
class World:
    provider: str
    emulator: Emulator
    api_url: str
    client: httpx.AsyncClient

    async def reconcile(self) -> dict[str, Any]:
        run = await run_to_end(self.client, self.provider, AUTH)
        assert run["status"] == "succeeded", run
        return run

    async def source(self) -> dict[str, Any]:
        listed = (await self.client.get("/api/sources", headers=AUTH)).json()["sources"]
        [found] = [s for s in listed if s["name"] == self.provider]
        reconcile: dict[str, Any] = found["reconcile"]
        return reconcile

    async def metric(self, name: str) -> float:
        text = (await self.client.get("/metrics", headers=AUTH)).text
        found = re.search(rf'^{name}\{{source="{self.provider}"\}} (\S+)$', text, re.M)
        assert found, f"{name} missing"
        return float(found.group(1))


@pytest.fixture
async def world(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[World]:
    """``request.param``: the provider, or (provider, emulator, extra config[, routing])."""
    param = request.param if isinstance(request.param, tuple) else (request.param,)
    provider = param[0]
    emulator = param[1] if len(param) > 1 else registered_emulator(provider)
    extra = param[2] if len(param) > 2 else ""
    routing = param[3] if len(param) > 3 else ("", "")
    async with serve_app(emulator.app) as api_url:
        text = sources_toml(provider, api_url, extra=extra, routing=routing)
        sources = parse_sources(text, Path("registration.toml"), env={})
        async with running_app(
            sources, pg_url, admin_token=TOKEN, sweep_s=0.1, reconcile_schedule=False
        ) as (_, client):
            yield World(provider, emulator, api_url, client)


async def hookd_cli(tmp_path: Path, db_url: str, config: str, *args: str) -> tuple[int, str, str]:
    """``hookd ARGS`` in a process of its own, while this loop serves the emulator:
    its exit status, its output and its last line on stderr."""
    path = tmp_path / "hookd.toml"
    path.write_text(config)
    env = {"HOOKD_DATABASE_URL": db_url, "HOOKD_CONFIG": str(path)}
    code, out, err = await hookd_async(env, *args)
    said = err.strip().splitlines()
    assert "Traceback" not in err, err
    return code, out, said[-1] if said else ""


@pytest.mark.parametrize("world", ["github", "stripe"], indirect=True)
async def test_a_correct_registration_reports_ok_on_the_run_the_source_and_the_metric(
    world: World,
) -> None:
    run = await world.reconcile()
    assert run["registration"] == AS_EXPECTED
    reconcile = await world.source()
    assert reconcile["registration"]["ok"] is True
    assert reconcile["registration"]["registered"]["url"] == PUBLIC[world.provider]
    assert await world.metric("hookd_source_registration_ok") == 1
    checked = await world.metric("hookd_source_registration_checked_timestamp_seconds")
    assert abs(checked - time.time()) < 60


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_an_inactive_github_hook_is_reported_with_the_reason(world: World) -> None:
    assert isinstance(world.emulator, GitHubEmulator)
    world.emulator.hook_active = False
    run = await world.reconcile()
    assert run["registration"] == drift("the hook is inactive: GitHub sends it nothing")
    reconcile = await world.source()
    assert reconcile["registration"]["ok"] is False
    assert reconcile["registration"]["registered"]["active"] is False
    assert await world.metric("hookd_source_registration_ok") == 0
    assert await world.metric("hookd_source_registration_checked_timestamp_seconds") > 0


async def test_a_disabled_stripe_endpoint_is_reported_by_sources_check_with_the_reason(
    tmp_path: Path, pg_url: str
) -> None:
    stripe = registered_emulator("stripe")
    assert isinstance(stripe, StripeEmulator)
    stripe.webhook_endpoints[-1]["status"] = "disabled"
    async with serve_app(stripe.app) as api_url:
        code, out, _ = await hookd_cli(
            tmp_path, pg_url, sources_toml("stripe", api_url), "sources", "check"
        )
        assert (code, out.strip()) == (
            1,
            "stripe: registration differs: the webhook endpoint is disabled: Stripe sends "
            "it nothing",
        ), out
        stripe.webhook_endpoints[-1]["status"] = "enabled"
        code, out, _ = await hookd_cli(
            tmp_path, pg_url, sources_toml("stripe", api_url), "sources", "check", "--json"
        )
    assert code == 0, out
    checked = json.loads(out)
    assert (checked["name"], checked["ok"], checked["problems"]) == ("stripe", True, [])
    assert checked["registered"]["status"] == "enabled"


def moved(provider: str) -> tuple[str, Emulator, str]:
    """The registration posts to an old URL (with a token in its query)."""
    emulator = registered_emulator(provider)
    url = ELSEWHERE.format(provider=provider)
    if isinstance(emulator, GitHubEmulator):
        emulator.hook_url = url
        return provider, emulator, ""
    endpoint = emulator.webhook_endpoints[-1]
    endpoint["url"] = url
    return provider, emulator, f'webhook_endpoint = "{endpoint["id"]}"'


@pytest.mark.parametrize("world", [moved("github"), moved("stripe")], indirect=True)
async def test_a_changed_url_is_reported_with_the_reason_and_no_query(world: World) -> None:
    run = await world.reconcile()
    what = "hook" if world.provider == "github" else "endpoint"
    assert run["registration"] == drift(
        f"the {what} posts to https://old-host.example/hooks/{world.provider}?…, not to "
        f"the source's public_url {PUBLIC[world.provider]}"
    )
    assert await world.metric("hookd_source_registration_ok") == 0


@pytest.mark.parametrize("world", [("stripe", StripeEmulator(STRIPE_KEY))], indirect=True)
async def test_no_stripe_endpoint_posting_to_the_public_url_is_a_drift(world: World) -> None:
    assert isinstance(world.emulator, StripeEmulator)
    world.emulator.add_webhook_endpoint("https://someone-else.example/stripe")
    run = await world.reconcile()
    assert run["registration"] == drift(
        "no webhook endpoint posts to the source's public_url https://hookd.example/hooks/stripe"
    )


@pytest.mark.parametrize(
    "world",
    [("github", registered_emulator("github"), 'expect_events = ["issues", "push"]')],
    indirect=True,
)
async def test_events_the_source_expects_and_the_hook_does_not_send_are_named(
    world: World,
) -> None:
    assert isinstance(world.emulator, GitHubEmulator)
    world.emulator.hook_events = ["push", "pull_request"]
    run = await world.reconcile()
    assert run["registration"] == drift("the hook does not send issues")
    world.emulator.hook_events = ["*"]
    assert (await world.reconcile())["registration"] == AS_EXPECTED


def destination(name: str, types: str) -> str:
    """A ``[[sources.destinations]]`` table (nothing listens there: the events the runs
    store are of other types, so none is sent)."""
    return f"""
[[sources.destinations]]
name = "{name}"
url = "http://127.0.0.1:9/{name}"
allow_insecure = true
secret = "{STANDARD_SECRET}"
types = {types}
"""


# issues.opened (the emulator's deliveries) comes with the hook's "issues" event.
GITHUB_ROUTING = (
    'handlers = [{ ref = "tests.support.try_handlers:summarise", types = ["issues.opened"] }]',
    destination("releases", '["release.*", "!release.deleted"]'),
)
NEEDED_BY = "which the source's handlers or destinations take"


@pytest.mark.parametrize(
    "world", [("github", registered_emulator("github"), "", GITHUB_ROUTING)], indirect=True
)
async def test_without_expect_events_the_hook_must_send_what_handlers_and_destinations_take(
    world: World,
) -> None:
    assert isinstance(world.emulator, GitHubEmulator)
    world.emulator.hook_events = ["push", "pull_request"]
    run = await world.reconcile()
    assert run["registration"] == drift(
        f"the hook does not send issues.opened, release.*, {NEEDED_BY}"
    )
    assert await world.metric("hookd_source_registration_ok") == 0
    world.emulator.hook_events = ["issues", "push"]
    run = await world.reconcile()
    assert run["registration"] == drift(f"the hook does not send release.*, {NEEDED_BY}")
    world.emulator.hook_events = ["issues", "release"]
    assert (await world.reconcile())["registration"] == AS_EXPECTED
    assert await world.metric("hookd_source_registration_ok") == 1


async def sources_check(pg_url: str, config: str) -> tuple[int, str]:
    """``hookd sources check stripe`` run in this process (the command costs seconds to
    start): its exit status and what it printed."""
    sources = parse_sources(config, Path("hookd.toml"), env={})
    args = build_parser().parse_args(["sources", "check", "stripe"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await cmd_sources(args, Settings(database_url=pg_url), sources)
    return code, out.getvalue()


async def test_sources_check_names_the_types_a_stripe_endpoint_does_not_send(
    pg_url: str,
) -> None:
    """The endpoint sends invoice.paid and charge.succeeded; the source's destinations
    take invoice.* and customer.*, its handler charge.refunded. With ``expect_events``
    set, that list alone is compared."""
    stripe = registered_emulator("stripe")
    assert isinstance(stripe, StripeEmulator)
    stripe.webhook_endpoints[-1]["enabled_events"] = ["invoice.paid", "charge.succeeded"]
    routing = (
        'handlers = [{ ref = "tests.support.try_handlers:summarise", '
        'types = ["charge.refunded"] }]',
        destination("billing", '["invoice.*", "!invoice.created"]')
        + destination("crm", '["customer.*"]'),
    )
    async with serve_app(stripe.app) as api_url:
        config = sources_toml("stripe", api_url, routing=routing)
        assert await sources_check(pg_url, config) == (
            1,
            "stripe: registration differs: the endpoint does not send charge.refunded, "
            f"customer.*, {NEEDED_BY}\n",
        )
        stripe.webhook_endpoints[-1]["enabled_events"] = ["*"]
        assert (await sources_check(pg_url, config))[0] == 0
        stripe.webhook_endpoints[-1]["enabled_events"] = ["invoice.paid"]
        assert (await sources_check(pg_url, config))[0] == 1
        explicit = sources_toml(
            "stripe", api_url, routing=routing, extra='expect_events = ["invoice.paid"]'
        )
        assert (await sources_check(pg_url, explicit))[0] == 0


async def test_a_stripe_source_that_does_not_say_which_endpoint_is_not_checked(
    tmp_path: Path, pg_url: str
) -> None:
    """No public_url and no webhook_endpoint: nothing to compare with. Runs record no
    check, the metrics stay at 0 (no alert), and `hookd sources check stripe` says why."""
    stripe = registered_emulator("stripe")
    async with serve_app(stripe.app) as api_url:
        config = sources_toml("stripe", api_url, public_url=False)
        sources = parse_sources(config, Path("registration.toml"), env={})
        async with running_app(sources, pg_url, admin_token=TOKEN, reconcile_schedule=False) as (
            _,
            client,
        ):
            world = World("stripe", stripe, api_url, client)
            run = await world.reconcile()
            assert run["registration"] is None
            assert (await world.source())["registration"] is None
            assert await world.metric("hookd_source_registration_checked_timestamp_seconds") == 0
        code, out, said = await hookd_cli(tmp_path, pg_url, config, "sources", "check", "stripe")
    assert (code, out) == (2, "")
    assert said == (
        f"hookd: {tmp_path / 'hookd.toml'}: source 'stripe': not checked: set the source's "
        "public_url or webhook_endpoint to say which webhook endpoint is hookd's"
    )


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_the_admin_sources_page_shows_the_drift_and_its_reason(world: World) -> None:
    assert isinstance(world.emulator, GitHubEmulator)
    world.emulator.hook_active = False
    await world.reconcile()
    assert (await world.client.post("/admin/login", data={"token": TOKEN})).status_code == 303
    page = (await world.client.get("/admin")).text
    assert '<span class="bad">drift</span>' in page
    assert "the hook is inactive: GitHub sends it nothing" in page


async def hookd_in_process(pg_url: str, config: str, *argv: str) -> tuple[int, str]:
    """``hookd ARGV`` (a ``sources`` command) in this process: its exit status and output."""
    sources = parse_sources(config, Path("hookd.toml"), env={})
    args = build_parser().parse_args(list(argv))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await cmd_sources(args, Settings(database_url=pg_url), sources)
    return code, out.getvalue()


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_a_registration_that_cannot_be_read_is_could_not_check_not_drift(
    world: World, pg_url: str
) -> None:
    """The token lists the deliveries but cannot read the hook (GitHub answers 404):
    nothing is known of the registration. The run, the source, `hookd sources`, the
    admin pages and the metric (-1, on which the drift alert does not fire) say "could
    not check" and why, not drift; the next check that reads it is ok again."""
    assert isinstance(world.emulator, GitHubEmulator)
    world.emulator.hook_status = 404
    run = await world.reconcile()
    unread = run["registration"]
    assert (unread["ok"], unread["state"], unread["problems"]) == (None, "could_not_check", [])
    assert unread["reason"].startswith("provider_refused: HTTP 404 from GET "), unread
    assert unread["reason"].endswith(f"/{HOOK}")
    reconcile = await world.source()
    assert {k: reconcile["registration"][k] for k in ("ok", "state", "reason", "problems")} == {
        "ok": None,
        "state": "could_not_check",
        "reason": unread["reason"],
        "problems": [],
    }
    assert reconcile["registration"]["checked_at"] is not None
    assert await world.metric("hookd_source_registration_ok") == -1
    assert await world.metric("hookd_source_registration_checked_timestamp_seconds") > 0
    config = sources_toml("github", world.api_url)
    code, out = await hookd_in_process(pg_url, config, "sources", "list")
    assert code == 0 and f"could not check: {unread['reason']}" in out, out
    assert "drift" not in out

    assert (await world.client.post("/admin/login", data={"token": TOKEN})).status_code == 303
    for path in ("/admin", f"/admin/runs/{run['id']}"):
        page = (await world.client.get(path)).text
        assert '<span class="unknown">could not check</span>' in page, path
        assert unread["reason"] in page
        assert "drift" not in page, path

    world.emulator.hook_status = None
    assert (await world.reconcile())["registration"] == AS_EXPECTED
    assert await world.metric("hookd_source_registration_ok") == 1


async def test_sources_check_of_an_unreachable_api_says_it_could_not_check(pg_url: str) -> None:
    """Nothing listens at the API's address: `hookd sources check` says it could not
    check and why (exit 1: the check did not pass), not that the registration differs."""
    config = sources_toml("github", f"http://127.0.0.1:{free_port()}")
    code, out = await hookd_in_process(pg_url, config, "sources", "check", "github")
    assert code == 1
    assert out.startswith("github: could not check the registration: provider_unreachable: ")
    assert "differs" not in out
    code, out = await hookd_in_process(pg_url, config, "sources", "check", "github", "--json")
    checked = json.loads(out)
    assert code == 1
    assert (checked["checked"], checked["ok"], checked["state"]) == (
        False,
        None,
        "could_not_check",
    )
    assert checked["reason"].startswith("provider_unreachable: ")
    code, out = await hookd_in_process(pg_url, config, "sources", "list", "--json")
    [source] = [json.loads(line) for line in out.splitlines()]
    assert source["reconcile"]["registration"]["state"] == "could_not_check"
