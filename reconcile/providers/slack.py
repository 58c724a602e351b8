"""Slack ``conversations.history`` per configured channel, newest first, with
``oldest`` and ``cursor``. Keys are ``msg:{team}:{channel}:{ts}``, exactly as
the receiver keys a message webhook, so the two collide. Slack's limits for
apps outside its Marketplace are tight (one request a minute, fifteen
messages): requests are paced to ``requests_per_minute`` on our side."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TypedDict

from hookd.errors import AuthFailure, ReconcileError
from hookd.providers.slack import SlackReconcile, is_history_message, message_key
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, settings_of
from store.intake.events import NewEvent

AUTH_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
PAGE_LIMIT = 15


class _Cursor(TypedDict, total=False):
    next_cursor: str


class SlackAnswer(TypedDict, total=False):
    """A Web API method's answer, the fields read of it: ``ok`` and ``error`` (every
    method), ``team_id`` (``auth.test``), ``messages``, ``has_more`` and
    ``response_metadata.next_cursor`` (``conversations.history``). A message is kept
    whole: it becomes the repaired event."""

    ok: bool
    error: str
    team_id: str
    messages: list[dict[str, object]]
    has_more: bool
    response_metadata: _Cursor


def settings(source: Source) -> SlackReconcile:
    return settings_of(source, SlackReconcile)


class SlackAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._base = api_url(source.config)
        self._channels = settings(source).channels
        # Found by the first run (auth.test) and kept for the next ones.
        self.team_id: str | None = meta.get("team_id")

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        return {"Authorization": f"Bearer {settings(source).token or ''}"}

    @classmethod
    def request_interval_s(cls, source: Source) -> float:
        return 60.0 / settings(source).requests_per_minute

    def kept(self) -> dict[str, str]:
        return {"team_id": self.team_id} if self.team_id else {}

    async def _call(self, method: str, params: Mapping[str, str | int]) -> SlackAnswer:
        answer: SlackAnswer = (
            await self.api.request("POST", f"{self._base}/{method}", data=params)
        ).json()
        if not answer.get("ok"):
            error = str(answer.get("error", "unknown"))
            if error in AUTH_ERRORS:
                raise AuthFailure("auth_failed", f"Slack {error}")
            raise ReconcileError("provider_refused", f"Slack {error}")
        return answer

    async def team(self) -> str:
        if self.team_id is None:
            answer = await self._call("auth.test", {})
            self.team_id = str(answer["team_id"])
        return self.team_id

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        team = await self.team()
        for channel in self._channels:
            params: dict[str, str | int] = {
                "channel": channel,
                "oldest": f"{since:.6f}",
                "limit": PAGE_LIMIT,
            }
            while True:
                answer = await self._call("conversations.history", params)
                items = []
                for message in answer.get("messages", []):
                    ts = message.get("ts")
                    if not isinstance(ts, str) or not is_history_message(message):
                        continue
                    obj = {**message, "channel": channel}
                    items.append(Item(key=message_key(team, channel, ts), time=float(ts), obj=obj))
                yield items
                cursor = (answer.get("response_metadata") or {}).get("next_cursor")
                if not answer.get("has_more") or not cursor:
                    break
                params["cursor"] = cursor

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        message = item.obj or {}
        team = await self.team()
        body = {
            "type": "event_callback",
            "team_id": team,
            "event": {**message, "event_ts": message.get("ts")},
            "hookd_reconciled": True,
        }
        return self.stored_json(
            item,
            body,
            type_="message",
            occurred=item.time,
            how="reconcile:slack-api",
            received_at=received_at,
        )
