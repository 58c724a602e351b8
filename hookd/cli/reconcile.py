"""``hookd reconcile`` (one pass now, stopped cleanly by SIGTERM or SIGINT) and
``hookd sources list|enable``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx

from hookd.cli.context import database, waking
from hookd.cli.events import print_table
from hookd.cli.parser import EXIT_FAIL, EXIT_OK, LEASE_WAIT_S
from hookd.errors import ConfigError
from hookd.settings import Settings
from hookd.sources import Sources
from store.status import RunStatus, RunTrigger

if TYPE_CHECKING:
    from reconcile.poller import Reconciler


async def cmd_reconcile(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.errors import Conflict, NotFound
    from hookd.ops import RunOps, SourceOps
    from reconcile.poller import Reconciler
    from store.crypto import BodyCipher

    failed = 0
    async with database(settings) as engine, waking(settings) as wake:
        source_ops = SourceOps(engine, sources)
        chosen = []
        for name in args.sources:
            try:
                chosen.append(source_ops.reconcilable(name))
            except NotFound:
                raise ConfigError(f"{sources.path}: no source named {name!r}") from None
            except Conflict:
                raise ConfigError(
                    f"{sources.path}: source {name!r}: no [sources.reconcile] table"
                ) from None
        chosen = chosen or source_ops.reconciled()
        if not chosen:
            raise ConfigError(f"{sources.path}: no source has a [sources.reconcile] table")
        async with httpx.AsyncClient() as client:
            reconciler = Reconciler(
                engine,
                client,
                BodyCipher(settings.encryption_keys),
                on_repaired=lambda _ids: wake(),
                lease_s=settings.reconcile_lease_s,
            )
            run_ops = RunOps(reconciler, source_ops)
            with stop_on_signals(reconciler) as received:
                try:
                    for source in chosen:
                        outcome = await run_ops.run(
                            source,
                            trigger=RunTrigger.CLI,
                            dry_run=args.dry_run,
                            wait_for_lease_s=LEASE_WAIT_S if args.wait else 0.0,
                        )
                        print(describe_outcome(outcome, args.dry_run), flush=True)
                        failed += outcome.status in (RunStatus.FAILED, "disabled")
                except asyncio.CancelledError:
                    if not received:
                        raise
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()
                    runs = ", ".join(reconciler.interrupted)
                    print(
                        f"hookd: reconcile {reconciler.interrupt_reason}; "
                        + (
                            f"run {runs} recorded as failed (the next run starts over from "
                            "the same cursor)"
                            if runs
                            else "no run was in progress to record"
                        ),
                        file=sys.stderr,
                    )
                    return 128 + received[0].value
    return EXIT_FAIL if failed else EXIT_OK


@contextlib.contextmanager
def stop_on_signals(reconciler: Reconciler) -> Iterator[list[signal.Signals]]:
    """SIGTERM (a CronJob's deadline, ``systemctl stop``) or SIGINT cancels the run in
    progress, which records itself failed with the signal's name instead of staying
    ``running``; the list says which signal came."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        # Cancel once: a second signal must not cut short the run's record of its end.
        if not received:
            received.append(sig)
            reconciler.interrupt_reason = f"interrupted by {sig.name}"
            task.cancel()

    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield received
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def describe_outcome(outcome: Any, dry_run: bool) -> str:
    head = f"{outcome.source}: {outcome.status}"
    if outcome.status == RunStatus.LEASE_HELD:
        return f"{head} (another run of this source is in progress; skipped) run={outcome.run_id}"
    if outcome.status == "disabled":
        return f"{head}: {outcome.error}"
    counts = (
        f"run={outcome.run_id} checked={outcome.checked} missing={outcome.missing} "
        f"repaired={outcome.repaired}{' (dry run)' if dry_run else ''}"
    )
    if outcome.status == RunStatus.FAILED:
        return f"{head} {counts} error={outcome.error}"
    return f"{head} {counts} cursor={outcome.cursor_before}->{outcome.cursor_after}"


async def cmd_sources(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.errors import Conflict, NotFound
    from hookd.ops import SourceOps

    async with database(settings) as engine:
        source_ops = SourceOps(engine, sources)
        if args.sources_command == "enable":
            try:
                await source_ops.enable(args.name)
            except NotFound:
                raise ConfigError(f"{sources.path}: no source named {args.name!r}") from None
            except Conflict:
                raise ConfigError(
                    f"{sources.path}: source {args.name!r} has no [sources.reconcile] table"
                ) from None
            print(f"{args.name}: reconciliation enabled")
            return EXIT_OK
        resources = await source_ops.overview()
    if args.json:
        for res in resources:
            print(json.dumps(res))
        return EXIT_OK
    rows = []
    for res in resources:
        rc = res["reconcile"] or {}
        last = rc.get("last_run") or {}
        rows.append(
            {
                "name": res["name"],
                "provider": res["provider"],
                "reconcile": rc.get("state", "off"),
                "cursor": rc.get("cursor"),
                "last_run": last.get("status"),
                "next_run_at": rc.get("next_run_at"),
                "pending": res["pending"],
                "dead": res["dead"],
                "reason": rc.get("reason"),
            }
        )
    print_table(
        rows,
        (
            "name",
            "provider",
            "reconcile",
            "cursor",
            "last_run",
            "next_run_at",
            "pending",
            "dead",
            "reason",
        ),
    )
    return EXIT_OK
