"""The ``hookd`` command line: parse the options, read the settings, run the command.

Each command lives in its own module (``serve``, ``events``, ``reconcile``,
``maintenance`` (with ``prune``), ``send_test``); the options, defaults and exit statuses in
``parser``. A configuration error is one ``hookd: ...`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from hookd import tracing
from hookd.cli.context import preflight
from hookd.cli.coverage import cmd_coverage
from hookd.cli.destinations import cmd_destinations, cmd_source_pause
from hookd.cli.events import cmd_events, cmd_replay, cmd_wait
from hookd.cli.maintenance import cmd_db_upgrade, cmd_keys_rotate, cmd_prune
from hookd.cli.operations import bulk_replay_asked, cmd_bulk_replay, cmd_operations
from hookd.cli.parser import EXIT_BROKEN_PIPE, EXIT_USAGE, build_parser
from hookd.cli.reconcile import cmd_reconcile, cmd_sources
from hookd.cli.send_test import cmd_send_test
from hookd.cli.serve import cmd_serve, cmd_worker
from hookd.cli.terminal import SafeStdout
from hookd.cli.trial import cmd_try
from hookd.errors import ConfigError
from hookd.logs import configure as configure_logs
from hookd.logs import say
from hookd.settings import Settings
from hookd.sources import SourcesFileMissing, load_sources


def main(argv: Sequence[str] | None = None) -> int:
    stdout = sys.stdout
    sys.stdout = SafeStdout(stdout)
    try:
        return _main(argv)
    finally:
        sys.stdout = stdout


def _main(argv: Sequence[str] | None) -> int:
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
    except SourcesFileMissing as exc:
        print(
            f"hookd: {exc.path}: sources file not found; {_config_hint(args, settings)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except ConfigError as exc:
        say(str(exc), level=logging.ERROR)
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


def _config_hint(args: argparse.Namespace, settings: Settings) -> str:
    """What to do about a missing sources file, named by where its path came from."""
    if args.config is not None:
        return "check the path given to --config"
    if "config" in settings.model_fields_set:  # the environment or .env
        return "check HOOKD_CONFIG (environment or .env), or pass --config PATH"
    return "no ./hookd.toml here (the default): pass --config PATH or set HOOKD_CONFIG"


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:  # noqa: PLR0911, PLR0912
    if args.command in ("serve", "worker", "reconcile"):
        tracing.setup(args.command)  # only when OTEL_* asks for it
    if args.command == "serve":
        return cmd_serve(args, settings)
    if args.command == "worker":
        return cmd_worker(settings)
    if args.command in (
        "wait",
        "replay",
        "events",
        "reconcile",
        "sources",
        "keys",
        "prune",
        "try",
        "operations",
        "coverage",
        "destinations",
    ):
        asyncio.run(preflight(settings))
    if args.command == "wait":
        return asyncio.run(cmd_wait(args, settings))
    if args.command == "replay" and bulk_replay_asked(args):
        return asyncio.run(cmd_bulk_replay(args, settings))
    if args.command == "replay":
        return asyncio.run(cmd_replay(args, settings))
    if args.command == "operations":
        return asyncio.run(cmd_operations(args, settings))
    if args.command == "coverage":
        return asyncio.run(cmd_coverage(args, settings, load_sources(settings.config)))
    if args.command == "reconcile":
        return asyncio.run(cmd_reconcile(args, settings, load_sources(settings.config)))
    if args.command == "sources" and args.sources_command in ("pause", "resume"):
        return asyncio.run(cmd_source_pause(args, settings, load_sources(settings.config)))
    if args.command == "sources":
        return asyncio.run(cmd_sources(args, settings, load_sources(settings.config)))
    if args.command == "destinations":
        return asyncio.run(cmd_destinations(args, settings, load_sources(settings.config)))
    if args.command == "db":
        return cmd_db_upgrade(args, settings)
    if args.command == "events":
        return asyncio.run(cmd_events(args, settings))
    if args.command == "keys":
        return asyncio.run(cmd_keys_rotate(args, settings))
    if args.command == "prune":
        return asyncio.run(cmd_prune(args, settings, load_sources(settings.config)))
    if args.command == "try":
        return asyncio.run(cmd_try(args, settings))
    if args.command == "send-test":
        return cmd_send_test(args, settings, load_sources(settings.config))
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
