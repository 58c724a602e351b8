"""The log records one hookd logger emits, in-process.

A handler on the logger itself, not pytest's ``caplog`` on the root: once
``hookd.logs.configure`` has run in the test process, "hookd" no longer
propagates to the root logger.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def about(self, event_id: str) -> list[logging.LogRecord]:
        """The records whose ``event_id`` field is ``event_id``."""
        return [r for r in self.records if r.__dict__.get("event_id") == event_id]


@contextlib.contextmanager
def captured(name: str) -> Iterator[Records]:
    logger = logging.getLogger(name)
    handler = Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
