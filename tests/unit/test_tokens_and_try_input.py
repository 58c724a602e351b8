"""Pure parts of scoped tokens and ``hookd try``: what each token opens, the admin
session each one signs in to, ``--since`` and ``--type``, and the option checks."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest
from starlette.requests import Request

from hookd.auth import ADMIN_RIGHTS, METRICS_RIGHTS, READ_RIGHTS, Right, Tokens
from hookd.cli.parser import build_parser
from hookd.cli.trial import check_args, parse_since
from hookd.errors import ConfigError
from hookd.web.admin_session import COOKIE, Sessions
from store.admin.watch import like_pattern

TOKENS = Tokens(admin="a-token", read="r-token", metrics="m-token")
NOW = datetime(2027, 1, 31, 12, 0, tzinfo=UTC)


def request(headers: dict[str, str] | None = None, cookie: str | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if cookie is not None:
        raw.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw})


def test_each_token_has_its_rights_and_no_other() -> None:
    assert TOKENS.rights("a-token") == ADMIN_RIGHTS == frozenset(Right)
    assert TOKENS.rights("r-token") == READ_RIGHTS
    assert TOKENS.rights("m-token") == METRICS_RIGHTS
    for given in ("", "a-toke", "a-tokenx", "A-TOKEN", "r-token ", "m"):
        assert not TOKENS.rights(given), given
    # A token not configured opens nothing, even when given empty.
    assert not Tokens(admin="a-token").rights("")
    assert not Tokens().rights("")


def test_bearer_rights_of_a_request() -> None:
    assert TOKENS.of_request(request({"Authorization": "Bearer r-token"})) == READ_RIGHTS
    assert TOKENS.of_request(request({"Authorization": "bearer m-token"})) == METRICS_RIGHTS
    for value in ("", "Bearer", "Bearer ", "Basic a-token", "a-token", "Bearer wrong"):
        assert TOKENS.of_request(request({"Authorization": value})) is None, value


def test_sessions_remember_who_may_act_and_end_with_their_token() -> None:
    sessions = Sessions("a-token", "r-token")
    assert sessions.opens("a-token") is True
    assert sessions.opens("r-token") is False
    assert sessions.opens("m-token") is None
    admin = sessions.verify(request(cookie=sessions.issue(can_act=True)))
    reader = sessions.verify(request(cookie=sessions.issue(can_act=False)))
    assert admin is not None and admin.can_act
    assert reader is not None and not reader.can_act
    # A new read token ends the read sessions only; a new admin token the admin ones.
    rotated_read = Sessions("a-token", "r-token-2")
    assert rotated_read.verify(request(cookie=sessions.issue(can_act=False))) is None
    assert rotated_read.verify(request(cookie=sessions.issue(can_act=True))) is not None
    rotated_admin = Sessions("a-token-2", "r-token")
    assert rotated_admin.verify(request(cookie=sessions.issue(can_act=True))) is None
    # A read session cannot pass for an admin one: another key signs it.
    read_only = Sessions("", "r-token")
    assert read_only.enabled
    assert read_only.verify(request(cookie=sessions.issue(can_act=True))) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("90m", NOW - timedelta(minutes=90)),
        ("24h", NOW - timedelta(hours=24)),
        ("7d", NOW - timedelta(days=7)),
        ("30s", NOW - timedelta(seconds=30)),
        ("2027-01-30T00:00:00Z", datetime(2027, 1, 30, tzinfo=UTC)),
        ("2027-01-30T01:00:00+01:00", datetime(2027, 1, 30, tzinfo=UTC)),
        ("2027-01-30T00:00:00", datetime(2027, 1, 30, tzinfo=UTC)),
        ("1800000000", datetime.fromtimestamp(1_800_000_000, UTC)),
    ],
)
def test_since_takes_iso_unix_seconds_and_times_ago(raw: str, expected: datetime) -> None:
    assert parse_since(raw, NOW) == expected


@pytest.mark.parametrize("raw", ["", "yesterday", "7w", "-5m", "24 h", "2027-13-01"])
def test_since_refuses_what_is_not_a_time(raw: str) -> None:
    with pytest.raises(ConfigError, match="--since"):
        parse_since(raw, NOW)


def test_type_globs_become_escaped_like_patterns() -> None:
    assert like_pattern("invoice.*") == "invoice.%"
    assert like_pattern("issue?.opened") == "issue_.opened"
    assert like_pattern("100%_done\\") == "100\\%\\_done\\\\"


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["try", *argv])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("nocolon", "01J0000000000000000000000A"), "module:function"),
        ((":f", "01J0000000000000000000000A"), "module:function"),
        (("m:",), "module:function"),
        (("m:f",), "give an EVENT_ID"),
        (("m:f", "01J0000000000000000000000A", "--all"), "not both"),
        (("m:f", "01J0000000000000000000000A", "--since", "1h"), "--since only go"),
        (
            ("m:f", "01J0000000000000000000000A", "--limit", "3", "--source", "s"),
            "--source, --limit",
        ),
    ],
)
def test_try_refuses_options_that_do_not_go_together(argv: tuple[str, ...], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        check_args(parsed(*argv))


def test_try_takes_an_event_or_all_with_filters() -> None:
    check_args(parsed("m:f", "01J0000000000000000000000A"))
    check_args(parsed("m:f", "--all", "--type", "push", "--since", "1h", "--limit", "5"))
