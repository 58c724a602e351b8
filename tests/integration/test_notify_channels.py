"""The notification channels against real peers on loopback: emulators of Slack's
incoming webhooks and PagerDuty's Events API v2 that check the documented shapes, a
receiver verifying the webhook channel with the ``standardwebhooks`` package, and an
SMTP server (aiosmtpd) with STARTTLS on a self-signed certificate and a login. Each
channel's success, its failures sorted into retryable and permanent, no secret in
any reason, and ``hookd notify test`` end to end."""

from __future__ import annotations

import email
import email.policy
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from hookd.notify.channels import ChannelError, channel_for
from hookd.notify.message import AlertItem, Message, Severity, What
from hookd.sources.notify import NotifyConfig
from tests.support import emulator_servers
from tests.support.cli import hookd_async
from tests.support.notify_peers import (
    ROUTING_KEY,
    SLACK_TOKEN_PATH,
    SMTP_PASSWORD,
    SMTP_USER,
    PagerDutyEmulator,
    SlackEmulator,
    SmtpServer,
    WebhookReceiver,
    smtp_server,
)
from tests.support.server import free_port

pytestmark = pytest.mark.anyio

anyio_backend = emulator_servers.anyio_backend
servers = emulator_servers.servers
serve = emulator_servers.serve

WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SLACK_TOKEN = SLACK_TOKEN_PATH.rsplit("/", 1)[1]
Serve = Callable[[Any], str]


def config(kind: str, **keys: Any) -> NotifyConfig:
    return NotifyConfig.model_validate(
        {"name": "ops", "kind": kind, "allow_insecure": True, "timeout_s": 5, **keys}
    )


def alert(key: str = "stripe", summary: str = "3 events dead in the last hour") -> AlertItem:
    seen = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return AlertItem(
        id=f"al_{key}",
        kind="dead",
        key=key,
        source=key,
        severity=Severity.CRITICAL,
        summary=summary,
        link=f"https://hookd.example.com/admin/alerts/al_{key}",
        first_seen=seen,
        last_seen=seen + timedelta(minutes=5),
        count=3,
    )


def message(what: What = What.OPENED, *items: AlertItem) -> Message:
    return Message(id="msg_0001", what=what, kind="dead", items=items or (alert(),))


async def send(cfg: NotifyConfig, msg: Message) -> str:
    async with httpx.AsyncClient() as client:
        return await channel_for(cfg, client).send(msg)


async def failure(cfg: NotifyConfig, msg: Message | None = None) -> ChannelError:
    with pytest.raises(ChannelError) as info:
        await send(cfg, msg or message())
    return info.value


def secrets_absent(error: ChannelError, *secrets: str) -> None:
    assert "\n" not in error.reason
    for secret in secrets:
        assert secret not in error.reason
        assert secret not in str(error)


# -- Slack ---------------------------------------------------------------------------


@pytest.fixture
def slack(serve: Serve) -> tuple[SlackEmulator, NotifyConfig]:
    emulator = SlackEmulator()
    base = serve(emulator.app())
    return emulator, config("slack", url=base + SLACK_TOKEN_PATH)


async def test_slack_gets_a_header_and_a_section_per_alert(
    slack: tuple[SlackEmulator, NotifyConfig],
) -> None:
    emulator, cfg = slack
    assert await send(cfg, message(What.OPENED, alert("stripe"), alert("github"))) == "200 ok"
    [payload] = emulator.received
    assert payload["text"] == "hookd opened: dead (2 alerts) [critical]"
    header, *sections = payload["blocks"]
    assert header["text"] == {"type": "plain_text", "text": "hookd opened: dead (2 alerts)"}
    assert [s["type"] for s in sections] == ["section", "section"]
    text = sections[0]["text"]["text"]
    assert text.startswith("*stripe* (critical): 3 events dead in the last hour\n")
    assert "found 3 times; first seen 2026-01-02T03:04:05Z, last seen 2026-01-02T03:09:05Z" in text
    assert "<https://hookd.example.com/admin/alerts/al_stripe|evidence in hookd>" in text


async def test_slack_text_is_escaped_and_many_alerts_stay_within_slacks_limits(
    slack: tuple[SlackEmulator, NotifyConfig],
) -> None:
    emulator, cfg = slack
    items = [alert(f"s{i}", summary="<!channel> & <https://x|y>") for i in range(60)]
    assert await send(cfg, message(What.REMINDER, *items)) == "200 ok"
    [payload] = emulator.received  # the emulator refuses more than 50 blocks
    blocks = payload["blocks"]
    assert len(blocks) == 1 + 45 + 1
    assert blocks[-1]["elements"][0]["text"] == "and 15 more: see hookd's admin UI"
    text = blocks[1]["text"]["text"]
    assert "&lt;!channel&gt; &amp; &lt;https://x|y&gt;" in text
    assert "<!channel>" not in text


