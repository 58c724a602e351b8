"""``provider = "token"``: senders that prove themselves with a shared secret in a
header (GitLab's ``X-Gitlab-Token``, many others), not a signature.

The header's value must equal one of the source's ``secrets``. Both sides are hashed
before ``hmac.compare_digest``, so that the comparison's time depends on neither the
token's bytes nor its length. Nothing covers the body: anyone who has seen one request
can send another, so prefer a signing sender where there is a choice. ``handshake``
answers Dropbox's or Microsoft Graph's registration challenge (see ``generic``); X's
CRC needs the HMAC key, so only ``hmac`` sources take it.
"""

from __future__ import annotations

from pydantic import field_validator

from hookd.providers.base import Configurable, Provider
from hookd.providers.generic import (
    Handshake,
    HeaderName,
    SourceSettings,
    challenge_for,
    envelope_for,
    sample_for,
)
from hookd.providers.signatures import SharedToken

NAME = "token"


class TokenSettings(SourceSettings):
    """``[sources.verify]`` of a ``token`` source."""

    header: HeaderName

    @field_validator("handshake")
    @classmethod
    def _handshake(cls, value: Handshake | None) -> Handshake | None:
        if value == "x_crc":
            raise ValueError(
                'x_crc answers with an HMAC keyed with the consumer secret: use provider = "hmac"'
            )
        return value


def bind(settings: TokenSettings) -> Provider:
    """The ``token`` provider as one source's settings make it."""

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        headers, body = sample_for(settings, seq, now)
        return {**headers, settings.header: secret}, body

    return Provider(
        name=NAME,
        scheme=SharedToken(NAME, settings.header),
        envelope=envelope_for(settings, ()),
        sample_event=sample_event,
        configurable=CONFIGURABLE,
        challenge=challenge_for(settings),
    )


CONFIGURABLE = Configurable(settings=TokenSettings, bind=bind)
# What the registry holds: the scheme of example settings. A source is always served
# by ``bind`` of its own table.
EXAMPLE = TokenSettings(header="X-Webhook-Token", dedupe="body_sha256")
PROVIDER = bind(EXAMPLE)
