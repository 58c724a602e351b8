"""The ``hookd`` command line.

Exit status 0: done; 1: the command ran and failed (an event dead or unknown, a run
failed); 2: a usage or configuration error, printed as one ``hookd: ...`` line.
``hookd wait`` adds 3 (not done by ``--timeout``) and 4 (no such event).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import json
import math
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import exc as sa_exc

from hookd.cli.context import database, nothing_to_wake, waking
from hookd.errors import ConfigError
from hookd.logs import configure as configure_logs
from hookd.settings import Settings
from hookd.sources import Sources, load_sources
from store.status import EventStatus, RunStatus, RunTrigger

if TYPE_CHECKING:
    from reconcile.poller import Reconciler

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# 128 + SIGPIPE: what a shell reports for a program whose reader went away (`| head`).
EXIT_BROKEN_PIPE = 141
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{raw!r} must be positive")
    return value


def port_number(raw: str) -> int:
    value = positive_int(raw)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a TCP port")
    return value


def positive_seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{raw!r} must be finite and positive")
    return value


def package_version() -> str:
    try:
        return metadata.version("hookd")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def listen_port(settings: Settings, option: str) -> int:
    """HOOKD_PORT, else 8000; checked only here (see ``Settings.port``)."""
    if not settings.port:
        return DEFAULT_PORT
    try:
        return port_number(settings.port)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(
            f"environment: HOOKD_PORT: {exc}; set a TCP port (1-65535) or pass {option}"
        ) from None


def send_test_url(settings: Settings, source: str) -> str:
    """Where ``hookd serve`` listens with the same environment (HOOKD_HOST, HOOKD_PORT)."""
    host = settings.host or DEFAULT_HOST
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:  # a host name
        pass
    else:
        if address.is_unspecified:  # listening on every address: loopback is one of them
            host = DEFAULT_HOST
        elif address.version == 6:
            host = f"[{address}]"
    return f"http://{host}:{listen_port(settings, '--url')}/hooks/{source}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hookd", description="Durable, verified webhooks.")
    parser.add_argument("--version", action="version", version=f"hookd {package_version()}")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="the sources file (default: $HOOKD_CONFIG, else ./hookd.toml)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the receiver")
    # None: from HOOKD_HOST/HOOKD_PORT, read with the other settings (see cmd_serve).
    serve.add_argument(
        "--host", help=f"address to listen on (default: $HOOKD_HOST, else {DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port",
        type=port_number,
        help=f"TCP port to listen on (default: $HOOKD_PORT, else {DEFAULT_PORT})",
    )
    serve.add_argument(
        "--workers", type=positive_int, default=1, help="receiver processes (default: %(default)s)"
    )

    sub.add_parser("worker", help="run an arq worker: processing and the outbox sweep")

    wait = sub.add_parser(
        "wait",
        help="wait for an existing event to finish; never resubmits",
        description="Wait for an existing event to finish; never resubmits.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "exit status:\n"
            f"  {EXIT_OK}  the event was processed\n"
            f"  {EXIT_WAIT_DEAD}  the event is dead: its handlers failed and gave up\n"
            f"  {EXIT_USAGE}  usage or configuration error\n"
            f"  {EXIT_WAIT_TIMEOUT}  not done when --timeout passed\n"
            f"  {EXIT_WAIT_UNKNOWN}  no such event"
        ),
    )
    wait.add_argument("id", metavar="EVENT_ID")
    wait.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        help="give up after this many seconds (default: %(default)g)",
    )
    wait.add_argument(
        "--interval",
        type=positive_seconds,
        default=1.0,
        help="seconds between looks at the event (default: %(default)g)",
    )

    replay = sub.add_parser("replay", help="run events' handlers again, on the same rows")
    replay.add_argument("ids", nargs="*", metavar="EVENT_ID")
    replay.add_argument("--source")
    replay.add_argument("--status", choices=[EventStatus.DEAD.value])

    rec = sub.add_parser("reconcile", help="one reconciliation pass now (for cron, CronJob)")
    rec.add_argument("sources", nargs="*", metavar="SOURCE")
    rec.add_argument(
        "--dry-run", action="store_true", help="report what is missing; change nothing"
    )
    rec.add_argument(
        "--wait",
        action="store_true",
        help=f"if another run holds a source, wait for it (up to {LEASE_WAIT_S:g}s), then run",
    )

    src = sub.add_parser("sources", help="configured sources and their reconciliation state")
    srcsub = src.add_subparsers(dest="sources_command", required=True, metavar="ACTION")
    src_list = srcsub.add_parser("list", help="sources, reconcile state, counts")
    src_list.add_argument(
        "--json", action="store_true", help="print JSON Lines: one JSON object per source"
    )
    src_enable = srcsub.add_parser("enable", help="re-enable reconciliation after auth failures")
    src_enable.add_argument("name")

    dbp = sub.add_parser("db", help="database schema")
    dbsub = dbp.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    dbsub.add_parser("upgrade", help="apply migrations up to this version's schema")

    keys = sub.add_parser("keys", help="encryption keys of stored bodies")
    keysub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    keysub.add_parser(
        "rotate", help="re-encrypt every stored body with the first HOOKD_ENCRYPTION_KEYS key"
    )

    events = sub.add_parser("events", help="inspect stored events")
    evsub = events.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    ev_list = evsub.add_parser("list", help="newest events first")
    ev_list.add_argument("--source", help="only this source's events")
    ev_list.add_argument(
        "--status",
        choices=[s.value for s in EventStatus],
        help="only events in this status",
    )
    ev_list.add_argument(
        "--limit", type=positive_int, default=50, help="most events to show (default: %(default)s)"
    )
    ev_list.add_argument(
        "--json", action="store_true", help="print JSON Lines: one JSON object per event"
    )
    ev_show = evsub.add_parser("show", help="one event")
    ev_show.add_argument("id", metavar="EVENT_ID")
    ev_show.add_argument("--json", action="store_true", help="print one JSON object")
    ev_show.add_argument("--body", action="store_true", help="also print the stored body")

    send = sub.add_parser("send-test", help="send correctly signed sample events to a source")
    send.add_argument("source")
    send.add_argument(
        "--count", type=positive_int, default=1, help="events to send (default: %(default)s)"
    )
    send.add_argument(
        "--url",
        help="where to send (default: where hookd serve listens: "
        f"http://$HOOKD_HOST:$HOOKD_PORT/hooks/SOURCE, else "
        f"http://{DEFAULT_HOST}:{DEFAULT_PORT}/hooks/SOURCE)",
    )
    send.add_argument(
        "--signing-key",
        help="standard sources with a whpk_ key: the whsk_ private key (or HOOKD_SEND_TEST_KEY)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.config is not None:
        # Through the environment, not an override: `serve --workers N` processes
        # and the app factory read their settings again, and must see the same file.
        os.environ["HOOKD_CONFIG"] = str(args.config)
    try:
        settings = Settings.from_env()
        configure_logs(settings.log_level, settings.log_json)
        code = _dispatch(args, settings)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit
    except ConfigError as exc:
        print(f"hookd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`hookd events list | head -1`): stop quietly. What is
        # still buffered cannot be written, so point stdout at /dev/null for the
        # interpreter's final flush (as the Python docs on SIGPIPE recommend).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:  # noqa: PLR0911
    if args.command == "serve":
        return cmd_serve(args, settings)
    if args.command == "worker":
        return cmd_worker(settings)
    if args.command in ("wait", "replay", "events", "reconcile", "sources", "keys"):
        asyncio.run(preflight(settings))
    if args.command == "wait":
        return asyncio.run(cmd_wait(args, settings))
    if args.command == "replay":
        return asyncio.run(cmd_replay(args, settings))
    if args.command == "reconcile":
        return asyncio.run(cmd_reconcile(args, settings, load_sources(settings.config)))
    if args.command == "sources":
        return asyncio.run(cmd_sources(args, settings, load_sources(settings.config)))
    if args.command == "db":
        from store import db, migrate

        migrate.upgrade(settings.database_url)
        print(
            f"hookd: database {db.describe(settings.database_url)} at schema "
            f"{migrate.head_revision(settings.database_url)}"
        )
        return EXIT_OK
    if args.command == "events":
        return asyncio.run(cmd_events(args, settings))
    if args.command == "keys":
        return asyncio.run(cmd_keys_rotate(settings))
    if args.command == "send-test":
        return cmd_send_test(args, settings, load_sources(settings.config))
    raise AssertionError(args.command)


async def cmd_keys_rotate(settings: Settings) -> int:
    from store.crypto import BodyCipher
    from store.keys import rotate_bodies

    cipher = BodyCipher(settings.encryption_keys)
    if not cipher.enabled:
        raise ConfigError(
            "environment: HOOKD_ENCRYPTION_KEYS: set the new key first, followed by the old ones"
        )
    async with database(settings) as engine:
        done = await rotate_bodies(engine, cipher)
    print(
        f"hookd: {done.reencrypted} bodies re-encrypted, {done.encrypted} plain bodies encrypted "
        "with the first key; the other keys can now be removed"
    )
    return EXIT_OK


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from ingest.metrics import prepare_multiprocess
    from processing.handlers import import_handler
    from store.crypto import BodyCipher

    # The options win; else HOOKD_HOST/HOOKD_PORT, which send-test also follows.
    args.host = args.host or settings.host or DEFAULT_HOST
    args.port = args.port or listen_port(settings, "--port")
    sources = load_sources(settings.config)  # fail here, with one line, not in every worker
    for source in sources:
        for ref in source.config.handlers:
            import_handler(ref)
    # Checked here, before "serving on": otherwise each receiver process fails on
    # its own, after start-up was announced.
    BodyCipher(settings.encryption_keys)
    asyncio.run(preflight(settings))
    check_listen(args.host, args.port)
    if settings.redis_url:
        from processing.wakeups import warn_if_redis_unreachable

        asyncio.run(
            warn_if_redis_unreachable(
                settings.redis_url,
                "events are still stored and acknowledged, but their wake-ups are lost and "
                "/readyz answers 503 until it is back; a hookd worker's database sweep "
                "(every HOOKD_SWEEP_S) processes them meanwhile",
                sweep_s=settings.sweep_s,
            )
        )
    print(
        f"hookd: serving on http://{args.host}:{args.port}  (sources: {settings.config})",
        file=sys.stderr,
    )
    # Several worker processes share one metrics directory (prometheus-client's
    # multiprocess mode); it must be set before they start and import the client.
    metrics_dir = prepare_multiprocess(args.workers)
    try:
        run_uvicorn(args)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return EXIT_OK


def check_listen(host: str, port: int) -> None:
    """Bind and listen as uvicorn will, then let go, so a taken port is one line.

    uvicorn only finds out after start-up was announced, in the middle of its own
    log, and exits 3. There is a moment between this check and uvicorn's bind;
    losing that race gives uvicorn's error, as before.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            advice = "pick another --port (or HOOKD_PORT), or stop what is listening there"
        elif exc.errno == errno.EACCES:
            advice = "ports below 1024 need privileges: pick another --port (or HOOKD_PORT)"
        else:  # not an address of this machine, or a name that does not resolve
            advice = "pass --host (or HOOKD_HOST) an address of this machine, or 0.0.0.0"
        raise ConfigError(
            f"serve: cannot listen on {host}:{port} ({exc.strerror or exc}); {advice}"
        ) from None


