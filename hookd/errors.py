"""One error tree for all of hookd, with reason codes.

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


class PermanentError(HookdError):
    """A handler failure that retrying cannot fix (e.g. a 4xx from the target)."""


class ReconcileError(HookdError):
    """A run could not finish; the cursor stays where it was."""


class AuthFailure(ReconcileError):
    """The provider refused our credentials (401/403, Slack invalid_auth)."""


class RateLimited(ReconcileError):
    """The provider asked us to wait longer than a run may wait."""

    def __init__(self, wait_s: float) -> None:
        super().__init__("rate_limited", f"provider asks to wait {wait_s:.0f}s")
        self.wait_s = wait_s


class LeaseLost(ReconcileError):
    """Another run took the source's lease over (ours expired)."""


class BadRequest(HookdError):
    """A query the operations refuse (HTTP 400); ``field`` names what is wrong
    (``status``, ``origin``, ``limit``, ``cursor``, or ``text`` for a NUL in a filter)
    and ``detail`` is the sentence the operations API answers with."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__("bad_request", detail)
        self.field = field


class NotFound(HookdError):
    """No such event, source or reconciliation run (HTTP 404); ``kind`` says which.
    ``said`` is a sentence for the caller when there is more to say than "no such
    thing" (an event pruned by retention: when, and how it had ended)."""

    def __init__(self, kind: str, said: str = "") -> None:
        super().__init__("not_found", kind)
        self.kind = kind
        self.said = said


class Conflict(HookdError):
    """The thing exists but cannot be done now (HTTP 409): ``in_progress`` (the event is
    being processed), ``not_configured`` (the source has no reconciliation)."""
