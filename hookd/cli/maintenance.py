"""The commands that change the database as a whole: ``hookd db upgrade`` (the schema),
``hookd keys rotate`` (the encryption of every stored body) and ``hookd prune`` (the
retention policy)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from hookd.cli.context import database, database_warnings, warn
from hookd.cli.events import print_table
from hookd.cli.parser import EXIT_FAIL, EXIT_OK
from hookd.errors import ConfigError
from hookd.settings import Settings
from hookd.sources import Sources
from hookd.timefmt import iso_z, iso_z_or_none

if TYPE_CHECKING:
    from hookd.ops.maintenance import KeysRotated

# How far ahead of this machine's clock `hookd prune --as-of` may be: another
# machine's "now", a few seconds off.
AS_OF_TOLERANCE = timedelta(minutes=1)


def cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    """Unlike the other commands, no pre-flight check: this is what creates the SQLite
    file and brings an older schema to this version's. A database that holds other
    tables and no hookd schema is refused, unless ``--yes``."""
    from store import db, migrate

    migrate.check_target(settings.database_url, other_tables_ok=args.yes)
    migrate.upgrade(settings.database_url)
    print(
        f"hookd: database {db.describe(settings.database_url)} at schema "
        f"{migrate.head_revision(settings.database_url)}"
    )
    warn(asyncio.run(database_warnings(settings)))
    return EXIT_OK


async def cmd_keys_rotate(args: argparse.Namespace, settings: Settings) -> int:
    """Exit status 0: every stored body is under the first key; 1: bodies no key
    opens were skipped (or, with ``--stop-on-error``, the rotation stopped at one)."""
    from hookd.ops.maintenance import MaintenanceOps
    from store.crypto import BodyCipher

    cipher = BodyCipher(settings.encryption_keys)
    if not cipher.enabled:
        raise ConfigError(
            "environment: HOOKD_ENCRYPTION_KEYS: set the new key first, followed by the old ones"
        )
    async with database(settings) as engine:
        rotation = await MaintenanceOps(engine).rotate_keys(
            cipher, stop_on_error=args.stop_on_error
        )
    if rotation.stopped_at is not None:
        print(
            f"hookd: keys rotate: event {rotation.stopped_at}: no key in HOOKD_ENCRYPTION_KEYS "
            f"opens its body; stopped there ({_rotated(rotation)} before it); add the "
            "key it was stored with and run again, or run without --stop-on-error to "
            'skip such bodies (docs/operations.md, "Encryption keys")',
            file=sys.stderr,
        )
        return EXIT_FAIL
    done = rotation.done
    if not done.unopened:
        print(f"hookd: {_rotated(rotation)}; the other keys can now be removed")
        return EXIT_OK
    print(f"hookd: {_rotated(rotation)}")
    ids = ", ".join(done.unopened_ids)
    more = done.unopened - len(done.unopened_ids)
    if more:
        ids += f" and {more} more"
    body = "body" if done.unopened == 1 else "bodies"
    print(
        f"hookd: keys rotate: {done.unopened} {body} no key opens, left as they were: "
        f"ids {ids}; their events cannot be processed or replayed until the key they were "
        "stored with is back in HOOKD_ENCRYPTION_KEYS (docs/operations.md, "
        '"Encryption keys")',
        file=sys.stderr,
    )
    return EXIT_FAIL


def _rotated(rotation: KeysRotated) -> str:
    done = rotation.done
    return (
        f"{done.reencrypted} bodies re-encrypted, {done.encrypted} plain bodies encrypted "
        "with the first key"
    )


async def cmd_prune(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    """``hookd prune``: one pass of the retention policy, stopped cleanly (between two
    batches, its lease given back) by SIGTERM or SIGINT."""
    from hookd.ops import prune_sources
    from hookd.ops.maintenance import MaintenanceOps
    from store.ids import worker_id

    as_of = _as_of(args)
    if args.source is not None and sources.get(args.source) is None:
        raise ConfigError(f"{sources.path}: no source named {args.source!r}")
    stop = asyncio.Event()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        async with database(settings) as engine:
            done = await prune_sources(
                engine,
                sources,
                owner=worker_id(),
                now=as_of,
                dry_run=args.dry_run,
                only=args.source,
                stop=stop,
            )
            if done.lease_held:
                owner, until = await MaintenanceOps(engine).prune_lease_holder()
                print(
                    f"hookd: prune: another process is pruning ({owner}, its lease runs "
                    f"until {iso_z_or_none(until)}); nothing done",
                    file=sys.stderr,
                )
                return EXIT_OK
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    rows = [
        {
            "source": source,
            **counts.as_dict(),
            "as_of": iso_z(as_of),
            "dry_run": bool(args.dry_run),
        }
        for source, counts in done.counts.items()
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        if done.partitioned:
            print(
                json.dumps(
                    {
                        "partitions_dropped": done.partitions_dropped,
                        "partitions_kept": done.partitions_kept,
                        "partitions_compacted": done.partitions_compacted,
                        "as_of": iso_z(as_of),
                        "dry_run": bool(args.dry_run),
                    }
                )
            )
    else:
        print_table(rows, ("source", "body", "event", "key", "run", "rejected"))
        if done.partitioned:
            print(
                _partitions_line(
                    done.partitions_dropped,
                    done.partitions_kept,
                    args.dry_run,
                    compacted=done.partitions_compacted,
                )
            )
        what = "would be removed (dry run: nothing changed)" if args.dry_run else "removed"
        print(f"as of {iso_z(as_of)}: {what}")
    if received:
        print(
            f"hookd: prune interrupted by {received[0].name}: stopped after the batch in "
            "progress; run it again to go on",
            file=sys.stderr,
        )
        return 128 + received[0].value
    return EXIT_OK


def _as_of(args: argparse.Namespace) -> datetime:
    """``--as-of`` (default: now); a time ahead of now is refused unless ``--dry-run``."""
    from hookd.errors import BadRequest
    from hookd.ops import parse_as_of

    now = datetime.now(UTC)
    try:
        as_of = now if args.as_of is None else parse_as_of(args.as_of)
    except BadRequest as exc:
        raise ConfigError(f"prune: --as-of: {exc.detail}") from None
    if as_of > now + AS_OF_TOLERANCE and not args.dry_run:
        # A time ahead would really delete what the policy still keeps today; counting
        # what it would remove (--dry-run) changes nothing.
        raise ConfigError(
            f"prune: --as-of: {iso_z(as_of)} is in the future (now {iso_z(now)}): it would "
            "delete what the retention policy still keeps; give a past time, leave --as-of "
            "out to prune as of now, or add --dry-run to count what that time would remove"
        )
    return as_of


def _partitions_line(
    dropped: list[str], kept: dict[str, str], dry_run: bool, *, compacted: list[str]
) -> str:
    """What became of the day partitions of ``events`` (PostgreSQL): those dropped
    whole (their events are counted in EVENT above), how many past ones stay, and of
    those, which were rebuilt with only the events they still keep."""
    verb = "would be dropped" if dry_run else "dropped"
    line = f"partitions {verb}: {len(dropped)}"
    if dropped:
        line += f" ({', '.join(dropped)})"
    if kept:
        line += f"; {len(kept)} past ones kept: they hold events still kept (--json says why)"
    if compacted:
        line += (
            f"; {len(compacted)} of them {'would be ' if dry_run else ''}compacted to those "
            f"events ({', '.join(compacted)})"
        )
    return line
