"""The rejected-request resources hookd.ops answers with (``hookd.ops.rejected``),
beside ``hookd.ops.models`` and in its style: one pydantic model per resource, extra
keys forbidden, a docstring that is the schema's description."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from hookd.ops.models import Resource, Ulid


class RejectedRequest(Resource):
    """A request hookd refused, as it was recorded: why, what was answered, header
    names (never their values), the signature headers present and the inputs of the
    signature that are safe to show. Never a body, a signature or a secret."""

    id: Ulid
    source: str
    received_at: datetime
    reason: str = Field(description="The reason code, as hookd_webhook_rejections_total labels it.")
    status_code: int = Field(description="The HTTP status hookd answered.")
    client: str | None = Field(description="The client's address, host:port.")
    content_type: str | None
    content_length: int | None = Field(description="The length the request declared.")
    content_encoding: str | None
    header_names: list[str] = Field(description="The request's header names, lower-case, sorted.")
    signature_headers: list[str] = Field(
        description="Which of the provider's signature headers were present (names only)."
    )
    scheme_inputs: dict[str, object] = Field(
        description="A signed timestamp and its skew_s from this server's clock, and the "
        "names of a signature header's entries (t, v1): never a signature."
    )
    body_sha256: str | None = Field(description="SHA-256 of the body, when it was read.")
    body_kept: bool = Field(description="The body is kept (keep_rejected_bodies), sealed.")


class RejectedList(Resource):
    """Rejected requests, newest first."""

    rejected: list[RejectedRequest]
