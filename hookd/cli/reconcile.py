"""``hookd reconcile`` (one pass now, stopped cleanly by SIGTERM or SIGINT) and
``hookd sources list|enable|disable|check``."""

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
from hookd.errors import ConfigError, Conflict, NotFound
from hookd.settings import Settings
from hookd.sources import Source, Sources
from hookd.timefmt import iso_z, iso_z_or_none, iso_z_seconds
from store.status import RunStatus, RunTrigger

if TYPE_CHECKING:
    from hookd.ops import models
    from reconcile.poller import Reconciler
    from reconcile.providers.base import Registration


async def cmd_reconcile(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
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
    audits = ""
    if outcome.unjudged:
        audits += f" unjudged={outcome.unjudged} (window left a hole; see hookd coverage)"
    if outcome.ack_violations:
        audits += f" ack_violations={outcome.ack_violations}"
    if outcome.registration_problems:
        audits += f" registration_drift={'; '.join(outcome.registration_problems)!r}"
    if outcome.registration_unread is not None:
        audits += f" registration_not_checked={outcome.registration_unread!r}"
    before, after = iso_z_seconds(outcome.cursor_before), iso_z_seconds(outcome.cursor_after)
    return f"{head} {counts} cursor={before}->{after}{audits}"


async def cmd_sources(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.ops import SourceOps

    if args.sources_command in ("disable", "check"):
        return await source_audits(args, settings, sources)
    async with database(settings) as engine:
        source_ops = SourceOps(engine, sources)
        if args.sources_command == "enable":
            with _reconcilable(sources, args.name):
                await source_ops.enable(args.name)
            print(f"{args.name}: reconciliation enabled")
            return EXIT_OK
        found = await source_ops.overview()
    if args.json:
        for source in found:
            print(json.dumps(source.answer()))
        return EXIT_OK
    rows = [_source_row(source) for source in found]
    print_table(
        rows,
        (
            "name",
            "provider",
            "processing",
            "reconcile",
            "cursor",
            "last_run",
            "next_run_at",
            "pending",
            "dead",
            "reason",
            "by",
            "registration",
        ),
    )
    return EXIT_OK


@contextlib.contextmanager
def _reconcilable(sources: Sources, name: str) -> Iterator[None]:
    """A source the operations refuse to reconcile (none of that name, or one without
    ``[sources.reconcile]``), as the one line ``hookd sources`` prints."""
    try:
        yield
    except NotFound:
        raise ConfigError(f"{sources.path}: no source named {name!r}") from None
    except Conflict:
        raise ConfigError(
            f"{sources.path}: source {name!r} has no [sources.reconcile] table"
        ) from None


def _source_row(source: models.Source) -> dict[str, object]:
    """One line of ``hookd sources``: a source not reconciled says ``off``, and no more."""
    row: dict[str, object] = {
        "name": source.name,
        "provider": source.provider,
        "processing": _processing_word(source),
        "pending": source.pending,
        "dead": source.dead,
        "reconcile": "off",
        **dict.fromkeys(("cursor", "last_run", "next_run_at", "reason", "by", "registration")),
    }
    rc = source.reconcile
    if rc is not None:
        row |= {
            "reconcile": rc.state,
            "cursor": iso_z_seconds(rc.cursor),
            "last_run": None if rc.last_run is None else rc.last_run.status,
            "next_run_at": iso_z_or_none(rc.next_run_at),
            "reason": rc.reason,
            "by": rc.disabled_by,
            "registration": _registration_word(rc.registration),
        }
    return row


def _disabled_line(name: str, source: models.Source) -> str:
    """What ``hookd sources disable`` says: by whom, when and why (a source without a
    ``[sources.reconcile]`` table is refused before)."""
    rc = source.reconcile
    assert rc is not None
    return (
        f"{name}: reconciliation disabled by {rc.disabled_by} at "
        f"{iso_z_or_none(rc.disabled_at)}: {rc.reason}"
    )


def _processing_word(source: models.Source) -> str:
    """Active, or paused with since when, by whom and why (``hookd sources pause``)."""
    pause = source.pause
    if not source.paused or pause is None:
        return "active"
    said = ", ".join(
        f"{label} {value}"
        for label, value in (("since", iso_z(pause.at)), ("by", pause.by))
        if value
    )
    return "paused" + (f" ({said})" if said else "") + (f": {pause.reason}" if pause.reason else "")


def _registration_word(registration: models.SourceRegistration | None) -> str | None:
    """The last registration check in a word: ok, drift (and what), could not check
    (and why), or none yet."""
    if registration is None:
        return None
    if registration.ok is None:
        return f"could not check: {registration.reason}"
    if registration.ok:
        return "ok"
    return "drift: " + "; ".join(registration.problems)


def _check_state(registration: Registration) -> str | None:
    """``hookd sources check --json``'s ``state``: as the API's, None where not checked."""
    from hookd.ops.resources import registration_state

    if registration.unchecked is not None:
        return None
    return registration_state(None if registration.unread is not None else registration.ok)


async def source_audits(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    """``hookd sources disable NAME [--reason TEXT]`` and ``hookd sources check [NAME]``."""
    from hookd.errors import BadRequest
    from hookd.ops import SourceOps
    from hookd.ops.sources import cli_actor

    async with database(settings) as engine:
        source_ops = SourceOps(engine, sources)
        names = [args.name] if args.name else [s.name for s in source_ops.reconciled()]
        with _reconcilable(sources, args.name):
            chosen = [source_ops.reconcilable(name) for name in names]
        if args.sources_command == "disable":
            try:
                resource = await source_ops.disable(args.name, args.reason, cli_actor())
            except BadRequest as exc:
                raise ConfigError(f"--reason: {exc.detail}") from None
            print(_disabled_line(args.name, resource))
            return EXIT_OK
        if not chosen:
            raise ConfigError(f"{sources.path}: no source has a [sources.reconcile] table")
        async with httpx.AsyncClient() as client:
            found = [(s, await source_ops.check(s.name, client)) for s in chosen]
    if args.name and found[0][1].unchecked is not None:
        raise ConfigError(
            f"{sources.path}: source {args.name!r}: not checked: {found[0][1].unchecked}"
        )
    differs = False
    for source, registration in found:
        # Drift, or a registration that could not be read: neither passed the check.
        differs = differs or (registration.unchecked is None and not registration.ok)
        print(_check_json(source, registration) if args.json else _check_line(source, registration))
    return EXIT_FAIL if differs else EXIT_OK


def _check_json(source: Source, registration: Registration) -> str:
    """One source's registration check as a line of JSON (``--json``)."""
    checked = registration.unchecked is None and registration.unread is None
    return json.dumps(
        {
            "name": source.name,
            "provider": source.provider,
            "checked": checked,
            "ok": registration.ok if checked else None,
            "state": _check_state(registration),
            "problems": list(registration.problems),
            "registered": registration.registered,
            "unchecked": registration.unchecked,
            "reason": registration.unread,
        }
    )


def _check_line(source: Source, registration: Registration) -> str:
    """One source's registration check in words."""
    from reconcile.providers.base import shown_url

    if registration.unchecked is not None:
        return f"{source.name}: not checked: {registration.unchecked}"
    if registration.unread is not None:
        return f"{source.name}: could not check the registration: {registration.unread}"
    if registration.ok:
        url = shown_url(registration.registered.get("url"))
        return f"{source.name}: registration ok (posts to {url})"
    return f"{source.name}: registration differs: {'; '.join(registration.problems)}"