def run_uvicorn(args: argparse.Namespace) -> None:
    import uvicorn

    uvicorn.run(
        "hookd.runtime.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        # httptools with a deadline and a size limit on request heads (ingest/httpguard.py).
        http="ingest.httpguard:GuardedHttpToolsProtocol",
        access_log=False,
        log_level="warning",
        # Keep the handler hookd.logs put on uvicorn's loggers (in this process and,
        # from the app factory, in each receiver process): same format, JSON or not.
        log_config=None,
        server_header=False,
    )


async def preflight(settings: Settings) -> None:
    """The database answers and is at this version's schema, or one clear line."""
    from hookd.runtime.app import check_schema
    from store import db

    # Only `hookd db upgrade` may create a SQLite file; every command after this
    # check reuses the file it found.
    db.require_existing(settings.database_url)
    async with database(settings) as engine:
        with db.opening(settings.database_url):
            await check_schema(engine, settings.database_url)
            autovacuum = await db.autovacuum_on(engine)
        if not autovacuum:
            print(
                "hookd: warning: PostgreSQL has autovacuum off: the events table will bloat "
                "and its query plans go stale, and processing slows as it grows "
                "(see docs/scaling.md); turn it on, or run VACUUM ANALYZE events, "
                "handler_runs regularly",
                file=sys.stderr,
            )


