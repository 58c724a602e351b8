"""``hookd sources pause|resume NAME`` and ``hookd destinations list|pause|resume``."""

from __future__ import annotations

import argparse
import json

from hookd.cli.context import database, waking
from hookd.cli.events import print_table
from hookd.cli.parser import EXIT_OK
from hookd.errors import BadRequest, ConfigError, NotFound
from hookd.settings import Settings
from hookd.sources import Sources


async def cmd_source_pause(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    """Pause or resume a source's processing; resuming wakes the workers."""
    from hookd.ops.destinations import DestinationOps
    from hookd.ops.sources import cli_actor

    async with database(settings) as engine, waking(settings) as wake:
        ops = DestinationOps(engine, sources, wake)
        try:
            if args.sources_command == "pause":
                changed = await ops.pause_source(args.name, by=cli_actor(), reason=args.reason)
            else:
                changed = await ops.resume_source(args.name, by=cli_actor())
        except NotFound:
            raise ConfigError(f"{sources.path}: no source named {args.name!r}") from None
        except BadRequest as exc:
            raise ConfigError(f"--reason: {exc.detail}") from None
    done = "paused" if args.sources_command == "pause" else "resumed"
    print(f"{args.name}: processing {done}" if changed else f"{args.name}: already {done}")
    return EXIT_OK


async def cmd_destinations(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.ops.destinations import DestinationOps
    from hookd.ops.sources import cli_actor

    async with database(settings) as engine, waking(settings) as wake:
        ops = DestinationOps(engine, sources, wake)
        if args.destinations_command == "list":
            try:
                found = await ops.list(args.source)
            except NotFound:
                raise ConfigError(f"{sources.path}: no source named {args.source!r}") from None
            return _print_list([d.answer() for d in found], args.json)
        try:
            source, name = ops.parse_target(args.target)
        except NotFound:
            raise ConfigError(
                f"{sources.path}: no destination {args.target!r}: write SOURCE/NAME, as "
                "`hookd destinations list` shows them"
            ) from None
        try:
            if args.destinations_command == "pause":
                changed = await ops.pause(source, name, by=cli_actor(), reason=args.reason)
            else:
                changed = await ops.resume(source, name, by=cli_actor())
        except BadRequest as exc:
            raise ConfigError(f"--reason: {exc.detail}") from None
    done = "paused" if args.destinations_command == "pause" else "resumed"
    print(f"{args.target}: {done}" if changed else f"{args.target}: already {done}")
    return EXIT_OK


def _print_list(found: list[dict[str, object]], as_json: bool) -> int:
    if as_json:
        for resource in found:
            print(json.dumps(resource))
        return EXIT_OK
    rows = []
    for d in found:
        breaker = d["breaker"]
        assert isinstance(breaker, dict)
        rows.append(
            {
                "destination": f"{d['source']}/{d['name']}",
                "paused": "yes" if d["paused"] else "no",
                "breaker": breaker["state"],
                "failures": breaker["failures"],
                "waiting": d["waiting"],
                "url": d["url"],
            }
        )
    print_table(rows, ("destination", "paused", "breaker", "failures", "waiting", "url"))
    return EXIT_OK
