"""``hookd try HANDLER EVENT_ID``: run a handler on stored events and say what it did,
recording nothing (``processing.trial``).

Exit status 0 when every run returned, 1 when one raised or ran out of time, 2 for
bad input (no such event, a handler that cannot be imported, options that do not go
together), as one ``hookd: ...`` line.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hookd.cli.context import database, nothing_to_wake
from hookd.cli.parser import EXIT_FAIL, EXIT_OK
from hookd.errors import ConfigError
from hookd.settings import Settings

if TYPE_CHECKING:
    from processing.trial import Trial

# The longest return value shown, in characters of its repr.
SHOWN_VALUE_CHARS = 500
_AGO_RE = re.compile(r"([0-9]{1,9})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(raw: str, now: datetime, option: str = "--since") -> datetime:
    """``--since`` (or ``option``): ISO 8601 (UTC unless it says otherwise), unix
    seconds, or a time ago (``90m``, ``24h``, ``7d``)."""
    text = raw.strip()
    ago = _AGO_RE.fullmatch(text)
    if ago is not None:
        return now - timedelta(seconds=int(ago.group(1)) * _UNIT_S[ago.group(2)])
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{option} {raw!r}: not a time; use ISO 8601 (2027-01-31T00:00:00Z), unix "
            "seconds, or a time ago such as 90m, 24h or 7d"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def check_args(args: argparse.Namespace) -> None:
    """The options go together, or one line saying which do not."""
    if ":" not in args.handler or args.handler.startswith(":") or args.handler.endswith(":"):
        raise ConfigError(
            f"HANDLER {args.handler!r}: name it module:function, as in the sources file's "
            "handlers (e.g. myapp.hooks:on_push)"
        )
    if args.all and args.id is not None:
        raise ConfigError("give an EVENT_ID or --all, not both")
    if not args.all and args.id is None:
        raise ConfigError("give an EVENT_ID, or --all to try the handler on stored events")
    if not args.all:
        given = [
            flag
            for flag, value in (
                ("--source", args.source),
                ("--type", args.type),
                ("--since", args.since),
                ("--limit", args.limit),
            )
            if value is not None
        ]
        if given:
            raise ConfigError(f"{', '.join(given)} only go with --all")


def _shown(value: Any) -> str:
    text = repr(value)
    if len(text) > SHOWN_VALUE_CHARS:
        text = text[:SHOWN_VALUE_CHARS] + f"… ({len(text)} characters)"
    return text


async def cmd_try(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.errors import NotFound
    from hookd.ops import EventOps
    from processing.handlers import import_handler
    from processing.trial import try_handler
    from store.crypto import BodyCipher

    check_args(args)
    since = parse_since(args.since, datetime.now(UTC)) if args.since is not None else None
    handler = import_handler(args.handler)
    cipher = BodyCipher(settings.encryption_keys)
    async with database(settings) as engine:
        events = EventOps(engine, nothing_to_wake)
        if args.all:
            rows = await events.sample(
                source=args.source, type_glob=args.type, since=since, limit=args.limit or 10
            )
        else:
            try:
                row = await events.stored(args.id)
            except NotFound as exc:  # retention removed it since: that says when
                raise ConfigError(exc.said or f"no such event: {args.id}") from None
            if row.body is None:
                raise ConfigError(
                    f"event {args.id} has no body: the retention policy removed it "
                    "(keep_body_days), so no handler can run on it"
                )
            rows = [row]
    # Only read: the connection is closed before any handler runs.
    if not rows:
        print("no stored event matches; nothing tried")
        return EXIT_OK
    failed = 0
    for row in rows:
        try:
            body = cipher.open(row.body or b"", row.body_encrypted)
        except ConfigError as exc:
            if not args.all:
                raise
            print(f"event {row.id}: skipped: {exc}")
            continue
        trial = await try_handler(handler, args.handler, row, body, settings.handler_timeout_s)
        failed += 0 if trial.ok else 1
        head = (
            f"event {row.id} ({row.source}, type {row.type or '-'}, {row.status}, "
            f"{row.attempts} attempt(s))"
        )
        print(_described(head, trial, settings.handler_timeout_s))
    if args.all:
        print(f"{len(rows)} event(s) tried: {len(rows) - failed} returned, {failed} raised")
    return EXIT_OK if failed == 0 else EXIT_FAIL


def _described(head: str, trial: Trial, timeout_s: float) -> str:
    """What one run did, under ``head`` (the event tried)."""
    took = f"{trial.seconds * 1000:.2f} ms"
    if trial.timed_out:
        return f"{head}\n  did not finish within {timeout_s:g}s (HOOKD_HANDLER_TIMEOUT_S)"
    if trial.ok:
        return f"{head}\n  returned in {took}: {_shown(trial.value)}"
    kind = type(trial.error).__name__
    note = " (permanent: processing would make the event dead at once)" if trial.permanent else ""
    lines = [f"{head}\n  raised {kind} after {took}{note}: {trial.error}"]
    lines.extend("  " + line for line in trial.traceback.rstrip().splitlines())
    return "\n".join(lines)
