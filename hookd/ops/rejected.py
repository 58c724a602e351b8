"""Rejected requests on record (``rejected_requests``, written by ``ingest.rejected``):
the newest, of one source and reason when asked, for the API, the admin UI and the CLI.
A listing shows what a row keeps except the body, which stays in the database."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest
from hookd.ops.queries import has_nul
from hookd.ops.rejected_models import RejectedList, RejectedRequest
from store.intake import rejected as rejected_rows
from store.intake.rejected import RejectedRow

MAX_LIST = 500
DEFAULT_LIMIT = 50


def rejected_of(row: RejectedRow) -> RejectedRequest:
    return RejectedRequest(
        id=row.id,
        source=row.source,
        received_at=row.received_at,
        reason=row.reason,
        status_code=row.status_code,
        client=row.client,
        content_type=row.content_type,
        content_length=row.content_length,
        content_encoding=row.content_encoding,
        header_names=list(row.header_names),
        signature_headers=list(row.signature_headers),
        scheme_inputs=dict(row.scheme_inputs),
        body_sha256=row.body_sha256,
        body_kept=row.body is not None,
    )


class RejectedOps:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def list(
        self, *, source: str | None = None, reason: str | None = None, limit: int = DEFAULT_LIMIT
    ) -> RejectedList:
        if not 1 <= limit <= MAX_LIST:
            raise BadRequest("limit", f"limit must be between 1 and {MAX_LIST}")
        if has_nul(source, reason):
            raise BadRequest("text", "filters must not contain NUL")
        async with self._engine.connect() as conn:
            rows = await rejected_rows.recent(conn, source=source, reason=reason, limit=limit)
        return RejectedList(rejected=[rejected_of(row) for row in rows])
