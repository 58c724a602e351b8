"""The ``hookd`` commands, one row each: its options and its handler, registered
together, and what runs before the handler.

A row's flags say what that is, in this order: ``traced``, OpenTelemetry set up for
the command (when ``OTEL_*`` asks for it); ``preflight``, the database checked (it
answers, at this version's schema); ``sources``, the sources file loaded and handed
to the handler as its third argument. A handler that is a coroutine function runs
under ``asyncio.run`` (``Command.is_async``). ``variants``: another handler for some
of the command's forms (``hookd replay --since``, a bulk operation), chosen after
the pre-flight check, with the row's flags.

To add a command: its options in an ``add_*`` function of ``hookd.cli.parser``, its
handler in a module of its own, and a row here (the rows' order is ``hookd --help``'s).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeAlias

from hookd import tracing
from hookd.cli import parser
from hookd.cli.alerts import cmd_alerts
from hookd.cli.context import preflight
from hookd.cli.coverage import cmd_coverage
from hookd.cli.destinations import cmd_destinations, cmd_source_pause
from hookd.cli.diagnose import cmd_diagnose
from hookd.cli.events import cmd_events, cmd_replay, cmd_wait
from hookd.cli.listen import cmd_listen
from hookd.cli.maintenance import cmd_db_upgrade, cmd_keys_rotate, cmd_prune
from hookd.cli.notify import cmd_notify
from hookd.cli.operations import bulk_replay_asked, cmd_bulk_replay, cmd_operations
from hookd.cli.reconcile import cmd_reconcile, cmd_sources
from hookd.cli.rejected import cmd_rejected
from hookd.cli.send_test import cmd_send_test
from hookd.cli.serve import cmd_serve, cmd_worker
from hookd.cli.trial import cmd_try
from hookd.settings import Settings
from hookd.sources import load_sources

# A command's handler: ``(args, settings)``, or ``(args, settings, sources)`` for a
# row with ``sources``; its exit status, or a coroutine that gives it.
Handler: TypeAlias = Callable[..., int | Coroutine[Any, Any, int]]


@dataclass(frozen=True)
class Variant:
    """The handler of the command's forms ``when`` selects."""

    when: Callable[[argparse.Namespace], bool]
    handler: Handler


@dataclass(frozen=True)
class Command:
    name: str
    add_parser: Callable[[parser.SubParsers], None]
    handler: Handler
    traced: bool = False
    preflight: bool = False
    sources: bool = False
    variants: tuple[Variant, ...] = ()

    def handler_for(self, args: argparse.Namespace) -> Handler:
        for variant in self.variants:
            if variant.when(args):
                return variant.handler
        return self.handler

    @property
    def is_async(self) -> bool:
        """Whether its handlers are coroutine functions (all of them, or none)."""
        return inspect.iscoroutinefunction(self.handler)


def _pause_or_resume(args: argparse.Namespace) -> bool:
    return bool(args.sources_command in ("pause", "resume"))


COMMANDS = (
    Command("serve", parser.add_serve, cmd_serve, traced=True),
    Command("worker", parser.add_worker, cmd_worker, traced=True),
    Command("wait", parser.add_wait, cmd_wait, preflight=True),
    Command(
        "replay",
        parser.add_replay,
        cmd_replay,
        preflight=True,
        variants=(Variant(bulk_replay_asked, cmd_bulk_replay),),
    ),
    Command(
        "reconcile", parser.add_reconcile, cmd_reconcile, traced=True, preflight=True, sources=True
    ),
    Command(
        "sources",
        parser.add_sources,
        cmd_sources,
        preflight=True,
        sources=True,
        variants=(Variant(_pause_or_resume, cmd_source_pause),),
    ),
    Command(
        "destinations", parser.add_destinations, cmd_destinations, preflight=True, sources=True
    ),
    Command("db", parser.add_db, cmd_db_upgrade),
    Command("keys", parser.add_keys, cmd_keys_rotate, preflight=True),
    Command("prune", parser.add_prune, cmd_prune, preflight=True, sources=True),
    Command("try", parser.add_try, cmd_try, preflight=True),
    Command("coverage", parser.add_coverage, cmd_coverage, preflight=True, sources=True),
    Command("operations", parser.add_operations, cmd_operations, preflight=True),
    Command("send-test", parser.add_send_test, cmd_send_test, sources=True),
    Command("notify", parser.add_notify, cmd_notify, sources=True),
    Command("events", parser.add_events, cmd_events, preflight=True),
    Command("alerts", parser.add_alerts, cmd_alerts, preflight=True, sources=True),
    Command("rejected", parser.add_rejected, cmd_rejected, preflight=True),
    Command("diagnose", parser.add_diagnose, cmd_diagnose, preflight=True, sources=True),
    # No database, no sources file: it talks to a hookd over HTTP.
    Command("listen", parser.add_listen, cmd_listen),
)
BY_NAME = {command.name: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="hookd", description="Durable, verified webhooks.")
    sub = parser.add_top_level(top)
    for command in COMMANDS:
        command.add_parser(sub)
    return top


def run(args: argparse.Namespace, settings: Settings) -> int:
    """The parsed command, after what its row asks for first; its exit status."""
    command = BY_NAME[args.command]
    if command.traced:
        tracing.setup(command.name)  # only when OTEL_* asks for it
    if command.preflight:
        asyncio.run(preflight(settings))
    handler = command.handler_for(args)
    inputs: tuple[object, ...] = (args, settings)
    if command.sources:
        inputs = (*inputs, load_sources(settings.config))
    status = handler(*inputs)
    return status if isinstance(status, int) else asyncio.run(status)
