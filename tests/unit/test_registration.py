"""The registration check's comparisons (a GitHub hook, a Stripe webhook endpoint, as
their APIs show them) and the keys that configure it: pure, no services."""

from __future__ import annotations

import itertools
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from hookd.errors import ConfigError
from hookd.sources import Source, parse_sources
from reconcile.providers.base import glob_extends, is_2xx, needed_types, shown_url
from reconcile.providers.github import hook_registration, sends_type
from reconcile.providers.stripe import endpoint_registration

URL = "https://hookd.example/hooks/src"


def source(
    provider: str,
    reconcile: str = "",
    public_url: str | None = URL,
    handlers: str = "",
    destinations: tuple[str, ...] = (),
) -> Source:
    """``handlers``: the key's value as written; ``destinations``: each one's ``types``
    as written ("" for none)."""
    secret = "whsec_c2VjcmV0" if provider == "stripe" else "s3cret"
    specific = 'hook = "repos/o/r/hooks/1"' if provider == "github" else ""
    public = f'public_url = "{public_url}"' if public_url else ""
    handled = f"handlers = {handlers}" if handlers else ""
    sent = "".join(
        f'\n[[sources.destinations]]\nname = "d{i}"\nurl = "https://d.example/{i}"\n'
        f'secret = "whsec_c2VjcmV0"\n' + (f"types = {types}\n" if types else "")
        for i, types in enumerate(destinations)
    )
    text = f"""
[[sources]]
name = "src"
provider = "{provider}"
secrets = ["{secret}"]
{public}
{handled}

[sources.reconcile]
token = "t"
{specific}
{reconcile}
{sent}
"""
    found = parse_sources(text, Path("hookd.toml"), env={}).get("src")
    assert found is not None
    return found


def hook(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": "Repository",
        "id": 1,
        "name": "web",
        "active": True,
        "events": ["push", "issues"],
        "config": {"content_type": "json", "insecure_ssl": "0", "url": URL},
        "last_response": {"code": 202, "status": "active", "message": "OK"},
    }
    return document | changes


def endpoint(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "we_1",
        "object": "webhook_endpoint",
        "api_version": "2024-06-20",
        "enabled_events": ["invoice.paid", "customer.updated"],
        "status": "enabled",
        "url": URL,
    }
    return document | changes


def test_a_hook_as_expected_has_no_problem() -> None:
    found = hook_registration(source("github", 'expect_events = ["push"]'), hook())
    assert (found.ok, found.problems) == (True, ())
    assert found.registered["events"] == ["push", "issues"]


def test_an_inactive_hook_is_a_problem() -> None:
    found = hook_registration(source("github"), hook(active=False))
    assert found.problems == ("the hook is inactive: GitHub sends it nothing",)


def test_a_trailing_slash_is_the_same_url_and_another_path_is_not() -> None:
    same = hook_registration(source("github"), hook(config={"url": URL + "/"}))
    other = hook_registration(source("github"), hook(config={"url": URL + "-old"}))
    assert same.ok
    assert other.problems == (f"the hook posts to {URL}-old, not to the source's public_url {URL}",)


def test_without_a_public_url_the_url_is_not_compared() -> None:
    found = hook_registration(source("github", public_url=None), hook(config={"url": "x"}))
    assert found.ok


def test_expected_events_a_hook_lacks_are_named_and_star_sends_all() -> None:
    github = source("github", 'expect_events = ["push", "pull_request", "release"]')
    lacking = hook_registration(github, hook())
    everything = hook_registration(github, hook(events=["*"]))
    assert lacking.problems == ("the hook does not send pull_request, release",)
    assert everything.ok


HANDLERS = '["m:every", { ref = "m:opened", types = ["issues.opened", "!issues.deleted"] }]'
NEEDS = " which the source's handlers or destinations take"


def test_the_types_its_handlers_and_destinations_take_are_what_it_needs() -> None:
    """Positive globs, in the order written, each once; negated ones, a handler with no
    filter, a destination without types and a forward ask for no type in particular."""
    github = source(
        "github",
        handlers=HANDLERS,
        destinations=('["release", "pull_request.*", "issues.opened"]', '["!push"]', ""),
    )
    assert needed_types(github) == ("issues.opened", "release", "pull_request.*")
    assert needed_types(source("github", handlers='["m:every"]', destinations=("",))) == ()


def test_a_hook_must_send_the_events_of_the_types_its_handlers_and_destinations_take() -> None:
    github = source("github", handlers=HANDLERS, destinations=('["pull_request.*", "rel*"]',))
    lacking = hook_registration(github, hook(events=["push"]))
    assert lacking.problems == (
        "the hook does not send issues.opened, pull_request.*, rel*," + NEEDS,
    )
    # issues.opened comes with the issues event; "release" matches rel*.
    partly = hook_registration(github, hook(events=["issues", "release"]))
    assert partly.problems == ("the hook does not send pull_request.*," + NEEDS,)
    assert hook_registration(github, hook(events=["issues", "pull_request", "release"])).ok
    assert hook_registration(github, hook(events=["*"])).ok


def test_expect_events_overrides_what_the_handlers_and_destinations_take() -> None:
    github = source("github", 'expect_events = ["push"]', handlers=HANDLERS)
    assert hook_registration(github, hook(events=["push"])).ok
    stripe = source("stripe", 'expect_events = ["customer.updated"]', destinations=('["x.*"]',))
    assert endpoint_registration(stripe, endpoint()).ok