@pytest.mark.parametrize(
    ("status", "body", "permanent"),
    [
        (400, "invalid_payload", True),
        (403, "invalid_token", True),
        (404, "no_service", True),
        (410, "channel_is_archived", True),
        (408, "", False),
        (429, "rate_limited", False),
        (500, "", False),
        (503, "service unavailable", False),
    ],
)
async def test_slack_failures_are_sorted_into_retryable_and_permanent(
    slack: tuple[SlackEmulator, NotifyConfig], status: int, body: str, permanent: bool
) -> None:
    emulator, cfg = slack
    emulator.failing.answer = (status, body)
    error = await failure(cfg)
    assert error.permanent is permanent
    assert error.reason == f"127.0.0.1 answered {status} {body}".rstrip()
    secrets_absent(error, SLACK_TOKEN, SLACK_TOKEN_PATH)


async def test_slack_with_a_wrong_token_is_a_permanent_no_service(serve: Serve) -> None:
    emulator = SlackEmulator()
    url = serve(emulator.app()) + "/services/T0HOOKD01/B0HOOKD02/wrongTOKENwrongTOKEN"
    error = await failure(config("slack", url=url))
    assert (error.reason, error.permanent) == ("127.0.0.1 answered 404 no_service", True)
    secrets_absent(error, "wrongTOKENwrongTOKEN")


async def test_a_redirect_is_not_followed_and_its_target_is_named_by_host_only(
    slack: tuple[SlackEmulator, NotifyConfig],
) -> None:
    emulator, cfg = slack
    emulator.failing.answer = (302, "")
    emulator.failing.location = f"https://elsewhere.example/steal{SLACK_TOKEN_PATH}?k=v"
    error = await failure(cfg)
    assert error.permanent
    assert error.reason == (
        "127.0.0.1 answered 302: redirect to elsewhere.example not followed: configure the "
        "final URL"
    )


async def test_a_peer_that_does_not_answer_in_time_is_retryable(
    slack: tuple[SlackEmulator, NotifyConfig],
) -> None:
    emulator, cfg = slack
    emulator.failing.delay_s = 3
    started = time.monotonic()
    error = await failure(cfg.model_copy(update={"timeout_s": 0.3}))
    assert time.monotonic() - started < 2
    assert (error.reason, error.permanent) == ("127.0.0.1 did not answer within 0.3s", False)


async def test_nothing_listening_is_retryable_and_names_the_host_only() -> None:
    url = f"http://127.0.0.1:{free_port()}{SLACK_TOKEN_PATH}"
    error = await failure(config("slack", url=url))
    assert not error.permanent
    assert error.reason.startswith("cannot connect to 127.0.0.1 (")
    secrets_absent(error, SLACK_TOKEN)


async def test_a_huge_error_answer_is_read_only_in_part_and_quoted_briefly(
    slack: tuple[SlackEmulator, NotifyConfig],
) -> None:
    emulator, cfg = slack
    emulator.failing.answer = (500, "x" * 1_000_000)
    error = await failure(cfg)
    assert error.reason == "127.0.0.1 answered 500 " + "x" * 119 + "…"


# -- the signed webhook --------------------------------------------------------------


@pytest.fixture
def receiver(serve: Serve) -> tuple[WebhookReceiver, str]:
    recorder = WebhookReceiver(WHSEC)
    return recorder, serve(recorder.app()) + "/alerts"


@pytest.mark.parametrize("what", list(What))
async def test_the_webhook_is_signed_as_standard_webhooks_verifies_it(
    receiver: tuple[WebhookReceiver, str], what: What
) -> None:
    recorder, url = receiver
    assert await send(config("webhook", url=url, secret=WHSEC), message(what)) == "204"
    [(headers, payload)] = recorder.received  # verified by the standardwebhooks package
    assert headers["webhook-id"] == "msg_0001"
    assert headers["webhook-signature"].startswith("v1,")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert payload["type"] == f"hookd.alert.{what.value}"
    assert payload["timestamp"].endswith("Z")
    data = payload["data"]
    assert (data["id"], data["kind"], data["severity"]) == ("msg_0001", "dead", "critical")
    assert data["items"] == [
        {
            "id": "al_stripe",
            "kind": "dead",
            "key": "stripe",
            "source": "stripe",
            "severity": "critical",
            "summary": "3 events dead in the last hour",
            "link": "https://hookd.example.com/admin/alerts/al_stripe",
            "first_seen": "2026-01-02T03:04:05Z",
            "last_seen": "2026-01-02T03:09:05Z",
            "count": 3,
        }
    ]


