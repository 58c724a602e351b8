"""The sources file's ``[[notify]]`` and ``[alerts]`` tables: their defaults, each bad
value refused with one line naming the channel and the key (never a secret), the
https:// rule for what carries a secret, and which alerts a channel wants."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from hookd.errors import ConfigError
from hookd.notify.channels import channel_for
from hookd.notify.message import ALERT_KINDS, AlertItem, Severity
from hookd.sources import parse_sources
from hookd.sources.notify import PAGERDUTY_URL, AlertsConfig, NotifyConfig
from tests.support.notify_peers import self_signed
from tests.support.sources_file import error_of, parse

GH = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\n'
STRIPE = '[[sources]]\nname = "stripe"\nprovider = "stripe"\nsecrets = ["whsec_x"]\n'
SLACK_URL = "https://hooks.slack.com/services/T0001/B0001/tokenTOKENtoken"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ROUTING = "R" * 32
PASSWORD = "Sup3r-s3cret-pw"


def notify(kind: str, body: str = "", name: str = "ops") -> str:
    return f'[[notify]]\nname = "{name}"\nkind = "{kind}"\n{body}'


def slack(extra: str = "") -> str:
    return notify("slack", f'url = "{SLACK_URL}"\n{extra}')


def email(extra: str = "", smtp: str = f"smtp://alerts:{PASSWORD}@mail.example.com") -> str:
    return (
        notify(
            "email", f'smtp_url = "{smtp}"\nfrom = "hookd@example.com"\nto = ["ops@example.com"]\n'
        )
        + extra
    )


def one(text: str) -> NotifyConfig:
    [config] = parse(GH + text).notify
    return config


# -- defaults ------------------------------------------------------------------------


def test_no_notify_and_no_alerts_table_is_fine_and_gives_the_defaults() -> None:
    sources = parse(GH)
    assert sources.notify == ()
    assert sources.alerts == AlertsConfig()
    assert (sources.alerts.evaluate_every_s, sources.alerts.max_per_hour) == (30, 30)
    assert sources.alerts.group_s == 60
    assert sources.alerts.admin_url is None  # links are paths
    thresholds = sources.alerts.model_dump(
        exclude={"evaluate_every_s", "max_per_hour", "group_s", "admin_url"}
    )
    assert thresholds == {
        "dead": 1,
        "breaker_open_s": 0,
        "coverage_hole_s": 0,
        "reconcile_failing": 3,
        "prune_behind_s": 172_800,
        "rejections": 20,
        "ack_violation": 1,
        "registration_drift": 1,
    }


def test_a_slack_channel_with_the_defaults_of_every_kind() -> None:
    config = one(slack())
    assert config.kinds == ALERT_KINDS
    assert config.sources is None
    assert config.min_severity == "warning"
    assert (config.reminder_s, config.timeout_s) == (14_400, 10)
    assert config.allow_insecure is False
    assert config.post_url == SLACK_URL


def test_pagerduty_posts_to_the_events_api_unless_told_otherwise() -> None:
    assert one(notify("pagerduty", f'routing_key = "{ROUTING}"\n')).post_url == PAGERDUTY_URL
    eu = "https://events.eu.pagerduty.com/v2/enqueue"
    assert one(notify("pagerduty", f'routing_key = "{ROUTING}"\nurl = "{eu}"\n')).post_url == eu


def test_an_smtp_url_gives_host_port_and_login() -> None:
    server = one(email()).smtp
    assert (server.host, server.port, server.user, server.password) == (
        "mail.example.com",
        587,
        "alerts",
        PASSWORD,
    )
    assert not server.implicit_tls
    assert one(email(smtp="smtps://mail.example.com")).smtp.port == 465
    plain = one(email(smtp="smtp://relay.example.com:2525"))
    assert (plain.smtp.port, plain.smtp.user, plain.starttls) == (2525, None, True)
    assert PASSWORD not in repr(one(email()).smtp)


def test_everything_set_and_read_from_the_environment() -> None:
    text = (
        STRIPE
        + notify(
            "webhook",
            'url = "${ALERTS_URL}"\nsecret = "${ALERTS_SECRET}"\nkinds = ["dead", "rejections"]\n'
            'sources = ["stripe"]\nmin_severity = "critical"\nreminder_s = 0\ntimeout_s = 2.5\n',
        )
        + "[alerts]\nevaluate_every_s = 10\nmax_per_hour = 5\ngroup_s = 0\ndead = 3\n"
        "prune_behind_s = 3600\n"
    )
    sources = parse(text, {"ALERTS_URL": "https://alerts.example.com/in", "ALERTS_SECRET": WHSEC})
    [config] = sources.notify
    assert (config.url, config.secret) == ("https://alerts.example.com/in", WHSEC)
    assert config.kinds == ("dead", "rejections")
    assert config.sources == ("stripe",)
    assert (config.min_severity, config.reminder_s, config.timeout_s) == ("critical", 0, 2.5)
    assert sources.alerts.model_dump(include={"evaluate_every_s", "max_per_hour", "dead"}) == {
        "evaluate_every_s": 10,
        "max_per_hour": 5,
        "dead": 3,
    }
    assert sources.alerts.prune_behind_s == 3600


def test_a_repr_of_a_channel_shows_no_secret() -> None:
    shown = repr(one(notify("webhook", f'url = "{SLACK_URL}"\nsecret = "{WHSEC}"\n')))
    assert WHSEC not in shown
    assert "tokenTOKENtoken" not in shown
    assert PASSWORD not in repr(one(email()))


# -- every bad value, one line -------------------------------------------------------

P = "hookd.toml: notify 'ops': "


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            notify("slak", f'url = "{SLACK_URL}"\n'),
            P + "key 'kind': unknown kind 'slak' (did you mean 'slack'?); use one of slack, "
            "email, webhook, pagerduty",
        ),
        (
            '[[notify]]\nname = "ops"\nurl = "https://x.example/"\n',
            P + "key 'kind': is required; add it",
        ),
        (
            '[[notify]]\nkind = "slack"\n',
            "hookd.toml: notify #1: key 'name': is required; add it",
        ),
        (
            notify("slack", 'url = "https://x.example/"\n', name="Ops Team"),
            "hookd.toml: notify 'Ops Team': key 'name': must be 1 to 64 lowercase letters, "
            "digits and '-', starting with a letter or digit ([a-z0-9][a-z0-9-]{0,63})",
        ),
        (slack('urll = "x"\n'), P + "key 'urll': unknown key (did you mean 'url'?)"),
        (
            notify("slack"),
            P + "key 'url': is required for a slack channel; add it (the Slack incoming "
            "webhook's URL, https://hooks.slack.com/services/...)",
        ),
        (
            slack(f'secret = "{WHSEC}"\n'),
            P + "key 'secret': a slack channel takes no 'secret' (webhook channels do); remove it",
        ),
        (
            slack('to = ["a@example.com"]\n'),
            P + "key 'to': a slack channel takes no 'to' (email channels do); remove it",
        ),
        (
            notify("webhook", 'url = "https://x.example/in"\n'),
            P + "key 'secret': is required for a webhook channel; add it (a whsec_ secret the "
            "receiver verifies them with)",
        ),
        (
            notify("webhook", 'url = "https://x.example/in"\nsecret = "s3cr3t-value"\n'),
            P + "key 'secret': must be a whsec_ secret (Standard Webhooks)",
        ),
        (
            notify("pagerduty"),
            P + "key 'routing_key': is required for a pagerduty channel; add it (the "
            "integration key of the service's Events API v2)",
        ),
        (
            notify("pagerduty", 'routing_key = "has a space"\n'),
            P + "key 'routing_key': must be the service's integration key (letters and "
            "digits, no spaces)",
        ),
        (
            notify("slack", 'url = "hooks.slack.com/services/x"\n'),
            P + "key 'url': must be an http:// or https:// URL",
        ),
        (
            slack('kinds = ["ded"]\n'),
            P
            + "key 'kinds': unknown alert kind 'ded' (did you mean 'dead'?); use any of "
            + ", ".join(ALERT_KINDS),
        ),
        (slack("kinds = []\n"), P + "key 'kinds': needs at least 1 entry"),
        (
            slack('kinds = "dead"\n'),
            P + 'key \'kinds\': must be an array (in brackets: ["a", "b"]), not a string',
        ),
        (
            slack('sources = ["gj"]\n'),
            P + "key 'sources': no source named 'gj'; name sources of this file's [[sources]] "
            "(or leave the key out: every source)",
        ),
        (
            slack('sources = ["github"]\n'),
            P + "key 'sources': no source named 'github'; name sources of this file's "
            "[[sources]] (or leave the key out: every source)",
        ),
        (
            slack('min_severity = "high"\n'),
            P + "key 'min_severity': must be 'info', 'warning' or 'critical', not 'high'",
        ),
        (slack("reminder_s = -1\n"), P + "key 'reminder_s': must be 0 or more"),
        (slack("timeout_s = 0\n"), P + "key 'timeout_s': must be greater than 0"),
        (
            slack("allow_insecure = 2\n"),
            P + "key 'allow_insecure': must be true or false, not a whole number",
        ),
        (
            slack('url = "${SLACK_URL}"\n').replace(f'url = "{SLACK_URL}"\n', ""),
            P + "key 'url': environment variable SLACK_URL is not set",
        ),
        (
            email(smtp=f"smtp://alerts:{PASSWORD}@mail.example.com:99999"),
            P + "key 'smtp_url': must be smtp://[user:password@]host[:port] (or smtps:// for "
            "TLS from the start); the port is not a number from 1 to 65535",
        ),
        (
            email(smtp=f"https://alerts:{PASSWORD}@mail.example.com"),
            P + "key 'smtp_url': must be smtp://[user:password@]host[:port] (or smtps:// for "
            "TLS from the start)",
        ),
        (
            email(smtp=f"smtp://alerts:{PASSWORD}@mail.example.com/x?y=1"),
            P + "key 'smtp_url': must be smtp://[user:password@]host[:port] (or smtps:// for "
            "TLS from the start), with nothing after the host and port",
        ),
        (
            notify("email", 'smtp_url = "smtp://m.example.com"\nto = ["a@example.com"]\n'),
            P + "key 'from': is required for an email channel; add it (the sender's address)",
        ),
        (
            notify(
                "email",
                'smtp_url = "smtp://m.example.com"\nfrom = "not an address"\nto = ["a@x.io"]\n',
            ),
            P + "key 'from': must be an email address: ops@example.com or Ops <ops@example.com>",
        ),
        (
            notify("email", 'smtp_url = "smtp://m.example.com"\nfrom = "a@x.io"\nto = []\n'),
            P + "key 'to': needs at least 1 entry",
        ),
        (
            notify("email", 'smtp_url = "smtp://m.example.com"\nfrom = "a@x.io"\nto = ["b"]\n'),
            P + "key 'to': must be an email address: ops@example.com or Ops <ops@example.com>",
        ),
        (
            slack() + slack(),
            P + "key 'name': duplicate [[notify]] name",
        ),
        ("[[notify]]\n[notify.x]\n", "hookd.toml: notify #1: key 'x': unknown key"),
        (
            'notify = "slack"\n',
            "hookd.toml: key 'notify': must be [[notify]] tables, one per channel, not a string",
        ),
        (
            "[notfy]\n",
            "hookd.toml: key 'notfy': unknown top-level key (did you mean 'notify'?)",
        ),
        ("[alerts]\ndead = 0\n", "hookd.toml: key 'alerts.dead': must be 1 or more"),
        (
            "[alerts]\ndaed = 1\n",
            "hookd.toml: key 'alerts.daed': unknown key (did you mean 'dead'?)",
        ),
        (
            "[alerts]\nmax_per_hour = 1.5\n",
            "hookd.toml: key 'alerts.max_per_hour': must be a "
            "whole number, not a number with a fraction",
        ),
        (
            "[alerts]\nevaluate_every_s = 0\n",
            "hookd.toml: key 'alerts.evaluate_every_s': must be greater than 0",
        ),
        ('alerts = "on"\n', "hookd.toml: key 'alerts': must be a table ([alerts])"),
        (
            '[alerts]\ngroup_s = "${GROUP}"\n',
            "hookd.toml: key 'alerts.group_s': environment variable GROUP is not set",
        ),
    ],
)
def test_each_bad_value_is_one_line_naming_the_channel_and_the_key(text: str, message: str) -> None:
    # Top-level keys go first: after [[sources]] they would be the source's.
    assert error_of(text + GH if "=" in text.split("\n", maxsplit=1)[0] else GH + text) == message


def test_a_key_of_another_kind_names_the_kinds_that_take_it() -> None:
    assert error_of(GH + email('url = "https://x.example/"\n')) == (
        P + "key 'url': an email channel takes no 'url' (slack, webhook and pagerduty "
        "channels do); remove it"
    )


# -- what carries a secret: https://, or allow_insecure ------------------------------


@pytest.mark.parametrize(
    ("text", "carried"),
    [
        (
            notify("slack", 'url = "http://hooks.slack.com/services/T/B/x"\n'),
            "the Slack webhook URL's token",
        ),
        (
            notify("webhook", f'url = "http://alerts.example.com/in"\nsecret = "{WHSEC}"\n'),
            "the signed alerts",
        ),
        (
            notify("pagerduty", f'routing_key = "{ROUTING}"\nurl = "http://pd.example/v2/e"\n'),
            "the routing key",
        ),
    ],
)
def test_a_plain_http_url_is_refused_unless_allowed(text: str, carried: str) -> None:
    assert error_of(GH + text) == (
        P + f"key 'url': http:// would send {carried} unencrypted; use https://, or set "
        "allow_insecure = true in this [[notify]] table (a test server, a trusted network)"
    )
    assert one(text + "allow_insecure = true\n").allow_insecure


def test_another_scheme_is_refused_even_when_insecure_is_allowed() -> None:
    text = notify("slack", 'url = "ftp://hooks.slack.com/x"\nallow_insecure = true\n')
    assert error_of(GH + text) == P + "key 'url': must be an http:// or https:// URL"


def test_a_url_naming_this_machine_is_a_warning() -> None:
    text = notify("webhook", f'url = "http://127.0.0.1:9/in"\nsecret = "{WHSEC}"\n')
    sources = parse(GH + text + "allow_insecure = true\n")
    assert sources.warnings == (
        P + "key 'url': 127.0.0.1 is a loopback address (this machine): hookd sends the "
        "signed alerts there; check that it is meant to",
    )


def test_an_smtp_password_without_tls_is_refused_unless_allowed() -> None:
    message = error_of(GH + email("starttls = false\n"))
    assert message == (
        P + "key 'starttls': false would send the SMTP password unencrypted; set starttls = "
        "true (or use smtps://), or set allow_insecure = true in this [[notify]] table (a "
        "trusted network)"
    )
    assert PASSWORD not in message
    assert not one(email("starttls = false\nallow_insecure = true\n")).tls
    # No password, nothing secret: a local relay without TLS is fine.
    assert not one(email("starttls = false\n", smtp="smtp://localhost:25")).tls
    assert one(email("starttls = false\n", smtp=f"smtps://u:{PASSWORD}@m.example.com")).tls


def test_an_smtp_password_to_this_machine_is_a_warning() -> None:
    sources = parse(GH + email(smtp=f"smtp://alerts:{PASSWORD}@127.0.0.1:2525"))
    [warning] = sources.warnings
    assert "key 'smtp_url': 127.0.0.1 is a loopback address" in warning
    assert PASSWORD not in warning


def test_no_error_line_repeats_a_secret() -> None:
    bad = [
        email(smtp=f"smtp://alerts:{PASSWORD}@mail.example.com:0x19"),
        email(smtp=f"smtp://:{PASSWORD}@mail.example.com"),
        notify(
            "webhook",
            f'url = "http://alerts.example.com/in?token={PASSWORD}"\nsecret = "{WHSEC}"\n',
        ),
        notify("slack", f'url = "http://hooks.slack.com/services/{PASSWORD}"\n'),
        notify("pagerduty", f'routing_key = "{PASSWORD} x"\n'),
    ]
    for text in bad:
        message = error_of(GH + text)
        assert PASSWORD not in message, message


# -- ca_file: read at load, from the sources file's folder ---------------------------


def test_a_ca_file_is_found_from_the_sources_files_folder(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    path = tmp_path / "hookd.toml"
    [config] = parse_sources(GH + email(f'ca_file = "{cert.name}"\n'), path, {}).notify
    assert config.ca_file == str(cert)


def test_a_ca_file_that_is_missing_or_not_pem_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hookd.toml"
    with pytest.raises(ConfigError, match="key 'ca_file': no file at ") as info:
        parse_sources(GH + email('ca_file = "nope.pem"\n'), path, {})
    assert "\n" not in str(info.value)
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"junk\.pem holds no PEM certificate that can be read"):
        parse_sources(GH + email('ca_file = "junk.pem"\n'), path, {})
    with pytest.raises(ConfigError, match="key 'ca_file': is used for TLS only"):
        parse_sources(
            GH + email('starttls = false\nca_file = "junk.pem"\n', smtp="smtp://m.example.com"),
            path,
            {},
        )


# -- which alerts a channel wants ----------------------------------------------------


def item(kind: str = "dead", source: str | None = "stripe", severity: str = "warning") -> AlertItem:
    now = datetime.now(UTC)
    return AlertItem(
        id="a1",
        kind=kind,
        key=source or "box",
        source=source,
        severity=Severity(severity),
        summary="3 dead events",
        link="/admin/alerts/a1",
        first_seen=now,
        last_seen=now,
        count=1,
    )


def test_a_channel_wants_its_kinds_its_sources_and_its_severities() -> None:
    client = httpx.AsyncClient()  # never used: wants() sends nothing
    every = channel_for(one(slack()), client)
    assert every.wants(item())
    assert every.wants(item(kind="prune_behind", source=None))
    assert not every.wants(item(severity="info"))  # below the default, warning
    assert every.wants(item(severity="critical"))

    [config] = parse(
        GH + STRIPE + slack('kinds = ["dead"]\nsources = ["stripe"]\nmin_severity = "info"\n')
    ).notify
    some = channel_for(config, client)
    assert some.wants(item(severity="info"))
    assert not some.wants(item(kind="rejections"))
    assert not some.wants(item(source="gh"))
    # A channel that names its sources gets no alert that is about none.
    assert not some.wants(item(source=None))


# -- the documented examples ---------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def toml_blocks(text: str) -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_the_documented_notify_examples_load() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    section = operations.split("## Notifications\n", 1)[1].split("\n## ", 1)[0]
    readme = (ROOT / "README.md").read_text()
    examples = [b for b in toml_blocks(section) + toml_blocks(readme) if "[[notify]]" in b]
    assert len(examples) == 2
    env = {"SLACK_WEBHOOK_URL": SLACK_URL}
    for example in examples:
        [config] = parse(example + STRIPE, env).notify
        assert (config.name, config.kind, config.url) == ("ops", "slack", SLACK_URL)