def cmd_worker(settings: Settings) -> int:
    from hookd.runtime import worker

    if not settings.redis_url:
        raise ConfigError(
            "environment: HOOKD_REDIS_URL: hookd worker needs Redis; without it, "
            "hookd serve processes events in-process"
        )
    sources = load_sources(settings.config)
    asyncio.run(preflight(settings))
    asyncio.run(worker.run(settings, sources))
    return EXIT_OK


EXIT_WAIT_DEAD, EXIT_WAIT_TIMEOUT, EXIT_WAIT_UNKNOWN = 1, 3, 4


async def cmd_wait(args: argparse.Namespace, settings: Settings) -> int:
    """Poll one event read-only until it is done or the monotonic deadline passes."""
    from store.events import get_event

    deadline = time.monotonic() + args.timeout
    status = "unknown"
    last_error: str | None = None
    async with database(settings) as engine:
        while True:
            try:
                async with engine.connect() as conn:
                    row = await get_event(conn, args.id)
            except (OSError, ConnectionError, sa_exc.DBAPIError) as exc:
                status = f"unknown ({type(exc).__name__})"  # keep waiting: it may come back
            else:
                if row is None:
                    print(f"hookd: no event {args.id}", file=sys.stderr)
                    return EXIT_WAIT_UNKNOWN
                status, last_error = row.status, row.last_error
                if status == EventStatus.PROCESSED:
                    print(f"{args.id} processed")
                    return EXIT_OK
                if status == EventStatus.DEAD:
                    print(f"{args.id} dead: {row.last_error or 'no error recorded'}")
                    return EXIT_WAIT_DEAD
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A retrying event says why, so the wait is not a blind one.
                why = f"; last error: {last_error}" if last_error else ""
                print(f"{args.id} {status}: not done after {args.timeout:g}s{why}")
                return EXIT_WAIT_TIMEOUT
            await asyncio.sleep(min(args.interval, remaining))