async def test_a_receiver_refusing_the_signature_is_permanent_and_no_secret_is_shown(
    receiver: tuple[WebhookReceiver, str],
) -> None:
    recorder, url = receiver
    other = "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="
    error = await failure(config("webhook", url=url + "?token=hunter22hunter", secret=other))
    assert (error.reason, error.permanent) == ("127.0.0.1 answered 401 bad signature", True)
    assert recorder.received == []
    secrets_absent(error, other, "hunter22hunter")


# -- PagerDuty -----------------------------------------------------------------------


@pytest.fixture
def pagerduty(serve: Serve) -> tuple[PagerDutyEmulator, NotifyConfig]:
    emulator = PagerDutyEmulator()
    url = serve(emulator.app()) + "/v2/enqueue"
    return emulator, config("pagerduty", url=url, routing_key=ROUTING_KEY)


async def test_pagerduty_triggers_one_incident_per_alert(
    pagerduty: tuple[PagerDutyEmulator, NotifyConfig],
) -> None:
    emulator, cfg = pagerduty
    receipt = await send(cfg, message(What.OPENED, alert("stripe"), alert("github")))
    assert receipt == "202 success; Event processed (2 events)"
    first, second = emulator.received
    assert first == {
        "routing_key": ROUTING_KEY,
        "event_action": "trigger",
        "dedup_key": "dead:stripe",
        "payload": {
            "summary": "dead stripe: 3 events dead in the last hour",
            "source": "hookd",
            "severity": "critical",
            "component": "stripe",
            "group": "stripe",
            "class": "dead",
            "custom_details": {
                "what": "opened",
                "alert_id": "al_stripe",
                "count": 3,
                "first_seen": "2026-01-02T03:04:05Z",
                "last_seen": "2026-01-02T03:09:05Z",
                "link": "https://hookd.example.com/admin/alerts/al_stripe",
            },
        },
        "links": [
            {
                "href": "https://hookd.example.com/admin/alerts/al_stripe",
                "text": "evidence in hookd",
            }
        ],
    }
    assert second["dedup_key"] == "dead:github"


async def test_pagerduty_reminders_retrigger_and_resolutions_resolve_the_same_incident(
    pagerduty: tuple[PagerDutyEmulator, NotifyConfig],
) -> None:
    emulator, cfg = pagerduty
    await send(cfg, message(What.REMINDER))
    assert await send(cfg, message(What.RESOLVED)) == "202 success; Event processed"
    await send(cfg, message(What.TEST))
    actions = [(e["event_action"], e["dedup_key"]) for e in emulator.received]
    assert actions == [
        ("trigger", "dead:stripe"),
        ("resolve", "dead:stripe"),
        ("trigger", "dead:stripe"),  # a test opens an incident and closes it at once
        ("resolve", "dead:stripe"),
    ]
    assert emulator.received[1] == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": "dead:stripe",
    }


async def test_a_long_summary_is_cut_to_pagerdutys_limit(
    pagerduty: tuple[PagerDutyEmulator, NotifyConfig],
) -> None:
    emulator, cfg = pagerduty
    await send(cfg, message(What.OPENED, alert(summary="y" * 5000)))
    summary = emulator.received[0]["payload"]["summary"]
    assert len(summary) == 1024
    assert summary.endswith("…")


async def test_an_invalid_event_is_permanent_and_the_routing_key_is_never_shown(
    pagerduty: tuple[PagerDutyEmulator, NotifyConfig],
) -> None:
    emulator, cfg = pagerduty
    short_key = ROUTING_KEY[:-1]
    error = await failure(cfg.model_copy(update={"routing_key": short_key}))
    assert error.permanent
    assert error.reason == (
        "127.0.0.1 answered 400 invalid event; Event object is invalid; Length of "
        "'routing_key' is incorrect (should be 32 characters)"
    )
    secrets_absent(error, short_key)
    assert emulator.received == []


@pytest.mark.parametrize(("status", "body"), [(429, ""), (500, "oops"), (502, "")])
async def test_pagerduty_throttling_and_outages_are_retryable(
    pagerduty: tuple[PagerDutyEmulator, NotifyConfig], status: int, body: str
) -> None:
    emulator, cfg = pagerduty
    emulator.failing.answer = (status, body)
    error = await failure(cfg)
    assert (error.reason, error.permanent) == (
        f"127.0.0.1 answered {status} {body}".rstrip(),
        False,
    )


