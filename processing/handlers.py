"""Handlers, the code run for each stored event: what they receive and how they are
found. (``[sources.forward]`` is a destination: ``processing.destinations``.)

A handler is ``async def handler(event) -> None``. Raising means "retry later";
raising ``PermanentError`` means "this will never work": the event goes dead
at once with the reason.
"""

from __future__ import annotations

import importlib
import inspect

import httpx

from hookd.errors import ConfigError
from hookd.event import Handler
from hookd.routing import FORWARD
from hookd.sources import Sources

__all__ = ["FORWARD", "import_handler", "load_handlers"]


def import_ref(what: str, ref: str) -> tuple[str, str, object]:
    """A ``module:attribute`` reference of the sources file, imported: the module's name,
    the attribute's and the attribute (None if the module has none). ConfigError, naming
    ``what`` and ``ref``, when the module cannot be imported."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {ref!r}: cannot import {module_name}: {exc}") from None
    return module_name, attr, getattr(module, attr, None)


def import_handler(ref: str) -> Handler:
    module_name, attr, func = import_ref("handler", ref)
    if func is None:
        raise ConfigError(f"handler {ref!r}: {module_name} has no attribute {attr!r}")
    if not inspect.iscoroutinefunction(func):
        raise ConfigError(f"handler {ref!r}: must be an async function")
    handler: Handler = func
    return handler


def load_handlers(
    sources: Sources, client: httpx.AsyncClient
) -> dict[str, list[tuple[str, Handler]]]:
    """Per source, the (name, callable) pairs to run in order; import errors stop start-up.

    ``[sources.forward]`` is not among them: it is a destination, delivered beside the
    handlers by ``processing.destinations.Router`` as ``forward``. ``client`` is kept
    for callers of this signature."""
    del client
    return {
        source.name: [(ref, import_handler(ref)) for ref in source.config.handler_refs]
        for source in sources
    }
