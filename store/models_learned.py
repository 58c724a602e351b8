"""The table of signing secrets learned in a handshake (migration 0019), beside
``store.models``, which imports this module so that every table is in one metadata.

A sender such as Asana hands its signing secret over in a handshake instead of having
it configured (``hookd.providers.base.LearnsSecret``). The receiver that answers the
handshake writes the secret here, sealed with ``HOOKD_ENCRYPTION_KEYS`` when keys are
set (as event bodies are), so that every receiver process verifies with it.

One row per (source, the configured token that opened the handshake): the primary key
is what makes a second handshake with the same token fail, whichever process it
reaches, so a secret once learned is never replaced.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.models import UTCDateTime


class LearnedSecret(SQLModel, table=True):
    __tablename__ = "learned_secrets"

    source: str = Field(primary_key=True, max_length=64)
    # SHA-256 (hex) of the configured token that opened the handshake: never the token.
    opened_by: str = Field(primary_key=True, max_length=64)
    secret: bytes = Field(sa_column=sa.Column(sa.LargeBinary(), nullable=False))
    secret_encrypted: bool = False
    learned_at: datetime = Field(sa_column=sa.Column(UTCDateTime(), nullable=False))


LEARNED_SECRETS: sa.Table = LearnedSecret.__table__  # type: ignore[attr-defined]
