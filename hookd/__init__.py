"""hookd: verified, durable, deduplicated webhooks.

The handler API is all a handler module needs::

    from hookd import Event, PermanentError

    async def on_github(event: Event) -> None:
        ...
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from hookd.errors import PermanentError
from hookd.event import Event

try:
    __version__ = version("hookd")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Event", "PermanentError", "__version__"]
