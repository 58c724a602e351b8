"""The ``[sources.reconcile]`` models of Paddle, Square and GitLab sources.

Each provider module declares its list API with one of these (``Reconciling(settings=
...)``); the adapters that use them are ``reconcile/providers/{paddle,square,gitlab}.py``.
What the keys mean, and why each provider takes the ones it does, is said per model.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, StrictInt, StrictStr, field_validator

from hookd.providers.reconciling import ReconcileConfig

PADDLE_API_URL = "https://api.paddle.com"
SQUARE_API_URL = "https://connect.squareup.com"
GITLAB_API_URL = "https://gitlab.com/api/v4"

# Paddle IDs: a prefix, then 26 lower-case letters and digits.
PADDLE_SETTING_ID = re.compile(r"ntfset_[a-z\d]{26}")
# A GitLab project: its numeric ID or its path ("group/subgroup/project").
GITLAB_PROJECT_PATH = re.compile(r"[^/\s]+(/[^/\s]+)+")
# Square IDs and event types: printable, no spaces.
SQUARE_WORD = re.compile(r"[A-Za-z0-9_.\-]+")


class PaddleReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Paddle source: the notification destination
    (notification setting) that points at hookd, whose notifications are listed."""

    notification_setting_id: str | None = None
    repair: Literal["fetch", "redeliver"] = "fetch"

    @field_validator("notification_setting_id")
    @classmethod
    def _setting(cls, value: str | None) -> str | None:
        if value is not None and not PADDLE_SETTING_ID.fullmatch(value):
            raise ValueError('must be a notification setting ID ("ntfset_" and 26 characters)')
        return value

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is None and self.notification_setting_id is None:
            return "notification_setting_id", "is required for paddle"
        return missing


class SquareReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Square source: which events to search for.

    Square's Events API cannot send a webhook again, so ``repair`` takes only
    ``"fetch"``. ``event_types`` should be the webhook subscription's event types:
    an event of a type the subscription does not send would otherwise be reported
    missing (and stored)."""

    event_types: tuple[str, ...] = ()
    location_ids: tuple[str, ...] = ()
    merchant_ids: tuple[str, ...] = ()
    repair: Literal["fetch"] = "fetch"

    @field_validator("event_types", "location_ids", "merchant_ids")
    @classmethod
    def _words(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for word in value:
            if not SQUARE_WORD.fullmatch(word):
                raise ValueError(f"{word!r} is not a Square ID or event type")
        return value


class GitLabReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a GitLab source: the project webhook whose events
    (deliveries) are listed, and how a missing one is repaired.

    GitLab allows five resends a minute per webhook and user (an administrator of a
    self-managed instance can change that): ``resends_per_minute`` paces them."""

    project: StrictInt | StrictStr | None = None
    hook_id: int | None = Field(default=None, ge=1)
    repair: Literal["fetch", "redeliver"] = "fetch"
    resends_per_minute: float = Field(default=5.0, gt=0, le=100_000)

    @field_validator("project")
    @classmethod
    def _project(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int):
            if value < 1:
                raise ValueError("must be a project ID (1 or more) or path")
            return value
        if value is None or value.isdigit() or GITLAB_PROJECT_PATH.fullmatch(value):
            return value
        raise ValueError('must be a project ID or path ("group/project")')

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is not None:
            return missing
        if self.project is None:
            return "project", "is required for gitlab"
        if self.hook_id is None:
            return "hook_id", "is required for gitlab"
        return None
