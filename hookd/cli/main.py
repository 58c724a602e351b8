"""The ``hookd`` command line: parse the options, read the settings, run the command.

Each command lives in its own module (``serve``, ``events``, ``reconcile``,
``maintenance`` (with ``prune``), ``send_test``); the options, defaults and exit statuses in
``parser``; which handler runs a command, and what runs before it, in ``commands``.
A configuration error is one ``hookd: ...`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from hookd.cli import commands
from hookd.cli.parser import EXIT_BROKEN_PIPE, EXIT_USAGE
from hookd.cli.terminal import SafeStdout
from hookd.errors import ConfigError
from hookd.logs import configure as configure_logs
from hookd.logs import say
from hookd.settings import Settings
from hookd.sources import SourcesFileMissing


def main(argv: Sequence[str] | None = None) -> int:
    stdout = sys.stdout
    sys.stdout = SafeStdout(stdout)
    try:
        return _main(argv)
    finally:
        sys.stdout = stdout


def _main(argv: Sequence[str] | None) -> int:
    args = commands.build_parser().parse_args(argv)
    if args.config is not None:
        # Through the environment, not an override: `serve --workers N` processes
        # and the app factory read their settings again, and must see the same file.
        os.environ["HOOKD_CONFIG"] = str(args.config)
    try:
        settings = Settings.from_env()
        configure_logs(settings.log_level, settings.log_json)
        code = commands.run(args, settings)
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


if __name__ == "__main__":
    sys.exit(main())
