"""The models of the sources file's ``[[notify]]`` tables (where a notification goes:
Slack, email, a signed webhook, PagerDuty) and of its ``[alerts]`` table (when an alert
opens, how often conditions are evaluated, how many notifications a channel may get);
``hookd.sources.notify_checks`` reads them from the file.

The alert kinds and the severity words are defined here, below ``hookd.notify``, so
that a ``[[notify]]`` table can be checked against them at load: ``hookd.notify.message``
re-exports ``ALERT_KINDS`` (one list for the evaluation, the channels and this file).
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hookd.errors import did_you_mean
from hookd.providers import PROVIDERS
from hookd.routing import checked_name

# What an alert can be about (hookd.notify.message re-exports this; docs/operations.md
# describes each).
ALERT_KINDS = (
    "dead",
    "breaker_open",
    "coverage_hole",
    "registration_drift",
    "ack_violation",
    "reconcile_failing",
    "prune_behind",
    "rejections",
)
SEVERITIES = ("info", "warning", "critical")
NOTIFY_KINDS = ("slack", "email", "webhook", "pagerduty")
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
SMTP_PORT, SMTPS_PORT = 587, 465


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class SmtpServer:
    """An ``smtp_url`` read: where to connect, and as whom. ``implicit_tls``: smtps://,
    TLS from the first byte (port 465), rather than STARTTLS after the greeting."""

    host: str
    port: int
    user: str | None
    password: str | None
    implicit_tls: bool

    def __repr__(self) -> str:  # never the password, whoever prints it
        return f"SmtpServer({self.host!r}, {self.port}, user={self.user!r})"


def smtp_server(url: str) -> SmtpServer:
    """``smtp://[user:password@]host[:port]`` (or ``smtps://``) read; ValueError with a
    sentence that never repeats the URL (it may hold the password)."""
    form = "must be smtp://[user:password@]host[:port] (or smtps:// for TLS from the start)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(form + "; the port is not a number from 1 to 65535") from None
    scheme = parts.scheme.lower()
    if scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ValueError(form)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(form + ", with nothing after the host and port")
    if parts.password is not None and not parts.username:
        raise ValueError(form + "; a password needs a user")
    implicit = scheme == "smtps"
    return SmtpServer(
        host=parts.hostname,
        port=port or (SMTPS_PORT if implicit else SMTP_PORT),
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        implicit_tls=implicit,
    )


def _address(value: str) -> str:
    """An email address, as ``a@example.com`` or ``Name <a@example.com>``."""
    if any(c in value for c in "\r\n\0"):
        raise ValueError("must be one email address on one line")
    _, addr = parseaddr(value)
    local, at, domain = addr.rpartition("@")
    if not (at and local and domain) or " " in addr:
        raise ValueError("must be an email address: ops@example.com or Ops <ops@example.com>")
    return value


class NotifyConfig(_Strict):
    """One ``[[notify]]`` table: a channel and the alerts it wants."""

    name: str
    kind: Literal["slack", "email", "webhook", "pagerduty"]
    # slack: the incoming webhook; webhook: any URL; pagerduty: the Events API v2 enqueue
    # URL (PAGERDUTY_URL when not set).
    url: str | None = None
    secret: str | None = None  # webhook: whsec_ (Standard Webhooks v1)
    routing_key: str | None = None  # pagerduty
    smtp_url: str | None = None  # email
    sender: str | None = Field(default=None, alias="from")
    to: tuple[str, ...] | None = Field(default=None, min_length=1)
    starttls: bool = True
    # A PEM file of the certificates to trust for a private SMTP server, resolved from
    # the sources file's folder at load.
    ca_file: str | None = None
    kinds: tuple[str, ...] = Field(default=ALERT_KINDS, min_length=1)
    sources: tuple[str, ...] | None = Field(default=None, min_length=1)  # None: every source
    min_severity: Literal["info", "warning", "critical"] = "warning"
    # Quiet time before a still-open alert is sent again (0: never).
    reminder_s: float = Field(default=14_400.0, ge=0, le=30 * 86_400, allow_inf_nan=False)
    timeout_s: float = Field(default=10.0, gt=0, le=300, allow_inf_nan=False)
    allow_insecure: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return checked_name(value)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            host = urlsplit(value).hostname
        except ValueError:
            host = None
        if not value.lower().startswith(("http://", "https://")) or not host or " " in value:
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("secret")
    @classmethod
    def _whsec(cls, value: str) -> str:
        if not value.startswith("whsec_"):
            raise ValueError("must be a whsec_ secret (Standard Webhooks)")
        PROVIDERS["standard"].parse_secret(value)
        return value

    @field_validator("routing_key")
    @classmethod
    def _routing_key(cls, value: str) -> str:
        if not value or not all("!" <= c <= "~" for c in value):
            raise ValueError(
                "must be the service's integration key (letters and digits, no spaces)"
            )
        return value

    @field_validator("smtp_url")
    @classmethod
    def _smtp_url(cls, value: str) -> str:
        smtp_server(value)
        return value

    @field_validator("sender")
    @classmethod
    def _sender(cls, value: str) -> str:
        return _address(value)

    @field_validator("to")
    @classmethod
    def _to(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            _address(address)
        return value

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for kind in value:
            if kind not in ALERT_KINDS:
                shown = kind if len(kind) <= 40 else kind[:40] + "…"
                raise ValueError(
                    f"unknown alert kind {shown!r}{did_you_mean(kind, ALERT_KINDS)}; "
                    f"use any of {', '.join(ALERT_KINDS)}"
                )
        return tuple(dict.fromkeys(value))

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value))

    @property
    def smtp(self) -> SmtpServer:
        """The email channel's server (its ``smtp_url`` read)."""
        assert self.smtp_url is not None
        return smtp_server(self.smtp_url)

    @property
    def post_url(self) -> str:
        """Where an HTTP channel POSTs: its ``url``, PagerDuty's by default."""
        if self.url is not None:
            return self.url
        assert self.kind == "pagerduty"
        return PAGERDUTY_URL

    @property
    def tls(self) -> bool:
        """Whether an email channel speaks TLS (smtps://, or STARTTLS)."""
        return self.smtp.implicit_tls or self.starttls

    def __repr_args__(self) -> Any:  # a repr (a test's failure, a debugger) hides secrets
        hidden = {"url", "secret", "routing_key", "smtp_url"}
        for key, value in super().__repr_args__():
            yield key, ("…" if key in hidden and value is not None else value)


