"""``hookd alerts list|show|ack|resolve``: the alerts, and what a person does with one,
as the API and the admin UI do it (``hookd.ops.alerts``), recorded as ``cli user:NAME``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from hookd.cli.context import database
from hookd.cli.events import print_table
from hookd.cli.parser import ALL_ALERTS, EXIT_FAIL, EXIT_OK
from hookd.settings import Settings
from hookd.sources import Sources

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from hookd.ops.alert_models import Alert
    from hookd.ops.alerts import AlertOps

ALERT_COLUMNS = ("id", "status", "severity", "kind", "key", "last_seen", "summary")
# What ack and resolve say they did.
DONE = {"ack": "acknowledged", "resolve": "resolved"}


def alert_ops(engine: AsyncEngine, sources: Sources) -> AlertOps:
    """The alerts' operations; a resolution by hand is told to the channels that heard
    of the alert."""
    from hookd.notify.outbox import route_for
    from hookd.ops.alerts import AlertOps

    return AlertOps(engine, route_for(sources), sources.alerts.group_s, sources.notify)


async def cmd_alerts(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.errors import Conflict, NotFound
    from hookd.ops.sources import cli_actor

    async with database(settings) as engine:
        ops = alert_ops(engine, sources)
        if args.alerts_command == "list":
            status = None if args.status == ALL_ALERTS else args.status
            found = await ops.list(
                status=status, kind=args.kind, source=args.source, limit=args.limit
            )
            _print_list(found.alerts, as_json=args.json)
            return EXIT_OK
        try:
            if args.alerts_command == "show":
                alert = await ops.get(args.id)
            elif args.alerts_command == "ack":
                alert = await ops.acknowledge(args.id, cli_actor())
            else:
                alert = await ops.resolve(args.id, cli_actor())
        except NotFound:
            print(f"hookd: no alert {args.id}", file=sys.stderr)
            return EXIT_FAIL
        except Conflict as exc:
            print(f"hookd: alert {args.id}: {exc.detail}", file=sys.stderr)
            return EXIT_FAIL
    if args.json:
        print(json.dumps(alert.answer()))
    elif args.alerts_command == "show":
        _print_fields(alert)
    else:
        print(f"{alert.id} {DONE[args.alerts_command]}: {alert.kind} {alert.key}")
    return EXIT_OK


def _print_list(alerts: list[Alert], *, as_json: bool) -> None:
    if as_json:
        for alert in alerts:
            print(json.dumps(alert.answer()))
        return
    print_table([a.answer() for a in alerts], ALERT_COLUMNS)


def _print_fields(alert: Alert) -> None:
    fields = alert.answer()
    width = max(len(k) for k in fields)
    for key, value in fields.items():
        print(f"{key.ljust(width)}  {'' if value is None else value}")
