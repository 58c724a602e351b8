"""The ``hookd`` command's options: each command's ``add_*`` function (registered with
its handler in ``hookd.cli.commands``), their value types, and the defaults and exit
statuses the help text names.

Exit status 0: done; 1: the command ran and failed (an event dead or unknown, a run
failed); 2: a usage or configuration error, printed as one ``hookd: ...`` line.
``hookd wait`` adds 3 (not done by ``--timeout``) and 4 (no such event); ``hookd
coverage`` 3 (only the schedule's next work is unchecked) and 4 (no such source).
"""

from __future__ import annotations

import argparse
import math
from importlib import metadata
from pathlib import Path
from typing import TypeAlias

from hookd.errors import ConfigError
from hookd.settings import Settings
from store.status import AlertStatus, EventOrigin, EventStatus

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# 128 + SIGPIPE: what a shell reports for a program whose reader went away (`| head`).
EXIT_BROKEN_PIPE = 141
EXIT_WAIT_DEAD, EXIT_WAIT_TIMEOUT, EXIT_WAIT_UNKNOWN = 1, 3, 4
# `hookd coverage`: 0 the range is fully checked; 1 it has a hole (failed, unrecoverable,
# not checked, never recorded, silent); 3 its only holes are what the schedule checks next
# (settling, pending); 4 no such reconciled or watched source.
EXIT_COVERAGE_HOLES, EXIT_COVERAGE_DUE, EXIT_COVERAGE_UNKNOWN = 1, 3, 4
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
# How long `hookd reconcile --wait` waits for another run's lease (its help says so).
LEASE_WAIT_S = 600.0


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


def _exit_statuses(*meanings: tuple[int, str]) -> str:
    """A command's help epilog: what each of its exit statuses means."""
    return "exit status:\n" + "\n".join(f"  {code}  {said}" for code, said in meanings)


def _add_json(parser: argparse.ArgumentParser, per: str | None = None) -> None:
    """``--json``: a list as JSON Lines, one object ``per`` item; else one object."""
    said = f"print JSON Lines: one JSON object per {per}" if per else "print one JSON object"
    parser.add_argument("--json", action="store_true", help=said)


# What each command's ``add_*`` function adds its parser to.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the table of commands (``hookd.cli.commands``) builds it,
    each command's options coming from its ``add_*`` function here."""
    # Imported here: the table imports the commands, and they import this module.
    from hookd.cli.commands import build_parser as build

    return build()


def add_top_level(parser: argparse.ArgumentParser) -> SubParsers:
    """The options before the command, and the place each command is added to."""
    parser.add_argument("--version", action="version", version=f"hookd {package_version()}")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="the sources file (default: $HOOKD_CONFIG, else ./hookd.toml)",
    )
    return parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def add_serve(sub: SubParsers) -> None:
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


def add_worker(sub: SubParsers) -> None:
    sub.add_parser("worker", help="run an arq worker: processing and the outbox sweep")


