"""The commands on stored events: ``hookd events list|show``, ``hookd wait`` and
``hookd replay``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import exc as sa_exc

from hookd.cli.context import database, nothing_to_wake, waking
from hookd.cli.parser import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_WAIT_DEAD,
    EXIT_WAIT_TIMEOUT,
    EXIT_WAIT_UNKNOWN,
    REPLAY_FORMS,
)
from hookd.errors import ConfigError
from hookd.settings import Settings
from hookd.timefmt import iso_z
from store.status import RUNNABLE_STATUSES, EventStatus

if TYPE_CHECKING:
    from hookd.ops import EventOps
    from hookd.ops.models import HistoryEntry


async def cmd_events(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.errors import NotFound
    from hookd.ops import EventOps, EventQuery
    from store.crypto import BodyCipher

    async with database(settings) as engine:
        events = EventOps(engine, nothing_to_wake)
        if args.events_command == "list":
            # Checked by the options already, and --limit has no upper bound here.
            query = EventQuery(
                source=args.source, status=args.status, limit=args.limit, object=args.object
            )
            resources = [e.answer() for e in (await events.page(query)).events]
            if args.json:
                for res in resources:
                    print(json.dumps(res))
            elif args.object:  # one object's events: their versions say their order
                print_table(resources, (*EVENT_COLUMNS, "object_version"))
            else:
                print_table(resources)
            return EXIT_OK
        try:
            detail = await events.show(args.id, with_body=args.body)
        except NotFound as exc:
            print(f"hookd: {exc.said or f'no event {args.id}'}", file=sys.stderr)
            return EXIT_FAIL
        res = detail.resource.answer()
        res["headers"] = detail.headers
        if args.body:
            body = BodyCipher(settings.encryption_keys).open(
                detail.body or b"", detail.body_encrypted
            )
            res["body"] = body.decode("utf-8", "replace")
        if args.json:
            print(json.dumps(res))
        else:
            past = detail.resource.history
            del res["history"]
            width = max(len(k) for k in res)
            for key, value in res.items():
                shown = json.dumps(value) if isinstance(value, dict) else value
                print(f"{key.ljust(width)}  {'' if shown is None else shown}")
            print("history" + ("" if past else "  (nothing yet)"))
            due = detail.next_attempt_at if res["status"] in RUNNABLE_STATUSES else None
            for line in history_lines(past, due):
                print("  " + line)
        return EXIT_OK


def history_lines(
    entries: Sequence[HistoryEntry], next_attempt_at: datetime | None = None
) -> list[str]:
    """An event's history, oldest first, one line per attempt or replay. A ``retry``
    says when the next attempt came (the next one's start), or for the last entry when
    it is due (``next_attempt_at``, the event's own, while it waits)."""
    lines = []
    for i, e in enumerate(entries):
        if e.kind == "replay":
            who = e.via + (f" ({e.by})" if e.by else "")
            reset = f"{e.attempts_reset} attempt(s) reset"
            what = f"replay by {who}: was {e.status_before}, {reset}"
        else:
            parts = [f"attempt {e.attempt}: {e.outcome}"]
            took = "" if e.duration_s is None else f"took {e.duration_s * 1000:.1f} ms"
            on = f"on {e.worker}" if e.worker else ""
            if took or on:
                parts.append(" ".join(p for p in (took, on) if p))
            if e.outcome == "retry":
                parts.append(_next_attempt(entries[i + 1 :], next_attempt_at))
            if e.error:
                parts.append(f"error: {e.error}")
            what = "; ".join(p for p in parts if p)
        lines.append(f"{iso_z(e.at)}  {what}")
    return lines


def _next_attempt(later: Sequence[HistoryEntry], due: datetime | None) -> str:
    from hookd.ops.events import PARKED_FROM

    if later:
        following = later[0]
        return f"next attempt at {iso_z(following.at)}" if following.kind == "attempt" else ""
    if due is None:
        return ""
    if due >= PARKED_FROM:
        return "next attempt when its paused destination is resumed"
    return f"next attempt at {iso_z(due)}"


EVENT_COLUMNS = ("id", "source", "type", "status", "origin", "attempts", "received_at")


def print_table(
    resources: Sequence[Mapping[str, object]], columns: Sequence[str] = EVENT_COLUMNS
) -> None:
    rows = [[str(r[c] if r[c] is not None else "-") for c in columns] for r in resources]
    widths = [max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    if not rows:
        print("(none)")


async def cmd_wait(args: argparse.Namespace, settings: Settings) -> int:
    """Poll one event read-only until it is done or the monotonic deadline passes."""
    from hookd.ops import EventOps

    deadline = time.monotonic() + args.timeout
    status = "unknown"
    last_error: str | None = None
    source: str | None = None
    async with database(settings) as engine:
        events = EventOps(engine, nothing_to_wake)
        while True:
            try:
                row, gone = await events.whereabouts(args.id)
            except (OSError, ConnectionError, sa_exc.DBAPIError) as exc:
                status = f"unknown ({type(exc).__name__})"  # keep waiting: it may come back
            else:
                if gone is not None:  # done long ago: retention removed its row since
                    print(f"{args.id} {gone.final_status} ({gone.describe()})")
                    finished = (EventStatus.PROCESSED, EventStatus.SUPERSEDED)
                    return EXIT_OK if gone.final_status in finished else EXIT_WAIT_DEAD
                if row is None:
                    print(f"hookd: no event {args.id}", file=sys.stderr)
                    return EXIT_WAIT_UNKNOWN
                status, last_error, source = row.status, row.last_error, row.source
                if status in (EventStatus.PROCESSED, EventStatus.SUPERSEDED):
                    # superseded: not run, a newer event of its object was ([sources.order])
                    print(f"{args.id} {status}")
                    return EXIT_OK
                if status == EventStatus.DEAD:
                    print(f"{args.id} dead: {row.last_error or 'no error recorded'}")
                    return EXIT_WAIT_DEAD
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A retrying event says why, so the wait is not a blind one.
                why = f"; last error: {last_error}" if last_error else ""
                if source is not None:
                    why += await _paused_note(events, source)
                print(f"{args.id} {status}: not done after {args.timeout:g}s{why}")
                return EXIT_WAIT_TIMEOUT
            await asyncio.sleep(min(args.interval, remaining))


async def _paused_note(events: EventOps, source: str) -> str:
    """Why a waiting event of a paused source does not run; empty when it is not paused
    (or the database does not answer)."""
    try:
        pause = await events.source_pause(source)
    except (OSError, ConnectionError, sa_exc.DBAPIError):
        return ""
    if pause is None:
        return ""
    why = f": {pause.reason}" if pause.reason else ""
    return (
        f"; its source {source!r} is paused (since {iso_z(pause.changed_at)} by "
        f"{pause.changed_by}{why}): it runs after `hookd sources resume {source}`"
    )


async def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.ops import EventOps, cli_requester

    if bool(args.ids) == bool(args.source or args.status):
        raise ConfigError(f"usage: {' | '.join(REPLAY_FORMS)} (see hookd replay --help)")
    if not args.ids and not (args.source and args.status):
        raise ConfigError(
            "--source S alone selects nothing: add --status dead (its dead events) or "
            "--since TIME (a bulk replay of its events); see hookd replay --help"
        )
    async with database(settings) as engine, waking(settings) as wake:
        events = EventOps(engine, wake)
        # --status has the one choice "dead"; the source need not be in the sources file.
        by = cli_requester()
        done = await (
            events.replay_many(args.ids, by=by)
            if args.ids
            else events.replay_dead(args.source, by=by)
        )
        # Said before the wake-up's Redis is let go, which waits for the job to be sent.
        for event_id in done.unknown:
            print(f"hookd: no event {event_id}", file=sys.stderr)
        for event_id in done.ids:
            if event_id not in done.unknown:
                state = "replayed" if event_id in done.replayed else "skipped: being processed now"
                if event_id in done.body_pruned:
                    state = "skipped: its body was removed by the retention policy"
                if event_id in done.pruned:
                    state = "skipped: pruned by the retention policy"
                print(f"{event_id} {state}")
    return EXIT_FAIL if done.unknown else EXIT_OK
