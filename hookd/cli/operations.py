"""Bulk operations on the command line: ``hookd replay --since …`` (a replay by
filter) and ``hookd operations list|show|cancel``.

Without ``--wait`` a bulk replay is recorded and left to the runners of ``hookd
serve`` and ``hookd worker`` (one takes it within seconds); with ``--wait`` this
command runs it itself and prints its progress. Either way it is one operation,
shown by ``hookd operations`` and the API, and resumed by another process if this
one is stopped or killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hookd.cli.context import database, waking
from hookd.cli.parser import BULK_REPLAY_OPTIONS, EXIT_FAIL, EXIT_OK
from hookd.cli.trial import parse_since
from hookd.errors import ConfigError
from hookd.settings import Settings
from hookd.sources import Sources, load_sources
from hookd.timefmt import iso_z
from store.status import EventStatus

if TYPE_CHECKING:
    from hookd.ops import OperationOps
    from hookd.ops.models import Operation

# How often `--wait` prints the progress of an operation.
PROGRESS_EVERY_S = 1.0


def bulk_replay_asked(args: argparse.Namespace) -> bool:
    """A replay by filter: any bulk option, or a status other than the one
    ``--source S --status dead`` has always taken."""
    given = any(getattr(args, name) is not None for name in BULK_REPLAY_OPTIONS)
    return given or args.dry_run or args.wait or args.status not in (None, EventStatus.DEAD)


def _filter(args: argparse.Namespace, now: datetime) -> dict[str, str]:
    if args.ids:
        raise ConfigError("give EVENT_IDs or a filter (--since …), not both")
    if args.since is None:
        raise ConfigError(
            "a bulk replay needs --since (--since 0 takes every stored event); see "
            "`hookd replay --help`"
        )
    since = parse_since(args.since, now)
    until = parse_since(args.until, now, "--until") if args.until is not None else None
    raw = {
        "source": args.source,
        "destination": args.destination,
        "status": args.status,
        "type": args.type,
        "origin": args.origin,
        "since": iso_z(since),
        "until": None if until is None else iso_z(until),
        "object": args.object,
    }
    return {k: v for k, v in raw.items() if v is not None}


def _sources(settings: Settings, needed: bool) -> Sources:
    """The sources file, when the filter names a destination (only it says which
    sources have one); otherwise none is needed."""
    if needed:
        return load_sources(settings.config)
    return Sources(path=settings.config, by_name={})


def progress_line(op: Operation) -> str:
    p = op.progress
    line = (
        f"{op.name} {op.action} {op.status}: {p.done} of {p.total} events gone "
        f"over, {p.changed} changed, {p.skipped} skipped"
    )
    if op.error is not None:
        line += f" ({op.error.message})"
    return line


async def cmd_bulk_replay(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.errors import BadRequest
    from hookd.ops import EventOps, OperationFilter, OperationRequest
    from hookd.runtime.operations import operations_of
    from store.status import OperationAction

    raw = _filter(args, datetime.now(UTC))
    sources = _sources(settings, args.destination is not None)
    async with database(settings) as engine, waking(settings) as wake:
        ops = operations_of(settings, engine, sources, EventOps(engine, wake))
        try:
            asked = OperationRequest(
                OperationAction.REPLAY, OperationFilter.parse(raw), dry_run=args.dry_run
            )
            started = await ops.create(asked, trigger="cli")
        except BadRequest as exc:
            raise ConfigError(f"--{exc.field.replace('_', '-')}: {exc.detail}") from None
        op = started.operation
        total = op.progress.total
        if args.dry_run:
            print(f"dry run: {total} event(s) would be replayed; nothing changed")
            return EXIT_OK
        print(f"{op.name}: replay of {total} event(s) (estimate) asked")
        if not args.wait:
            print(
                f"hookd serve or hookd worker runs it; follow it with "
                f"`hookd operations show {op.id}`"
            )
            return EXIT_OK
        final = await _run_here(ops, op.id)
    print(progress_line(final))
    return EXIT_OK if final.status == "succeeded" else EXIT_FAIL


async def _run_here(ops: OperationOps, operation_id: str) -> Operation:
    """Run the operation in this process (or, when another runner holds it, follow it),
    printing its progress every ``PROGRESS_EVERY_S``; the operation as it ended.
    Interrupted (Ctrl-C), the runner gives its lease back and another process resumes."""
    runner = asyncio.create_task(ops.run(operation_id))
    while True:
        if runner.done():  # another runner holds it, or took it over: follow it
            await asyncio.sleep(PROGRESS_EVERY_S)
        else:
            await asyncio.wait({runner}, timeout=PROGRESS_EVERY_S)
        op = await ops.get(operation_id)
        if op.done:
            await runner
            return op
        print(progress_line(op), flush=True)


async def cmd_operations(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.cli.context import nothing_to_wake
    from hookd.errors import BadRequest, Conflict, NotFound
    from hookd.ops import EventOps
    from hookd.runtime.operations import operations_of

    async with database(settings) as engine:
        # Listing, showing and cancelling replay nothing: no sources, nothing to wake.
        events = EventOps(engine, nothing_to_wake)
        ops = operations_of(settings, engine, _sources(settings, False), events)
        try:
            if args.operations_command == "list":
                page = await ops.page({"limit": str(min(args.limit, 500))})
                _print_list([op.answer() for op in page.operations], as_json=args.json)
                return EXIT_OK
            if args.operations_command == "show":
                op = await ops.get(args.id)
            else:
                op = await ops.cancel(args.id)
        except NotFound:
            print(f"hookd: no operation {args.id}", file=sys.stderr)
            return EXIT_FAIL
        except (Conflict, BadRequest) as exc:
            print(f"hookd: operation {args.id}: {exc.detail}", file=sys.stderr)
            return EXIT_FAIL
    if args.json:
        print(json.dumps(op.answer()))
    elif args.operations_command == "cancel" and not op.done:
        print(f"{progress_line(op)}; asked to stop: it does at its next batch")
    else:
        print(progress_line(op))
        if args.operations_command == "show":
            _print_fields(op.answer())
    return EXIT_OK


def _print_fields(op: Mapping[str, Any]) -> None:
    shown = {k: v for k, v in op["filter"].items() if v is not None}
    fields = {
        "request_id": op["request_id"],
        "trigger": op["trigger"],
        "dry_run": op["dry_run"],
        "filter": json.dumps(shown),
        "created_at": op["created_at"],
        "started_at": op["started_at"],
        "finished_at": op["finished_at"],
        "cancel_requested_at": op["cancel_requested_at"],
    }
    width = max(len(k) for k in fields)
    for key, value in fields.items():
        print(f"  {key.ljust(width)}  {'' if value is None else value}")


def _print_list(found: list[Mapping[str, Any]], *, as_json: bool) -> None:
    if as_json:
        for op in found:
            print(json.dumps(op))
        return
    from hookd.cli.events import print_table

    rows = [
        {
            "id": op["id"],
            "action": op["action"] + (" (dry run)" if op["dry_run"] else ""),
            "status": op["status"],
            "progress": f"{op['progress']['done']}/{op['progress']['total']}",
            "changed": op["progress"]["changed"],
            "trigger": op["trigger"],
            "created_at": op["created_at"],
        }
        for op in found
    ]
    print_table(rows, ("id", "action", "status", "progress", "changed", "trigger", "created_at"))