def add_wait(sub: SubParsers) -> None:
    wait = sub.add_parser(
        "wait",
        help="wait for an existing event to finish; never resubmits",
        description="Wait for an existing event to finish; never resubmits.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_exit_statuses(
            (EXIT_OK, "the event was processed (or superseded by a newer one of its object)"),
            (EXIT_WAIT_DEAD, "the event is dead: its handlers failed and gave up"),
            (EXIT_USAGE, "usage or configuration error"),
            (EXIT_WAIT_TIMEOUT, "not done when --timeout passed"),
            (EXIT_WAIT_UNKNOWN, "no such event"),
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


def add_reconcile(sub: SubParsers) -> None:
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


def add_sources(sub: SubParsers) -> None:
    """``hookd sources list|enable|disable|check|pause|resume``."""
    src = sub.add_parser("sources", help="configured sources and their reconciliation state")
    srcsub = src.add_subparsers(dest="sources_command", required=True, metavar="ACTION")
    src_list = srcsub.add_parser("list", help="sources, reconcile state, counts")
    _add_json(src_list, per="source")
    src_enable = srcsub.add_parser(
        "enable", help="re-enable reconciliation (after auth failures, or a disable)"
    )
    src_enable.add_argument("name")
    _add_source_audits(srcsub)
    _add_source_pauses(srcsub)


def add_events(sub: SubParsers) -> None:
    events = sub.add_parser("events", help="inspect stored events")
    evsub = events.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    ev_list = evsub.add_parser("list", help="newest events first")
    ev_list.add_argument("--source", help="only this source's events")
    ev_list.add_argument(
        "--object",
        metavar="KEY",
        help="only the events of this object (an object key of [sources.order])",
    )
    ev_list.add_argument(
        "--status",
        choices=[s.value for s in EventStatus],
        help="only events in this status",
    )
    ev_list.add_argument(
        "--limit", type=positive_int, default=50, help="most events to show (default: %(default)s)"
    )
    _add_json(ev_list, per="event")
    ev_show = evsub.add_parser("show", help="one event")
    ev_show.add_argument("id", metavar="EVENT_ID")
    _add_json(ev_show)
    ev_show.add_argument("--body", action="store_true", help="also print the stored body")


# The options of `hookd replay` that make it a bulk operation (`hookd.cli.operations`).
BULK_REPLAY_OPTIONS = ("since", "until", "type", "destination", "origin", "object")
# Its three forms, as its usage line and its usage errors show them.
REPLAY_FORMS = (
    "hookd replay EVENT_ID ...",
    "hookd replay --source S --status dead",
    "hookd replay --since TIME [--until TIME] [--source S] [--status STATUS] [--type GLOB] "
    "[--origin O] [--destination D] [--object KEY] [--dry-run] [--wait]",
)


def add_replay(sub: SubParsers) -> None:
    replay = sub.add_parser(
        "replay",
        usage="\n       ".join(REPLAY_FORMS),
        help="run events' handlers again, on the same rows: by id, or in bulk by filter",
        description=(
            "Run events' handlers again, on the same rows. By id (EVENT_ID ...), every dead\n"
            "event of a source (--source S --status dead), or in bulk: every event a filter\n"
            "selects (--since, with any of --until, --source, --status, --type, --origin,\n"
            "--destination, --object), as a bulk operation (see `hookd operations`)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("ids", nargs="*", metavar="EVENT_ID")
    replay.add_argument("--source", metavar="S", help="only this source's events")
    replay.add_argument(
        "--status", choices=[s.value for s in EventStatus], help="only events in this status"
    )
    when = "ISO 8601 (UTC unless it says otherwise), unix seconds, or a time ago (90m, 24h, 7d)"
    replay.add_argument(
        "--since", metavar="TIME", help=f"bulk: events received at or after TIME: {when}"
    )
    replay.add_argument(
        "--until", metavar="TIME", help="bulk: events received before TIME (default: now)"
    )
    replay.add_argument("--type", metavar="GLOB", help="bulk: event types matching (* and ?)")
    replay.add_argument(
        "--origin", choices=[o.value for o in EventOrigin], help="bulk: only events of this origin"
    )
    replay.add_argument(
        "--destination",
        metavar="D",
        help="bulk: NAME or SOURCE/NAME: run only this destination again, on its sources' events",
    )
    replay.add_argument(
        "--object", metavar="KEY", help="bulk: one object's events (per-object ordering)"
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="bulk: print how many events; change nothing"
    )
    replay.add_argument(
        "--wait",
        action="store_true",
        help="bulk: run the operation here and print its progress until it ends (without it, "
        "hookd serve or hookd worker runs it)",
    )


def add_send_test(sub: SubParsers) -> None:
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
        "--type",
        metavar="TYPE",
        help="the event type to send (github: X-GitHub-Event; stripe, standard: the body's "
        "type; slack: event.type); default: the provider's sample's",
    )
    send.add_argument(
        "--body",
        type=Path,
        metavar="FILE",
        help="send this file's bytes as the body, signed as the provider signs "
        "(github, stripe, slack, standard); default: a sample event",
    )
    send.add_argument(
        "--signing-key",
        help="sources verified with a public key (standard whpk_, sendgrid, discord): the "
        "private key to sign with (or HOOKD_SEND_TEST_KEY)",
    )


def add_listen(sub: SubParsers) -> None:
    listen = sub.add_parser(
        "listen",
        help="forward a running hookd's new events to an app on this machine",
        description=(
            "Receive each newly stored event of a running hookd (its event stream, with\n"
            "HOOKD_LISTEN_TOKEN or its admin token) and POST it to LOCAL_URL with its\n"
            "stored headers and exact body, signed afresh by the server as the provider\n"
            "signs (GitHub, Stripe, Slack, Standard Webhooks sources), so the app's own\n"
            "check passes with the provider's secret; or, with --resign, signed as\n"
            "Standard Webhooks with HOOKD_LISTEN_RESIGN_SECRET. One line per event.\n"
            "Resumes after a disconnect without losing or repeating events. Changes\n"
            "nothing on the server."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_exit_statuses(
            (EXIT_OK, "stopped with Ctrl-C"),
            (EXIT_FAIL, "the server refused the token or the query, or could not be reached"),
            (EXIT_USAGE, "usage or configuration error (a URL, no token, no --resign secret)"),
        ),
    )
    listen.add_argument(
        "--from", dest="from_url", required=True, metavar="URL", help="the hookd to listen to"
    )
    listen.add_argument("--to", required=True, metavar="LOCAL_URL", help="where to POST each event")
    listen.add_argument(
        "--source",
        action="append",
        metavar="SOURCE",
        help="only this source's events (repeat for several; default: every source)",
    )
    listen.add_argument("--type", metavar="GLOB", help="only event types matching GLOB (* and ?)")
    listen.add_argument(
        "--resign",
        action="store_true",
        help="sign as Standard Webhooks with HOOKD_LISTEN_RESIGN_SECRET instead of "
        "sending the provider's signature",
    )
    start = listen.add_mutually_exclusive_group()
    start.add_argument(
        "--since",
        metavar="TIME",
        help="first send the events received since TIME: ISO 8601 (UTC unless it says "
        "otherwise), unix seconds, or a time ago (90m, 24h, 7d)",
    )
    start.add_argument(
        "--last",
        type=_last_count,
        metavar="N",
        help="first send the newest N events already stored (at most 10000)",
    )


def _last_count(raw: str) -> int:
    count = positive_int(raw)
    if count > 10_000:
        raise argparse.ArgumentTypeError("at most 10000")
    return count


def add_notify(sub: SubParsers) -> None:
    """``hookd notify test NAME``."""
    notify = sub.add_parser("notify", help="notification channels ([[notify]] tables)")
    notifysub = notify.add_subparsers(dest="notify_command", required=True, metavar="ACTION")
    test = notifysub.add_parser(
        "test",
        help="send a sample alert through one channel; exit 1 when it is not accepted",
        description="Send a sample alert (kind dead, saying it is a test) through the "
        "[[notify]] channel NAME, now, whatever its kinds, sources and min_severity; print "
        "what the channel answered. A PagerDuty test triggers an incident and resolves it.",
    )
    test.add_argument("name", metavar="NAME", help="the [[notify]] table's name")


def add_operations(sub: SubParsers) -> None:
    ops = sub.add_parser(
        "operations", help="bulk operations (replay or cancel by filter): list, show, cancel"
    )
    opsub = ops.add_subparsers(dest="operations_command", required=True, metavar="ACTION")
    ops_list = opsub.add_parser("list", help="newest operations first")
    ops_list.add_argument(
        "--limit", type=positive_int, default=50, help="most to show (default: %(default)s)"
    )
    _add_json(ops_list, per="operation")
    ops_show = opsub.add_parser("show", help="one operation: status and progress")
    ops_show.add_argument("id", metavar="OPERATION_ID")
    _add_json(ops_show)
    ops_cancel = opsub.add_parser(
        "cancel", help="stop an operation (within a second); what it did stays done"
    )
    ops_cancel.add_argument("id", metavar="OPERATION_ID")
    _add_json(ops_cancel)


# `hookd alerts list --status`: every status, where the API's default is the live ones.
ALL_ALERTS = "all"
MAX_ALERTS = 500


def alert_limit(raw: str) -> int:
    value = positive_int(raw)
    if value > MAX_ALERTS:
        raise argparse.ArgumentTypeError(f"{raw!r} is more than {MAX_ALERTS}")
    return value


def add_alerts(sub: SubParsers) -> None:
    """``hookd alerts list|show|ack|resolve``."""
    from hookd.notify.message import ALERT_KINDS

    epilog = _exit_statuses(
        (EXIT_OK, "done"),
        (EXIT_FAIL, "no such alert, or it is not in a state the action takes"),
        (EXIT_USAGE, "usage or configuration error"),
    )
    alerts = sub.add_parser(
        "alerts", help="alerts (conditions that need a person): list, show, ack, resolve"
    )
    alsub = alerts.add_subparsers(dest="alerts_command", required=True, metavar="ACTION")
    listing = alsub.add_parser(
        "list",
        help="alerts, by when they were last found",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument(
        "--status",
        choices=["live", *[s.value for s in AlertStatus], ALL_ALERTS],
        default="live",
        help="live: open or acknowledged (default: %(default)s)",
    )
    listing.add_argument("--kind", choices=ALERT_KINDS, help="only this kind")
    listing.add_argument("--source", metavar="S", help="only this source's")
    listing.add_argument(
        "--limit",
        type=alert_limit,
        default=100,
        help=f"most to show, at most {MAX_ALERTS} (default: %(default)s)",
    )
    _add_json(listing, per="alert")
    for action, said in (
        ("show", "one alert"),
        ("ack", "acknowledge an open alert: somebody is on it, no more reminders"),
        ("resolve", "resolve an alert by hand: the channels that heard of it are told"),
    ):
        one = alsub.add_parser(
            action, help=said, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        one.add_argument("id", metavar="ALERT_ID")
        _add_json(one)


def add_rejected(sub: SubParsers) -> None:
    """``hookd rejected list``."""
    rejected = sub.add_parser(
        "rejected", help="rejected requests on record (why, names, safe inputs): list"
    )
    rsub = rejected.add_subparsers(dest="rejected_command", required=True, metavar="ACTION")
    listing = rsub.add_parser("list", help="rejected requests, newest first")
    listing.add_argument("--source", metavar="S", help="only this source's")
    listing.add_argument(
        "--reason", metavar="R", help="only this reason (e.g. bad_signature, body_too_large)"
    )
    listing.add_argument(
        "--limit",
        type=alert_limit,
        default=50,
        help=f"most to show, at most {MAX_ALERTS} (default: %(default)s)",
    )
    _add_json(listing, per="rejected request")


def add_diagnose(sub: SubParsers) -> None:
    """``hookd diagnose SOURCE``."""
    diag = sub.add_parser(
        "diagnose",
        help="why a source's requests are refused: the likely cause and what to do",
        epilog=_exit_statuses(
            (EXIT_OK, "nothing refused in the last day"),
            (EXIT_FAIL, "requests were refused: the causes are printed; or no such source"),
            (EXIT_USAGE, "usage or configuration error"),
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diag.add_argument("source", metavar="SOURCE")
    diag.add_argument("--json", action="store_true", help="one JSON object")


def _add_switch(
    sub: SubParsers,
    command: str,
    target: str,
    metavar: str | None = None,
    *,
    reason: bool = False,
    help: str,
    description: str | None = None,
) -> None:
    """A command that switches one thing (``target``) off or on, recorded with who did
    it: with ``reason``, ``--reason TEXT`` says why."""
    switch = sub.add_parser(command, help=help, description=description)
    switch.add_argument(target, metavar=metavar)
    if reason:
        switch.add_argument("--reason", metavar="TEXT", help="why, for whoever looks next")


def _add_source_audits(srcsub: SubParsers) -> None:
    """``hookd sources disable`` and ``hookd sources check``."""
    _add_switch(
        srcsub,
        "disable",
        "name",
        reason=True,
        help="stop a source's reconciliation by hand, until `hookd sources enable`",
        description="Stop a source's reconciliation by hand: no run starts (schedule, "
        "`hookd reconcile`, API) until `hookd sources enable NAME`; a run in progress "
        "finishes. Recorded with the reason, the time and who (cli and the OS user).",
    )
    check = srcsub.add_parser(
        "check",
        help="read the provider's registration of the endpoint and compare it",
        description="Read each reconciled source's registration with its provider (GitHub: "
        "the hook; Stripe: the webhook endpoint) and compare it with what the source "
        "expects: active/enabled, its public_url, its expect_events or else the event "
        "types its handlers' and destinations' types filters take (Stripe also "
        "expect_api_version). Records the result, as each reconcile run does.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_exit_statuses(
            (EXIT_OK, "every source checked is registered as it expects"),
            (EXIT_FAIL, "a registration differs, or could not be read"),
            (
                EXIT_USAGE,
                "usage or configuration error (no such source, or none that can be checked)",
            ),
        ),
    )
    check.add_argument("name", nargs="?", metavar="NAME", help="only this source")
    _add_json(check, per="source")


def add_coverage(sub: SubParsers) -> None:
    coverage = sub.add_parser(
        "coverage",
        help="what reconciliation has checked of a source: intervals and holes",
        description=(
            "Print the time intervals reconciliation has checked of SOURCE (in the\n"
            "provider's time) and the holes, merged, each with its reasons: a run failed\n"
            "there, it lay beyond the provider's retention, the source was disabled, it\n"
            "is younger than settle_s, or the next run has yet to reach it; and the\n"
            "silent windows of a source with [sources.expect] (fewer webhooks than\n"
            "expected). A source with [sources.expect] and no [sources.reconcile]: the\n"
            "windows its silence watch judged, from where the watch began."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_exit_statuses(
            (EXIT_OK, "the whole range was checked"),
            (EXIT_COVERAGE_HOLES, "the range has a hole (a silent window is one)"),
            (EXIT_USAGE, "usage or configuration error (a time that is not one)"),
            (EXIT_COVERAGE_DUE, "its only holes are the schedule's next work (settling, pending)"),
            (
                EXIT_COVERAGE_UNKNOWN,
                "no such source, or it has neither [sources.reconcile] nor [sources.expect]",
            ),
        ),
    )
    coverage.add_argument("source", metavar="SOURCE")
    when = "ISO 8601 (UTC unless it says otherwise), unix seconds, or a time ago (90m, 24h, 7d)"
    coverage.add_argument(
        "--since",
        metavar="TIME",
        help=f"start of the range: {when} (default: where the source's ledger begins)",
    )
    coverage.add_argument(
        "--until",
        metavar="TIME",
        help=f"end of the range: {when} (default: now less the source's settle_s; "
        "a source only watched for silence: the end of its last judged window)",
    )
    _add_json(coverage)


def add_db(sub: SubParsers) -> None:
    """``hookd db upgrade``."""
    dbp = sub.add_parser("db", help="database schema")
    dbsub = dbp.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = dbsub.add_parser(
        "upgrade",
        help="apply migrations up to this version's schema",
        description="Apply migrations up to this version's schema. A new database is "
        "created (SQLite) or filled (PostgreSQL); a database that already holds other "
        "tables and no hookd schema is refused (a wrong HOOKD_DATABASE_URL), unless --yes.",
    )
    upgrade.add_argument(
        "--yes",
        action="store_true",
        help="add hookd's tables to a database that already holds other tables",
    )


def add_keys(sub: SubParsers) -> None:
    """``hookd keys rotate``."""
    keys = sub.add_parser("keys", help="encryption keys of stored bodies")
    keysub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    rotate = keysub.add_parser(
        "rotate",
        help="re-encrypt every stored body with the first HOOKD_ENCRYPTION_KEYS key",
        description="Re-encrypt every stored body with the first HOOKD_ENCRYPTION_KEYS key "
        "(plain ones are encrypted). A body no listed key opens is left as it was and "
        "named at the end; the rotation goes on.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_exit_statuses(
            (EXIT_OK, "every stored body is under the first key"),
            (
                EXIT_FAIL,
                "bodies no key opens were skipped (their ids are printed), or "
                "--stop-on-error stopped at one",
            ),
            (EXIT_USAGE, "no key set, or no key opens any stored body (nothing changed)"),
        ),
    )
    rotate.add_argument(
        "--stop-on-error",
        action="store_true",
        help="stop at the first body no key opens, naming its event, instead of skipping it",
    )


def add_prune(sub: SubParsers) -> None:
    prune = sub.add_parser(
        "prune",
        help="apply the retention policy now: strip old bodies, delete old events and keys",
        description=(
            "Apply each source's retention policy ([retention], [sources.retention]): "
            "strip old bodies, delete old events, keys and reconcile runs. Safe to stop "
            "and to run again; one process prunes at a time."
        ),
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="count what would be removed; change nothing"
    )
    prune.add_argument("--source", metavar="S", help="only this source")
    prune.add_argument(
        "--as-of",
        metavar="TIME",
        help="apply the policy as if the time were TIME: ISO 8601 (UTC unless it says "
        "otherwise) or unix seconds (default: now)",
    )
    _add_json(prune, per="source")


def add_try(sub: SubParsers) -> None:
    trial = sub.add_parser(
        "try",
        help="run a handler on stored events and show what it did; records nothing",
        description=(
            "Run HANDLER (module:function, as in the sources file) on a stored event, or\n"
            "with --all on the newest stored events that match, as processing would (the\n"
            "same Event, the same idempotency key, HOOKD_HANDLER_TIMEOUT_S), and print\n"
            "what it returned or raised. Nothing is recorded: no ledger row, no status\n"
            "change, no attempt."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_exit_statuses(
            (EXIT_OK, "every run returned"),
            (EXIT_FAIL, "a run raised or did not finish in time"),
            (
                EXIT_USAGE,
                "bad input: no such event, a handler that cannot be imported, "
                "options that do not go together",
            ),
        ),
    )
    trial.add_argument("handler", metavar="HANDLER", help="module:function")
    trial.add_argument("id", nargs="?", metavar="EVENT_ID")
    trial.add_argument(
        "--all", action="store_true", help="try it on the newest stored events that match"
    )
    trial.add_argument("--source", metavar="S", help="with --all: only this source's events")
    trial.add_argument(
        "--type", metavar="GLOB", help="with --all: only events whose type matches (* and ?)"
    )
    trial.add_argument(
        "--since",
        metavar="TIME",
        help="with --all: only events received since TIME: ISO 8601 (UTC unless it says "
        "otherwise), unix seconds, or a time ago (90m, 24h, 7d)",
    )
    trial.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="with --all: the most events to try (default: 10)",
    )


def _add_source_pauses(srcsub: SubParsers) -> None:
    """``hookd sources pause|resume NAME``."""
    _add_switch(
        srcsub,
        "pause",
        "name",
        reason=True,
        help="pause a source's processing: events are still stored and acknowledged",
        description="Pause a source's processing: its webhooks are still verified, stored "
        "and acknowledged, but no handler or destination runs for them until `hookd "
        "sources resume NAME`. Recorded with the time, who (cli and the OS user) and why.",
    )
    _add_switch(
        srcsub,
        "resume",
        "name",
        help="resume a source's processing: what waited runs in the order it came",
    )


def add_destinations(sub: SubParsers) -> None:
    """``hookd destinations list|pause|resume``."""
    dest = sub.add_parser(
        "destinations", help="destinations: pause, circuit breaker, what waits for each"
    )
    destsub = dest.add_subparsers(dest="destinations_command", required=True, metavar="ACTION")
    listing = destsub.add_parser("list", help="destinations with their pause, breaker and queue")
    listing.add_argument("--source", metavar="S", help="only this source's")
    _add_json(listing, per="destination")
    _add_switch(
        destsub,
        "pause",
        "target",
        "SOURCE/NAME",
        reason=True,
        help="pause one destination: its deliveries wait, using no attempt",
        description="Pause one destination (SOURCE/NAME; `forward` for [sources.forward]): "
        "the source's events are processed, its other destinations and handlers run, and "
        "this one's deliveries wait, using no attempt, until `hookd destinations resume`.",
    )
    _add_switch(
        destsub,
        "resume",
        "target",
        "SOURCE/NAME",
        help="resume one destination: what waited is delivered in the order it came",
    )