class AlertsConfig(_Strict):
    """``[alerts]``: how often alert conditions are evaluated, how many notifications a
    channel may get, and each kind's threshold (when its alert opens)."""

    evaluate_every_s: float = Field(default=30.0, gt=0, le=86_400, allow_inf_nan=False)
    # Notifications to one channel in an hour, at most (all kinds together).
    max_per_hour: int = Field(default=30, ge=1, le=10_000)
    # Alerts of one kind opened within this window go out as one message.
    group_s: float = Field(default=60.0, ge=0, le=86_400, allow_inf_nan=False)
    # Dead events of a source before its alert opens.
    dead: int = Field(default=1, ge=1)
    # How long a destination's breaker stays open before its alert opens.
    breaker_open_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    # How old a coverage hole is before its alert opens.
    coverage_hole_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    # Failed reconciliation runs in a row.
    reconcile_failing: int = Field(default=3, ge=1)
    # How far behind its schedule pruning is.
    prune_behind_s: float = Field(default=172_800.0, gt=0, allow_inf_nan=False)
    # Rejected requests of a source in 5 minutes.
    rejections: int = Field(default=20, ge=1)
    ack_violation: int = Field(default=1, ge=1)
    registration_drift: int = Field(default=1, ge=1)
    # Where the admin UI is reached from outside (``https://hookd.example.com``): a
    # message's links to the evidence are absolute under it; unset, they are paths.
    admin_url: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


# Every key a [[notify]] table takes, as written (``from``, not the model's ``sender``).
NOTIFY_KEYS = tuple((field.alias or name) for name, field in NotifyConfig.model_fields.items())
