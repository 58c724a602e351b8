"""``hookd notify test NAME``: a sample alert sent through one ``[[notify]]`` channel,
now, so that a new or changed channel is proven before an alert needs it."""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import UTC, datetime

import httpx

from hookd.cli.parser import EXIT_FAIL, EXIT_OK
from hookd.errors import ConfigError
from hookd.notify.channels import ChannelError, channel_for
from hookd.notify.message import AlertItem, Message, Severity, What
from hookd.settings import Settings
from hookd.sources import Sources
from hookd.sources.notify import NotifyConfig


def sample_message(config: NotifyConfig, now: datetime) -> Message:
    """One alert of kind ``dead`` that says it is a test, at the channel's lowest
    severity; a new id each time, so no receiver drops it as a repeat."""
    item = AlertItem(
        id="test",
        kind="dead",
        key="test",
        source=config.sources[0] if config.sources else None,
        severity=Severity(config.min_severity),
        summary="This is a test from `hookd notify test`: nothing is wrong.",
        link="/admin",
        first_seen=now,
        last_seen=now,
        count=1,
    )
    return Message(id=f"test-{uuid.uuid4().hex}", what=What.TEST, kind="dead", items=(item,))


async def cmd_notify(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    config = next((c for c in sources.notify if c.name == args.name), None)
    if config is None:
        known = ", ".join(c.name for c in sources.notify)
        said = f"known: {known}" if known else "none is configured: add a [[notify]] table"
        raise ConfigError(f"{sources.path}: no [[notify]] channel named {args.name!r} ({said})")
    message = sample_message(config, datetime.now(UTC))
    async with httpx.AsyncClient() as client:
        try:
            receipt = await channel_for(config, client).send(message)
        except ChannelError as exc:
            todo = (
                "sending again will not help: check the [[notify]] table"
                if exc.permanent
                else "a later try may succeed"
            )
            print(
                f"hookd: not sent to {config.name} ({config.kind}): {exc.reason}; {todo}",
                file=sys.stderr,
            )
            return EXIT_FAIL
    print(f"sent to {config.name} ({config.kind}): {receipt}")
    return EXIT_OK