# -- email ---------------------------------------------------------------------------


@pytest.fixture
def smtp(tmp_path: Path) -> Iterator[SmtpServer]:
    yield from smtp_server(tmp_path)


def mail_config(server: SmtpServer, **keys: Any) -> NotifyConfig:
    values: dict[str, Any] = {
        "smtp_url": f"smtp://{SMTP_USER}:{SMTP_PASSWORD}@127.0.0.1:{server.port}",
        "from": "hookd <hookd@alerts.example.com>",
        "to": ["ops@example.com", "Oncall <oncall@example.com>"],
        "ca_file": str(server.cert),
        "allow_insecure": False,
        **keys,
    }
    return config("email", **values)


async def test_email_goes_over_starttls_with_a_login(smtp: SmtpServer) -> None:
    receipt = await send(mail_config(smtp), message(What.OPENED, alert("stripe")))
    assert receipt == "250 accepted for 2 recipients"
    # The server requires STARTTLS before anything and a login only after it.
    [envelope] = smtp.mailbox.received
    assert envelope.mail_from == "hookd@alerts.example.com"
    assert envelope.rcpt_tos == ["ops@example.com", "oncall@example.com"]
    assert isinstance(envelope.content, bytes)
    mail = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert mail["Subject"] == "hookd opened: dead (stripe)"
    assert mail["Message-ID"] == "<msg_0001@alerts.example.com>"
    assert mail["From"] == "hookd <hookd@alerts.example.com>"
    assert mail["Auto-Submitted"] == "auto-generated"
    body = mail.get_body().get_content()
    assert "- stripe (critical): 3 events dead in the last hour" in body
    assert "evidence in hookd: https://hookd.example.com/admin/alerts/al_stripe" in body


async def test_a_wrong_password_is_permanent_and_never_shown(smtp: SmtpServer) -> None:
    wrong = "Wr0ng-password-here"
    url = f"smtp://{SMTP_USER}:{wrong}@127.0.0.1:{smtp.port}"
    error = await failure(mail_config(smtp, smtp_url=url))
    assert error.permanent
    assert error.reason == ("127.0.0.1 refused the login (535): check smtp_url's user and password")
    secrets_absent(error, wrong, SMTP_PASSWORD)
    assert smtp.mailbox.received == []


async def test_a_certificate_not_trusted_is_not_sent_to(smtp: SmtpServer) -> None:
    error = await failure(mail_config(smtp, ca_file=None))
    assert not error.permanent
    assert error.reason.startswith("127.0.0.1's certificate is not trusted (")
    assert error.reason.endswith("set ca_file to the certificate it presents, or its CA")
    secrets_absent(error, SMTP_PASSWORD)
    assert smtp.mailbox.received == []


@pytest.mark.parametrize(
    ("reply", "permanent"), [("554 5.6.0 rejected", True), ("451 4.3.0 try later", False)]
)
async def test_a_refused_message_is_sorted_by_its_smtp_code(
    smtp: SmtpServer, reply: str, permanent: bool
) -> None:
    smtp.mailbox.reply = reply
    error = await failure(mail_config(smtp))
    code = reply.split(maxsplit=1)[0]
    assert (error.reason, error.permanent) == (
        f"127.0.0.1 answered {code} (SMTPDataError)",
        permanent,
    )


async def test_a_server_without_starttls_is_never_spoken_to_in_plain_text(
    tmp_path: Path,
) -> None:
    for server in smtp_server(tmp_path, tls=False):
        error = await failure(mail_config(server))
        assert error.permanent
        assert error.reason == (
            "127.0.0.1 does not offer STARTTLS: use a server that does, or smtps://"
        )
        assert server.mailbox.received == []


async def test_email_over_implicit_tls(tmp_path: Path) -> None:
    for server in smtp_server(tmp_path, implicit=True):
        url = f"smtps://{SMTP_USER}:{SMTP_PASSWORD}@127.0.0.1:{server.port}"
        assert await send(mail_config(server, smtp_url=url), message()) == (
            "250 accepted for 2 recipients"
        )
        assert len(server.mailbox.received) == 1


async def test_no_smtp_server_is_retryable() -> None:
    cfg = NotifyConfig.model_validate(
        {
            "name": "ops",
            "kind": "email",
            "smtp_url": f"smtp://{SMTP_USER}:{SMTP_PASSWORD}@127.0.0.1:{free_port()}",
            "from": "hookd@example.com",
            "to": ["ops@example.com"],
        }
    )
    error = await failure(cfg)
    assert not error.permanent
    assert error.reason.startswith("cannot reach 127.0.0.1:")
    assert error.reason.endswith(": connection refused")
    secrets_absent(error, SMTP_PASSWORD)


