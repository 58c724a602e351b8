"""The table of refused webhook requests (migration 0018), beside ``store.models``,
which imports this module so that every table is in one metadata.

A row says why a request was refused and what it looked like, never what it said:
header names without their values, the names of the signature headers present,
the few signature inputs that are safe to keep (``ingest.rejected``), the body's
SHA-256, and the body itself only for a source that keeps rejected bodies (sealed
with ``HOOKD_ENCRYPTION_KEYS`` when keys are set, as event bodies are).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.models import UTCDateTime


class RejectedRequest(SQLModel, table=True):
    __tablename__ = "rejected_requests"
    __table_args__ = (sa.Index("ix_rejected_requests_source", "source", "received_at"),)

    id: str = Field(primary_key=True, max_length=26)
    source: str = Field(max_length=64)
    received_at: datetime = Field(sa_column=sa.Column(UTCDateTime(), nullable=False))
    # The reason label of hookd_webhook_rejections_total, and the HTTP status answered.
    reason: str = Field(max_length=64)
    status_code: int
    client: str | None = Field(default=None, max_length=64)
    content_type: str | None = Field(default=None, max_length=255)
    content_length: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger(), nullable=True)
    )
    content_encoding: str | None = Field(default=None, max_length=64)
    header_names: list[str] = Field(
        default_factory=list, sa_column=sa.Column(sa.JSON(), nullable=False)
    )
    signature_headers: list[str] = Field(
        default_factory=list, sa_column=sa.Column(sa.JSON(), nullable=False)
    )
    scheme_inputs: dict[str, Any] = Field(
        default_factory=dict, sa_column=sa.Column(sa.JSON(), nullable=False)
    )
    # None when the body was never read (refused on its head, or over the limit).
    body_sha256: str | None = Field(default=None, max_length=64)
    body: bytes | None = Field(default=None, sa_column=sa.Column(sa.LargeBinary(), nullable=True))
    body_encrypted: bool = False


REJECTED_REQUESTS: sa.Table = RejectedRequest.__table__  # type: ignore[attr-defined]
