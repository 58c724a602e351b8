"""``hookd rejected list``: the refused requests on record, newest first, as the API
and the admin UI list them (``hookd.ops.rejected``): names and safe inputs, never a
body."""

from __future__ import annotations

import argparse
import json

from hookd.cli.context import database
from hookd.cli.events import print_table
from hookd.cli.parser import EXIT_OK
from hookd.settings import Settings

COLUMNS = ("id", "received_at", "source", "reason", "status_code", "client", "content_type")


async def cmd_rejected(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.ops.rejected import RejectedOps

    async with database(settings) as engine:
        found = await RejectedOps(engine).list(
            source=args.source, reason=args.reason, limit=args.limit
        )
    rows = [r.answer() for r in found.rejected]
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print_table(rows, COLUMNS)
    return EXIT_OK
