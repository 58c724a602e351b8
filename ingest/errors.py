"""One error root for the receiver, with reason codes.

Exceptions carry a short machine-readable ``reason`` and never a body, header
value or secret, so they are safe to log and to return to a caller.
"""

from __future__ import annotations


class HookdError(Exception):
    """Root of every error hookd raises on purpose."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason if not detail else f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SignatureError(HookdError):
    """The request is not proven to come from the provider (HTTP 401)."""


class PayloadError(HookdError):
    """The request is authentic but its payload cannot be understood (HTTP 400)."""


class ConfigError(HookdError):
    """The configuration cannot be used; ``str()`` is the one line to print."""

    def __init__(self, message: str) -> None:
        super().__init__("config_error", message)
        self.message = message

    def __str__(self) -> str:
        return self.message