def test_without_type_filters_nothing_is_needed_beyond_expect_events() -> None:
    github = source("github", handlers='["m:every"]', destinations=('["!push"]',))
    assert hook_registration(github, hook(events=["push"])).ok
    assert endpoint_registration(source("stripe"), endpoint(enabled_events=[])).ok


def test_an_endpoint_must_send_the_types_its_handlers_and_destinations_take() -> None:
    stripe = source(
        "stripe",
        handlers='[{ ref = "m:refund", types = ["charge.refunded"] }]',
        destinations=('["invoice.*", "!invoice.created"]', '["customer.*"]'),
    )
    assert endpoint_registration(stripe, endpoint()).problems == (
        "the endpoint does not send charge.refunded," + NEEDS,
    )
    assert endpoint_registration(stripe, endpoint(enabled_events=["*"])).ok
    without = endpoint_registration(stripe, endpoint(enabled_events=["charge.refunded"]))
    assert without.problems == ("the endpoint does not send invoice.*, customer.*," + NEEDS,)


def test_a_glob_extends_a_prefix_as_fnmatch_would_match_a_longer_type() -> None:
    """Against brute force over short types: some ``prefix + rest`` matches the glob."""
    rests = ["".join(r) for n in range(5) for r in itertools.product("ab.[", repeat=n)]
    for glob in ("*", "a*", "*b", "a.b", "a?", "[ab].*", "[!a]*", "a*b.a", "?.?", "a[.]b", "a[b"):
        for n in range(4):
            for prefix in map("".join, itertools.product("ab.[", repeat=n)):
                found = any(fnmatchcase(prefix + rest, glob) for rest in rests)
                assert glob_extends(glob, prefix) is found, (glob, prefix)
    assert sends_type("issues", "issues.opened") and sends_type("issues", "*opened")
    assert not sends_type("issue", "issues.opened") and not sends_type("push", "pull*")


def test_a_last_delivery_answered_with_an_error_is_a_problem_and_unused_is_not() -> None:
    failing = {"code": 401, "status": "misconfigured", "message": "Invalid HTTP Response: 401"}
    unused = {"code": None, "status": "unused", "message": None}
    assert hook_registration(source("github"), hook(last_response=failing)).problems == (
        "its last delivery was answered 401 (Invalid HTTP Response: 401)",
    )
    assert hook_registration(source("github"), hook(last_response=unused)).ok


def test_an_app_hook_is_compared_by_its_url_alone() -> None:
    config = {"config": {"url": URL, "content_type": "json"}}
    assert hook_registration(source("github"), config, app=True).ok


def test_a_disabled_endpoint_is_a_problem() -> None:
    found = endpoint_registration(source("stripe"), endpoint(status="disabled"))
    assert found.problems == ("the webhook endpoint is disabled: Stripe sends it nothing",)


def test_an_endpoint_lacking_events_or_on_another_api_version_is_a_problem() -> None:
    stripe = source(
        "stripe",
        'expect_events = ["invoice.paid", "charge.refunded"]\n'
        'expect_api_version = "2025-01-27.acacia"',
    )
    found = endpoint_registration(stripe, endpoint())
    default_version = endpoint_registration(stripe, endpoint(api_version=None))
    assert found.problems == (
        "the endpoint does not send charge.refunded",
        "the endpoint renders events in API version 2024-06-20, not 2025-01-27.acacia",
    )
    assert default_version.problems[-1] == (
        "the endpoint renders events in API version the account's default version, "
        "not 2025-01-27.acacia"
    )


def test_a_url_is_shown_without_its_query_or_credentials() -> None:
    assert shown_url("https://u:p@h.example:8443/hooks/x?token=abc") == (
        "https://h.example:8443/hooks/x?…"
    )
    assert shown_url(None) == "(none)"


@pytest.mark.parametrize(
    ("code", "ok"),
    [(200, True), (202, True), ("204", True), (301, False), (0, False), (True, False)],
)
def test_only_2xx_codes_count_as_acknowledged(code: object, ok: bool) -> None:
    assert is_2xx(code) is ok


def test_public_url_is_taken_by_checkable_providers_only() -> None:
    assert source("stripe").config.public_url == URL
    with pytest.raises(ConfigError) as refused:
        parse_sources(
            f'[[sources]]\nname = "s"\nprovider = "slack"\nsecrets = ["x"]\npublic_url = "{URL}"\n',
            Path("hookd.toml"),
            env={},
        )
    assert str(refused.value) == (
        "hookd.toml: source 's': key 'public_url': slack does not sign the URL and its "
        "registration cannot be checked; remove it"
    )


@pytest.mark.parametrize(
    ("provider", "line", "said"),
    [
        ("github", 'expect_events = ["Push!"]', "key 'reconcile.expect_events'"),
        ("stripe", 'webhook_endpoint = "ep_1"', "key 'reconcile.webhook_endpoint'"),
        ("stripe", 'expect_api_version = "latest"', "key 'reconcile.expect_api_version'"),
        ("github", 'webhook_endpoint = "we_1"', "not a github setting"),
    ],
)
def test_a_bad_registration_key_is_one_line_naming_it(provider: str, line: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        source(provider, line)
    message = str(refused.value)
    assert said in message and "\n" not in message
