"""A sources file's text parsed as ``hookd.toml``, and the one-line error it is refused
with: the config tests check each refusal's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookd.errors import ConfigError
from hookd.sources import Sources, parse_sources

P = Path("hookd.toml")


def parse(text: str, env: dict[str, str] | None = None) -> Sources:
    return parse_sources(text, P, env or {})


def error_of(text: str, env: dict[str, str] | None = None) -> str:
    """The message ``text`` is refused with, asserted to be one line."""
    with pytest.raises(ConfigError) as info:
        parse(text, env)
    message = str(info.value)
    assert "\n" not in message
    return message
