"""Structured logs: a message plus ids as key=value pairs, or one JSON object a line.

Call sites pass ids through ``extra={...}``; payloads and secrets are never
passed, so they can never be printed.

A handler's own records (``logging.getLogger(__name__)`` in the user's module) go
through the root logger to the same output, and while a handler runs its event's
ids are added to every record (``event_context``), so a handler does not pass them.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from hookd.timefmt import iso_z

# uvicorn's records carry ``color_message``, a copy of the message with terminal colours.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """The record's ``extra`` fields: whatever a call site passed (ids), printed as given."""
    return {
        k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
    }


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        parts = [f"{ts}Z", record.levelname.lower(), record.name, record.getMessage()]
        parts += [f"{k}={v}" for k, v in _fields(record).items()]
        if record.exc_info:
            parts.append(self.formatException(record.exc_info))
        return " ".join(str(p) for p in parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": iso_z(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            # `hookd serve --workers N` writes N+1 processes' lines to one stream.
            "pid": record.process,
            **_fields(record),
        }
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


# The ids of the event whose handler runs in this task (and the tasks it starts):
# added to every record emitted meanwhile, whichever logger emits it.
_event: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar(
    "hookd_log_event", default=None
)

# Libraries a handler is likely to use, whose INFO and DEBUG records are about their
# own workings (httpx logs every request): WARNING and above unless a handler's module
# sets their level itself (at import, which comes after ``configure``).
QUIET = (
    "aiosqlite",
    "alembic",
    "asyncio",
    "asyncpg",
    "hpack",
    "httpcore",
    "httpx",
    "multipart",
    "opentelemetry",
    "python_multipart",
    "sqlalchemy",
    "urllib3",
)


@contextlib.contextmanager
def event_context(**fields: Any) -> Iterator[None]:
    """Within the block (and the tasks started in it), every record carries ``fields``
    (those the record does not set itself). Ids only: never a payload or a secret."""
    token = _event.set(fields)
    try:
        yield
    finally:
        _event.reset(token)


class _EventFields(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        fields = _event.get()
        if fields:
            for key, value in fields.items():
                record.__dict__.setdefault(key, value)
        return True


class _HookdHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The one handler ``configure`` installs; told apart from others on the root
    logger (pytest's, an embedding application's), which are left in place."""


# Whether ``configure`` chose JSON lines: ``say`` follows it.
_chosen = {"json_lines": False}


def say(text: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """A line of the command line's own at start or stop ("serving on ...", a start-up
    warning): ``hookd: [warning: ]TEXT`` on stderr, or with JSON logs a JSON record
    (logger ``hookd.cli``), so that every line of a JSON log parses. Printed at any
    HOOKD_LOG_LEVEL, as the plain line always was."""
    if not _chosen["json_lines"]:
        prefix = "warning: " if level == logging.WARNING else ""  # an error says what it is
        print(f"hookd: {prefix}{text}", file=sys.stderr)
        return
    logger = logging.getLogger("hookd.cli")
    logger.handle(logger.makeRecord(logger.name, level, "(hookd)", 0, text, (), None, extra=fields))


def configure(level: str = "INFO", json_lines: bool = False) -> None:
    """Send every record at ``level`` or above to stderr in one format: hookd's,
    arq's, uvicorn's and a handler's own (through the root logger).

    Every process calls it: ``hookd`` itself, and each process ``hookd serve
    --workers N`` starts (from the app factory), since those are spawned, not
    forked, and inherit none of this.
    """
    _chosen["json_lines"] = json_lines
    handler = _HookdHandler()
    handler.setFormatter(JsonFormatter() if json_lines else KeyValueFormatter())
    handler.addFilter(_EventFields())
    # Everything else, a handler's ``logging.getLogger(__name__)`` first: without this
    # its INFO went nowhere and its warnings came out bare (Python's last resort).
    everything = logging.getLogger()
    for old in [h for h in everything.handlers if isinstance(h, _HookdHandler)]:
        everything.removeHandler(old)
    everything.addHandler(handler)
    everything.setLevel(level.upper())
    quiet = max(logging.WARNING, everything.level)
    for name in QUIET:
        library = logging.getLogger(name)
        if library.level == logging.NOTSET:  # not set by a handler's module (or by us)
            library.setLevel(quiet)
    # hookd's, arq's and uvicorn's loggers have the handler themselves and stop there:
    # their records are printed once, whatever else is on the root logger.
    root = logging.getLogger("hookd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # arq logs every job at INFO; its warnings and errors are worth seeing.
    arq = logging.getLogger("arq")
    arq.handlers[:] = [handler]
    arq.setLevel(logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING)
    arq.propagate = False
    # uvicorn's own warnings and errors (an exception in a request, a receiver process
    # that died) in the same format, so a JSON log stays one object a line. Its levels
    # are set by uvicorn's ``log_level``; uvicorn must be given ``log_config=None``, or
    # it replaces this handler with its own.
    server = logging.getLogger("uvicorn")
    server.handlers[:] = [handler]
    server.propagate = False