# -- hookd notify test NAME ----------------------------------------------------------


@pytest.fixture
def peers(
    servers: emulator_servers.Servers,
) -> Iterator[tuple[SlackEmulator, PagerDutyEmulator, str, str]]:
    """Slack on the module's first server, PagerDuty on its second."""
    (api, api_url), (sink, sink_url) = servers
    slack_emulator, pd_emulator = SlackEmulator(), PagerDutyEmulator()
    api.app, sink.app = slack_emulator.app(), pd_emulator.app()
    yield slack_emulator, pd_emulator, api_url, sink_url
    api.app = sink.app = None


def sources_file(folder: Path, slack_url: str, pd_url: str, smtp: SmtpServer) -> Path:
    path = folder / "hookd.toml"
    path.write_text(
        f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_x"]

[[notify]]
name = "ops-slack"
kind = "slack"
url = "{slack_url}${{SLACK_TOKEN_PATH}}"
allow_insecure = true

[[notify]]
name = "ops-pd"
kind = "pagerduty"
url = "{pd_url}/v2/enqueue"
routing_key = "${{PD_ROUTING_KEY}}"
allow_insecure = true
min_severity = "critical"

[[notify]]
name = "ops-mail"
kind = "email"
smtp_url = "smtp://{SMTP_USER}:${{SMTP_PASSWORD}}@127.0.0.1:{smtp.port}"
from = "hookd@alerts.example.com"
to = ["ops@example.com"]
ca_file = "{smtp.cert.name}"
"""
    )
    return path


async def test_notify_test_sends_through_each_named_channel(
    peers: tuple[SlackEmulator, PagerDutyEmulator, str, str], smtp: SmtpServer, tmp_path: Path
) -> None:
    slack_emulator, pd_emulator, slack_url, pd_url = peers
    path = sources_file(smtp.cert.parent, slack_url, pd_url, smtp)
    env = {
        "HOOKD_CONFIG": str(path),
        "HOOKD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'none.db'}",
        "SLACK_TOKEN_PATH": SLACK_TOKEN_PATH,
        "PD_ROUTING_KEY": ROUTING_KEY,
        "SMTP_PASSWORD": SMTP_PASSWORD,
    }

    code, out, err = await hookd_async(env, "notify", "test", "ops-slack")
    assert (code, out, err) == (0, "sent to ops-slack (slack): 200 ok\n", "")
    [payload] = slack_emulator.received
    assert payload["text"] == "hookd test: dead (test) [warning]"
    assert "This is a test from `hookd notify test`" in payload["blocks"][1]["text"]["text"]

    code, out, err = await hookd_async(env, "notify", "test", "ops-pd")
    assert (code, err) == (0, "")
    assert out == "sent to ops-pd (pagerduty): 202 success; Event processed (2 events)\n"
    assert [e["event_action"] for e in pd_emulator.received] == ["trigger", "resolve"]
    assert pd_emulator.received[0]["payload"]["severity"] == "critical"  # its min_severity

    code, out, err = await hookd_async(env, "notify", "test", "ops-mail")
    assert (code, out, err) == (0, "sent to ops-mail (email): 250 accepted for 1 recipient\n", "")
    [envelope] = smtp.mailbox.received
    assert b"Subject: hookd test: dead (test)" in envelope.content

    # Refused: exit 1, one line, what the channel said, and no token.
    slack_emulator.failing.answer = (404, "no_service")
    code, out, err = await hookd_async(env, "notify", "test", "ops-slack")
    assert (code, out) == (1, "")
    assert err == (
        "hookd: not sent to ops-slack (slack): 127.0.0.1 answered 404 no_service; sending "
        "again will not help: check the [[notify]] table\n"
    )
    pd_emulator.failing.answer = (429, "")
    code, out, err = await hookd_async(env, "notify", "test", "ops-pd")
    assert (code, err) == (
        1,
        "hookd: not sent to ops-pd (pagerduty): 127.0.0.1 answered 429; a later try may succeed\n",
    )
    assert SLACK_TOKEN not in err
    assert ROUTING_KEY not in err

    # No such channel: exit 2, the names there are.
    code, out, err = await hookd_async(env, "notify", "test", "ops-sms")
    assert (code, out) == (2, "")
    assert err.rstrip("\n").splitlines()[-1] == (
        f"hookd: {path}: no [[notify]] channel named 'ops-sms' (known: ops-slack, ops-pd, ops-mail)"
    )
