"""The ``hookd`` commands' table: which commands there are, in ``hookd --help``'s
order, and each one's wiring: its handler, and what runs before it (tracing, the
database's pre-flight check, the sources file), in that order."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from hookd.cli import commands, parser
from hookd.cli.commands import COMMANDS, Command
from hookd.settings import Settings

# name: (handler, traced, preflight, sources file, async, variants' handlers)
WIRING: dict[str, tuple[str, bool, bool, bool, bool, tuple[str, ...]]] = {
    "serve": ("cmd_serve", True, False, False, False, ()),
    "worker": ("cmd_worker", True, False, False, False, ()),
    "wait": ("cmd_wait", False, True, False, True, ()),
    "replay": ("cmd_replay", False, True, False, True, ("cmd_bulk_replay",)),
    "reconcile": ("cmd_reconcile", True, True, True, True, ()),
    "sources": ("cmd_sources", False, True, True, True, ("cmd_source_pause",)),
    "destinations": ("cmd_destinations", False, True, True, True, ()),
    "db": ("cmd_db_upgrade", False, False, False, False, ()),
    "keys": ("cmd_keys_rotate", False, True, False, True, ()),
    "prune": ("cmd_prune", False, True, True, True, ()),
    "try": ("cmd_try", False, True, False, True, ()),
    "coverage": ("cmd_coverage", False, True, True, True, ()),
    "operations": ("cmd_operations", False, True, False, True, ()),
    "send-test": ("cmd_send_test", False, False, True, False, ()),
    "notify": ("cmd_notify", False, False, True, True, ()),
    "events": ("cmd_events", False, True, False, True, ()),
    "alerts": ("cmd_alerts", False, True, True, True, ()),
    "rejected": ("cmd_rejected", False, True, False, True, ()),
    "diagnose": ("cmd_diagnose", False, True, True, True, ()),
    "listen": ("cmd_listen", False, False, False, False, ()),
}


def subcommands(top: argparse.ArgumentParser) -> list[str]:
    [action] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def test_the_commands_and_their_order() -> None:
    assert [command.name for command in COMMANDS] == list(WIRING)
    assert subcommands(parser.build_parser()) == list(WIRING)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_each_command_is_wired_as_pinned(command: Command) -> None:
    wiring = (
        command.handler.__name__,
        command.traced,
        command.preflight,
        command.sources,
        command.is_async,
        tuple(variant.handler.__name__ for variant in command.variants),
    )
    assert wiring == WIRING[command.name]
    # Its add_* function adds its parser, and only that.
    alone = argparse.ArgumentParser(prog="hookd")
    command.add_parser(parser.add_top_level(alone))
    assert subcommands(alone) == [command.name]
    # Every handler of the row is called as the row's flags call it.
    arguments = ["args", "settings", "sources"] if command.sources else ["args", "settings"]
    for handler in (command.handler, *(variant.handler for variant in command.variants)):
        assert len(inspect.signature(handler).parameters) == len(arguments), handler
        assert inspect.iscoroutinefunction(handler) == command.is_async, handler


@pytest.mark.parametrize(
    ("argv", "handler"),
    [
        (["replay", "01J00000000000000000000000"], "cmd_replay"),
        (["replay", "--source", "github", "--status", "dead"], "cmd_replay"),
        (["replay", "--since", "1h"], "cmd_bulk_replay"),
        (["replay", "--source", "github", "--status", "processed"], "cmd_bulk_replay"),
        (["sources", "list"], "cmd_sources"),
        (["sources", "check"], "cmd_sources"),
        (["sources", "pause", "github"], "cmd_source_pause"),
        (["sources", "resume", "github"], "cmd_source_pause"),
    ],
)
def test_a_form_of_a_command_picks_its_handler(argv: list[str], handler: str) -> None:
    args = parser.build_parser().parse_args(argv)
    assert commands.BY_NAME[args.command].handler_for(args).__name__ == handler


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_what_runs_before_a_handler_and_in_which_order(
    command: Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    settings = Settings.model_construct(config=Path("elsewhere.toml"))  # no environment read
    sources = object()

    async def preflight(given: Settings) -> None:
        assert given is settings
        calls.append("preflight")

    def load_sources(path: object) -> object:
        assert path == settings.config
        calls.append("sources")
        return sources

    def sync_handler(*inputs: Any) -> int:
        calls.append("handler")
        assert inputs[1] is settings
        assert inputs[2:] == ((sources,) if command.sources else ())
        return 7

    async def async_handler(*inputs: Any) -> int:
        return sync_handler(*inputs)

    monkeypatch.setattr(commands.tracing, "setup", lambda name: calls.append(f"trace {name}"))
    monkeypatch.setattr(commands, "preflight", preflight)
    monkeypatch.setattr(commands, "load_sources", load_sources)
    stub = dataclasses.replace(
        command,
        handler=async_handler if command.is_async else sync_handler,
        variants=(),
    )
    monkeypatch.setitem(commands.BY_NAME, command.name, stub)

    assert commands.run(argparse.Namespace(command=command.name), settings) == 7
    _, traced, preflighted, with_sources, _, _ = WIRING[command.name]
    assert calls == [
        *([f"trace {command.name}"] if traced else []),
        *(["preflight"] if preflighted else []),
        *(["sources"] if with_sources else []),
        "handler",
    ]
