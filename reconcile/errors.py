"""Reconciliation errors, each with a reason code fit for a run record and a log."""

from __future__ import annotations

from ingest.errors import HookdError


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