async def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.ops import EventOps

    if bool(args.ids) == bool(args.source or args.status):
        raise ConfigError("usage: hookd replay EVENT_ID ... | --source S --status dead")
    if not args.ids and not (args.source and args.status):
        raise ConfigError("usage: --source and --status go together")
    async with database(settings) as engine, waking(settings) as wake:
        events = EventOps(engine, wake)
        # --status has the one choice "dead"; the source need not be in the sources file.
        done = await (events.replay_many(args.ids) if args.ids else events.replay_dead(args.source))
        # Said before the wake-up's Redis is let go, which waits for the job to be sent.
        for event_id in done.unknown:
            print(f"hookd: no event {event_id}", file=sys.stderr)
        for event_id in done.ids:
            if event_id not in done.unknown:
                state = "replayed" if event_id in done.replayed else "skipped: being processed now"
                print(f"{event_id} {state}")
    return EXIT_FAIL if done.unknown else EXIT_OK


LEASE_WAIT_S = 600.0


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


async def cmd_events(args: argparse.Namespace, settings: Settings) -> int:
    from hookd.errors import NotFound
    from hookd.ops import EventOps, EventQuery
    from store.crypto import BodyCipher

    async with database(settings) as engine:
        events = EventOps(engine, nothing_to_wake)
        if args.events_command == "list":
            # Checked by the options already, and --limit has no upper bound here.
            query = EventQuery(source=args.source, status=args.status, limit=args.limit)
            resources = (await events.page(query)).events
            if args.json:
                for res in resources:
                    print(json.dumps(res))
            else:
                print_table(resources)
            return EXIT_OK
        try:
            detail = await events.show(args.id, with_body=args.body)
        except NotFound:
            print(f"hookd: no event {args.id}", file=sys.stderr)
            return EXIT_FAIL
        res = detail.resource
        res["headers"] = detail.headers
        if args.body:
            body = BodyCipher(settings.encryption_keys).open(
                detail.body or b"", detail.body_encrypted
            )
            res["body"] = body.decode("utf-8", "replace")
        if args.json:
            print(json.dumps(res))
        else:
            width = max(len(k) for k in res)
            for key, value in res.items():
                shown = json.dumps(value) if isinstance(value, dict) else value
                print(f"{key.ljust(width)}  {'' if shown is None else shown}")
        return EXIT_OK


EVENT_COLUMNS = ("id", "source", "type", "status", "origin", "attempts", "received_at")


def print_table(resources: list[dict[str, Any]], columns: Sequence[str] = EVENT_COLUMNS) -> None:
    rows = [[str(r[c] if r[c] is not None else "-") for c in columns] for r in resources]
    widths = [max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    if not rows:
        print("(none)")


def cmd_send_test(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.providers.signing import sample_event

    source = sources.get(args.source)
    if source is None:
        known = ", ".join(s.name for s in sources)
        raise ConfigError(f"{sources.path}: no source named {args.source!r} (known: {known})")
    secret = source.config.secrets[0]
    if source.provider == "standard" and secret.startswith("whpk_"):
        secret = args.signing_key or os.environ.get("HOOKD_SEND_TEST_KEY", "")
        if not secret:
            raise ConfigError(
                f"{sources.path}: source {source.name!r}: key 'secrets.0': a whpk_ public key "
                "cannot sign; pass --signing-key whsk_… (or set HOOKD_SEND_TEST_KEY)"
            )
    url = args.url or send_test_url(settings, source.name)
    failures = 0
    with httpx.Client(timeout=10.0) as client:
        for seq in range(1, args.count + 1):
            headers, body = sample_event(source.provider, secret, seq)
            try:
                response = client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                print(f"hookd: cannot reach {url}: {type(exc).__name__}", file=sys.stderr)
                return EXIT_FAIL
            try:
                answer = response.json()
            except ValueError:
                answer = {"raw": response.text[:200]}
            print(f"{response.status_code} {json.dumps(answer)}")
            if not response.is_success:
                failures += 1
    return EXIT_FAIL if failures else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
