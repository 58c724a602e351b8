"""What each kind of channel is sent for a message: Slack's blocks, the signed webhook's
JSON, PagerDuty's Events API v2 events, an email's text. Pure: no I/O, no clock but
the ``now`` handed in, no secret (the channels add the routing key and sign).

Everything shown comes from the message's items, which hold no payload and no secret;
it is still escaped for where it goes (Slack's mrkdwn, email headers).
"""

from __future__ import annotations

import re
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from hookd.notify.message import AlertItem, Message, What
from hookd.timefmt import iso_z

# Slack's documented limits: 50 blocks a message, 3000 characters a section's text, 150
# a header's; room is kept for the header and the "and N more" line.
SLACK_MAX_ITEMS = 45
SLACK_SECTION_CHARS = 3000
SLACK_HEADER_CHARS = 150
# PagerDuty's payload.summary is at most 1024 characters.
PAGERDUTY_SUMMARY_CHARS = 1024
# The link text a message shows for an alert's evidence.
EVIDENCE = "evidence in hookd"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def one_line(text: str) -> str:
    """``text`` without control characters (a newline in a key would break a header or
    a log line): each run of them becomes a space."""
    return _CONTROL.sub(" ", text).strip()


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _absolute(link: str) -> bool:
    return link.startswith(("https://", "http://")) and not re.search(r"[\s<>|]", link)


def _seen(item: AlertItem) -> str:
    return f"first seen {iso_z(item.first_seen)}, last seen {iso_z(item.last_seen)}"


def _count(item: AlertItem) -> str:
    return "found once" if item.count == 1 else f"found {item.count} times"


# -- Slack ---------------------------------------------------------------------------


def _mrkdwn(text: str) -> str:
    """Text as Slack's mrkdwn shows it literally: its three control characters escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(message: Message) -> dict[str, Any]:
    """An incoming webhook's JSON: ``text`` (the notification's own words, and what
    clients without blocks show) and ``blocks``: a header, then one section per alert."""
    title = one_line(message.title)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": cut(title, SLACK_HEADER_CHARS)}}
    ]
    for item in message.items[:SLACK_MAX_ITEMS]:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": cut(_slack_item(item), SLACK_SECTION_CHARS)},
            }
        )
    more = len(message.items) - SLACK_MAX_ITEMS
    if more > 0:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"and {more} more: see hookd's admin UI"}],
            }
        )
    return {"text": f"{title} [{message.severity.value}]", "blocks": blocks}


def _slack_item(item: AlertItem) -> str:
    key = _mrkdwn(one_line(item.key))
    link = one_line(item.link)
    shown = f"<{link}|{EVIDENCE}>" if _absolute(link) else f"{EVIDENCE}: {_mrkdwn(link)}"
    return (
        f"*{key}* ({item.severity.value}): {_mrkdwn(one_line(item.summary))}\n"
        f"{_count(item)}; {_seen(item)}\n{shown}"
    )


# -- the signed webhook --------------------------------------------------------------


def webhook_payload(message: Message, now: datetime) -> dict[str, Any]:
    """Standard Webhooks' shape: ``type``, ``timestamp`` and ``data``."""
    return {
        "type": f"hookd.alert.{message.what.value}",
        "timestamp": iso_z(now),
        "data": {
            "id": message.id,
            "what": message.what.value,
            "kind": message.kind,
            "severity": message.severity.value,
            "title": message.title,
            "items": [_item_json(item) for item in message.items],
        },
    }


def _item_json(item: AlertItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "kind": item.kind,
        "key": item.key,
        "source": item.source,
        "severity": item.severity.value,
        "summary": item.summary,
        "link": item.link,
        "first_seen": iso_z(item.first_seen),
        "last_seen": iso_z(item.last_seen),
        "count": item.count,
    }


# -- PagerDuty -----------------------------------------------------------------------


def dedup_key(item: AlertItem) -> str:
    """One PagerDuty incident per alert, whatever message carries it: a reminder
    triggers the same incident again, a resolution resolves it."""
    return f"{item.kind}:{item.key}"


def pagerduty_events(message: Message) -> list[dict[str, Any]]:
    """Events API v2 events, one per alert, without the routing key (the channel adds
    it). A test triggers an incident and resolves it at once."""
    events = []
    for item in message.items:
        if message.what != What.RESOLVED:
            events.append(_trigger(message, item))
        if message.what in (What.RESOLVED, What.TEST):
            events.append({"event_action": "resolve", "dedup_key": dedup_key(item)})
    return events


def _trigger(message: Message, item: AlertItem) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_action": "trigger",
        "dedup_key": dedup_key(item),
        "payload": {
            "summary": cut(
                one_line(f"{item.kind} {item.key}: {item.summary}"), PAGERDUTY_SUMMARY_CHARS
            ),
            "source": "hookd",
            "severity": item.severity.value,  # PagerDuty's words include hookd's three
            "component": item.key,
            "group": item.source or "hookd",
            "class": item.kind,
            "custom_details": {
                "what": message.what.value,
                "alert_id": item.id,
                "count": item.count,
                "first_seen": iso_z(item.first_seen),
                "last_seen": iso_z(item.last_seen),
                "link": item.link,
            },
        },
    }
    link = one_line(item.link)
    if _absolute(link):
        event["links"] = [{"href": link, "text": EVIDENCE}]
    return event


# -- email ---------------------------------------------------------------------------


def email_text(message: Message) -> str:
    """The plain-text body: what happened, then each alert."""
    lines = [one_line(message.title), ""]
    for item in message.items:
        lines += [
            f"- {one_line(item.key)} ({item.severity.value}): {one_line(item.summary)}",
            f"  {_count(item)}; {_seen(item)}",
            f"  {EVIDENCE}: {one_line(item.link)}",
            "",
        ]
    if message.what == What.TEST:
        lines.append("This is a test, sent by `hookd notify test`: nothing is wrong.")
    else:
        lines.append("Sent by hookd: the alerts are listed in its admin UI.")
    return "\n".join(lines) + "\n"


def message_id(message: Message, domain: str) -> str:
    """The Message-ID, from the message's id (stable across retries: a mail system
    that sees it twice can drop the second)."""
    left = re.sub(r"[^A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]", "-", message.id).strip(".") or "hookd"
    right = re.sub(r"[^A-Za-z0-9.-]", "-", domain) or "hookd.invalid"
    return f"<{left}@{right}>"


def email_message(
    message: Message, sender: str, to: tuple[str, ...], domain: str, now: datetime
) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = ", ".join(to)
    mail["Subject"] = one_line(message.title)
    mail["Date"] = format_datetime(now)
    mail["Message-ID"] = message_id(message, domain)
    # RFC 3834: an automatic message; auto-responders do not answer it.
    mail["Auto-Submitted"] = "auto-generated"
    mail["X-Hookd-Alert"] = f"{message.what.value} {one_line(message.kind)}"
    mail.set_content(email_text(message))
    return mail
