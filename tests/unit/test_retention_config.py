"""``[retention]`` and ``[sources.retention]``: defaults, overrides, and the refusal of a
``keep_keys_days`` shorter than what the source's provider may still redeliver."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookd.errors import ConfigError
from hookd.ops import parse_as_of, policies
from hookd.providers import PROVIDERS
from hookd.sources import RetentionConfig, keys_needed, parse_sources
from store.retention.prune import Policy

PATH = Path("hookd.toml")

STRIPE = """
[[sources]]
name = "billing"
provider = "stripe"
secrets = ["whsec_test"]
"""

GITHUB = """
[[sources]]
name = "code"
provider = "github"
secrets = ["gh-secret"]
"""


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_sources(text, PATH, env={})
    return str(caught.value)


def test_defaults_apply_to_every_source() -> None:
    sources = parse_sources(STRIPE + GITHUB, PATH, env={})
    for source in sources:
        assert source.config.retention == RetentionConfig(
            keep_body_days=7, keep_events_days=30, keep_dead_days=90, keep_keys_days=400
        )


def test_top_level_retention_is_the_default_and_a_source_overrides_it_key_by_key() -> None:
    text = (
        "[retention]\nkeep_events_days = 14\nkeep_keys_days = 60\n"
        + STRIPE
        + "[sources.retention]\nkeep_events_days = 3\n"
        + GITHUB
    )
    sources = parse_sources(text, PATH, env={})
    billing = sources.by_name["billing"].config.retention
    code = sources.by_name["code"].config.retention
    assert (billing.keep_events_days, billing.keep_keys_days, billing.keep_body_days) == (3, 60, 7)
    assert (code.keep_events_days, code.keep_keys_days) == (14, 60)
    assert policies(sources) == {
        "billing": Policy(7, 3, 90, 60),
        "code": Policy(7, 14, 90, 60),
    }
    assert list(policies(sources, "code")) == ["code"]


def test_keep_keys_days_shorter_than_the_horizon_is_one_line_naming_what_to_set() -> None:
    message = refusal(STRIPE + "[sources.retention]\nkeep_keys_days = 10\n")
    assert message == (
        "hookd.toml: source 'billing': key 'retention.keep_keys_days': 10 days is shorter "
        "than stripe's redelivery horizon of 30 days: a redelivery after its key is gone "
        "would be stored and processed again; set keep_keys_days = 30 or more"
    )
    assert "\n" not in message


def test_a_too_short_top_level_default_names_the_source_that_needs_more() -> None:
    message = refusal("[retention]\nkeep_keys_days = 5\n" + GITHUB + STRIPE)
    assert message == (
        "hookd.toml: source 'billing': key 'retention.keep_keys_days': 5 days (the "
        "[retention] default) is shorter than stripe's redelivery horizon of 30 days: a "
        "redelivery after its key is gone would be stored and processed again; set "
        "keep_keys_days = 30 or more in [retention] or in this source's [sources.retention]"
    )


def test_a_reconciled_source_needs_its_overlap_and_a_longer_lookback_too() -> None:
    reconciled = STRIPE + '[sources.reconcile]\ntoken = "sk_test"\n'
    # The horizon alone is not enough: a pass re-reads overlap_s (300 s) before its cursor.
    message = refusal(reconciled + "[sources.retention]\nkeep_keys_days = 30\n")
    assert "stripe's redelivery horizon of 30 days plus this source's reconcile " in message
    assert "overlap_s = 300" in message and message.endswith("set keep_keys_days = 31 or more")
    parse_sources(reconciled + "[sources.retention]\nkeep_keys_days = 31\n", PATH, env={})
    # A lookback longer than the horizon is what a first pass reads.
    slack = (
        '[[sources]]\nname = "chat"\nprovider = "slack"\nsecrets = ["s"]\n'
        '[sources.reconcile]\ntoken = "xoxb"\nchannels = ["C1"]\nlookback_s = 864000\n'
        "[sources.retention]\nkeep_keys_days = 5\n"
    )
    message = refusal(slack)
    assert "lookback_s = 864000 (10 days, longer than slack's redelivery horizon" in message
    assert message.endswith("set keep_keys_days = 11 or more")


def test_every_provider_declares_a_horizon_and_the_default_keeps_keys_longer() -> None:
    for provider in PROVIDERS.values():
        assert 1 <= provider.redelivery_horizon_days <= 90, provider.name
        needed, _ = keys_needed(provider, None)
        assert RetentionConfig().keep_keys_days >= needed
    assert PROVIDERS["stripe"].redelivery_horizon_days == 30
    assert PROVIDERS["paddle"].redelivery_horizon_days == 90
    assert PROVIDERS["hmac"].redelivery_horizon_days == 3


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            "[retention]\nkeep_body_day = 3\n",
            "hookd.toml: key 'retention.keep_body_day': unknown key "
            "(did you mean 'keep_body_days'?)",
        ),
        (
            "[retention]\nkeep_dead_days = 0\n",
            "hookd.toml: key 'retention.keep_dead_days': must be greater than 0",
        ),
        ("retention = 3\n", "hookd.toml: key 'retention': must be a table ([retention])"),
    ],
)
def test_a_wrong_top_level_retention_names_its_key(table: str, expected: str) -> None:
    assert refusal(table + STRIPE) == expected


def test_a_wrong_source_retention_names_the_source() -> None:
    message = refusal(STRIPE + "[sources.retention]\nkeep_events_days = -1\n")
    assert message == (
        "hookd.toml: source 'billing': key 'retention.keep_events_days': must be greater than 0"
    )


def test_a_body_kept_longer_than_its_row_is_allowed() -> None:
    """It simply goes with the row: nothing to refuse."""
    text = STRIPE + "[sources.retention]\nkeep_body_days = 60\nkeep_events_days = 30\n"
    retention = parse_sources(text, PATH, env={}).by_name["billing"].config.retention
    assert (retention.keep_body_days, retention.keep_events_days) == (60, 30)


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2027-01-31T12:00:00Z", "2027-01-31T12:00:00+00:00"),
        ("2027-01-31T13:00:00+01:00", "2027-01-31T12:00:00+00:00"),
        ("2027-01-31 12:00", "2027-01-31T12:00:00+00:00"),
        ("1801396800", "2027-01-31T12:00:00+00:00"),
        ("1801396800.5", "2027-01-31T12:00:00.500000+00:00"),
    ],
)
def test_as_of_takes_iso_8601_or_unix_seconds(text: str, iso: str) -> None:
    assert parse_as_of(text).isoformat() == iso


@pytest.mark.parametrize("text", ["yesterday", "", "nan", "-5", "2027-13-01", "1e30"])
def test_as_of_refuses_anything_else(text: str) -> None:
    from hookd.errors import BadRequest

    with pytest.raises(BadRequest):
        parse_as_of(text)
