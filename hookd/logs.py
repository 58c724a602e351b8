"""Structured logs: a message plus ids as key=value pairs, or one JSON object a line.

Call sites pass ids through ``extra={...}``; payloads and secrets are never
passed, so they can never be printed.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from hookd.timefmt import iso_z

# uvicorn's records carry ``color_message``, a copy of the message with terminal colours.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
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
        data: dict[str, Any] = {
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


def configure(level: str = "INFO", json_lines: bool = False) -> None:
    """Send hookd's, arq's and uvicorn's records to stderr in one format.

    Every process calls it: ``hookd`` itself, and each process ``hookd serve
    --workers N`` starts (from the app factory), since those are spawned, not
    forked, and inherit none of this.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_lines else KeyValueFormatter())
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
