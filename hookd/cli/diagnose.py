"""``hookd diagnose SOURCE``: what is most likely wrong with a source whose requests are
refused, read from its rejected requests of the last day (``hookd.ops.diagnose``).
Exit status 0 when nothing is refused, 1 when something is (each cause on a line)."""

from __future__ import annotations

import argparse
import json

from hookd.cli.context import database
from hookd.cli.parser import EXIT_FAIL, EXIT_OK
from hookd.settings import Settings
from hookd.sources import Sources


async def cmd_diagnose(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.errors import NotFound
    from hookd.logs import say
    from hookd.ops.diagnose import DiagnoseOps
    from store.crypto import BodyCipher

    async with database(settings) as engine:
        ops = DiagnoseOps(engine, sources, BodyCipher(settings.encryption_keys))
        try:
            found = await ops.diagnose(args.source)
        except NotFound:
            names = ", ".join(s.name for s in sources) or "none"
            say(f"diagnose: no source named {args.source!r} (configured: {names})")
            return EXIT_FAIL
    if args.json:
        print(
            json.dumps(
                {
                    "source": found.source,
                    "refused": found.looked_at,
                    "causes": [
                        {"cause": c.cause, "requests": c.count, "said": c.said} for c in found.clues
                    ],
                }
            )
        )
    elif not found.clues:
        print(f"{found.source}: no request refused in the last day; nothing looks wrong")
    else:
        print(f"{found.source}: {found.looked_at} requests refused in the last day")
        for clue in found.clues:
            print(f"- {clue.line()}")
    return EXIT_OK if not found.clues else EXIT_FAIL
