"""What the command line prints reaches a terminal, and much of it came from senders:
an event's type, headers and body, a handler's error message, a provider's answer. An
escape sequence among them (``ESC [ 2 J``, a title change, a hyperlink) or a carriage
return would be acted on by the terminal instead of shown. So everything the command
line writes to stdout goes through ``SafeStdout``: each C0 control but tab and newline,
DEL, each C1 control and the bidirectional-override characters are written as a
visible ``\\uXXXX`` (valid inside a JSON string too, so ``--json`` output stays JSON).
"""

from __future__ import annotations

import re
from typing import Any, TextIO

UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escaped(text: str) -> str:
    """``text`` with every control character a terminal would act on made visible."""
    return UNSAFE.sub(_visible, text)


class SafeStdout:
    """A text stream that escapes (``escaped``) what it is given, then writes it to the
    stream it wraps; everything else (flush, fileno, isatty, encoding) is the wrapped
    stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        self.wrapped.write(escaped(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)
