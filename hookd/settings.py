"""Process-wide settings, read from ``HOOKD_*`` variables and ``.env``.

``Settings.from_env()`` is the one place the environment is read; everything
else is handed a ``Settings``.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hookd.errors import ConfigError, validation_problem

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# The most processor processes HOOKD_PROCESSORS may ask for.
MAX_PROCESSORS = 64


class Settings(BaseSettings):
    """Process-wide settings: field ``x`` is ``HOOKD_X`` in the environment or in ``.env``."""

    model_config = SettingsConfigDict(env_prefix="HOOKD_", env_file=".env", extra="ignore")

    config: Path = Path("./hookd.toml")
    database_url: str = "sqlite+aiosqlite:///./hookd.db"
    redis_url: str = ""
    admin_token: str = ""
    # Narrower tokens (see hookd.auth): the read-only API and admin pages; /metrics alone.
    read_token: str = ""
    metrics_token: str = ""
    # `hookd listen`'s token: GET /api/events:stream alone (hookd.auth). The stream
    # carries bodies, so it reads as much as the admin token does.
    listen_token: str = ""
    encryption_keys: str = ""
    # Group commit: the most rows one INSERT carries, and how long the first
    # request of a batch may wait for company (0: take what is queued).
    commit_batch_max: int = Field(default=256, ge=1, le=5000)
    commit_window_ms: float = Field(default=0.0, ge=0, le=100)
    # A client must deliver its whole body within this time (slow-loris guard).
    body_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # How long a commit may take before the request gets a 503.
    commit_timeout_s: float = Field(default=10.0, gt=0, le=120)
    # Processing: a claimed event's lease, each handler's time limit, retries
    # (full-jitter exponential backoff between base and cap), claim batch size,
    # events run at once per process, and the outbox sweep's period.
    lease_s: float = Field(default=120.0, gt=0, le=86_400)
    handler_timeout_s: float = Field(default=30.0, gt=0, le=3_600)
    retry_base_s: float = Field(default=1.0, gt=0, le=3_600)
    retry_cap_s: float = Field(default=600.0, gt=0, le=86_400)
    process_batch: int = Field(default=128, ge=1, le=1_000)
    process_concurrency: int = Field(default=32, ge=1, le=1_000)
    sweep_s: float = Field(default=2.0, gt=0, le=600)
    # Without Redis: how many processor processes `hookd serve` runs beside its receiver
    # (0: processing in the receiver's own event loop); ``auto``: 1 on 2+ cores, else 0.
    processors: int | Literal["auto"] = "auto"
    # On SQLite, where the receiver's insert runs: ``process``, a writer process of its
    # own (off the receiver's interpreter); ``thread``, a thread of the receiver;
    # ``auto``, process on 2+ cores, else thread.
    sqlite_writer: Literal["auto", "process", "thread"] = "auto"
    # A reconciliation run's lease on its source, renewed every page; and whether
    # this process keeps the schedule (off when cron runs `hookd reconcile`).
    reconcile_lease_s: float = Field(default=60.0, gt=0, le=3_600)
    reconcile_schedule: bool = True
    # Bulk operations (POST /api/operations, `hookd replay --since`): the events one
    # transaction changes, and the runner's lease, renewed every batch (a runner that
    # died is taken over this long after its last batch).
    operation_batch: int = Field(default=500, ge=1, le=5_000)
    operation_lease_s: float = Field(default=30.0, gt=0, le=3_600)
    # How often `hookd serve` and `hookd worker` apply the retention policy (`hookd
    # prune`), in seconds; 0 turns it off (a cron job runs `hookd prune` instead). A
    # lease in the database lets one process at a time prune.
    prune_every_s: float = Field(default=3600.0, ge=0, le=30 * 86_400)
    log_level: str = "INFO"
    log_json: bool = False
    # Where `hookd serve` listens by default, and so where `hookd send-test` sends.
    # Kept as text and checked only by those two commands: Kubernetes sets
    # HOOKD_PORT=tcp://… in every pod when a Service is named "hookd", and that
    # must not stop the other commands.
    host: str = ""
    port: str = ""
    # `hookd worker` serves its own /metrics and /healthz here (bearer token as for
    # the receiver's /metrics); port 0 turns it off.
    worker_metrics_host: str = "127.0.0.1"
    worker_metrics_port: int = Field(default=9464, ge=0, le=65_535)
    # `hookd send-test`'s private key for a source verified with a public key, when
    # --signing-key does not give one.
    send_test_key: str = ""
    # `hookd listen --resign`: the local Standard Webhooks secret (whsec_...) it signs with.
    listen_resign_secret: str = ""

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.strip().upper() not in LOG_LEVELS:
            # Truncated: the value is one line of an error message, whatever was set.
            shown = value if len(value) <= 40 else value[:40] + "…"
            raise ValueError(f"{shown!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
        return value.strip().upper()

    @field_validator("processors", mode="before")
    @classmethod
    def _processors(cls, value: object) -> int | str:
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        try:
            count = int(text)
        except ValueError:
            count = -1
        if not 0 <= count <= MAX_PROCESSORS:
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise ValueError(
                f"{shown!r} is not a number of processor processes; use auto, 0 (processing "
                f"in the receiver's own process) or up to {MAX_PROCESSORS}"
            )
        return count

    def processor_processes(self) -> int:
        """How many processor processes `hookd serve` starts: none with Redis (`hookd
        worker` processes then), else HOOKD_PROCESSORS, ``auto`` being 1 on 2+ cores."""
        if self.redis_url:
            return 0
        if self.processors == "auto":
            return 1 if (os.cpu_count() or 1) >= 2 else 0
        return self.processors

    @field_validator("config", mode="before")
    @classmethod
    def _config(cls, value: object) -> object:
        # Empty would be Path(""), the current directory: "Is a directory: '.'".
        if isinstance(value, str) and not value.strip():
            raise ValueError(
                "is empty; set it to the sources file's path (or unset it for ./hookd.toml, "
                "or pass --config PATH)"
            )
        return value

    @field_validator("sqlite_writer", mode="before")
    @classmethod
    def _sqlite_writer(cls, value: object) -> str:
        text = str(value).strip().lower()
        if text not in ("auto", "process", "thread"):
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise ValueError(f"{shown!r} is not a SQLite writer; use auto, process or thread")
        return text

    def sqlite_writer_process(self) -> bool:
        """Whether a SQLite receiver inserts through a writer process of its own."""
        if self.sqlite_writer == "auto":
            return (os.cpu_count() or 1) >= 2
        return self.sqlite_writer == "process"

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        # The same parser the connection pools use, so a bad URL stops start-up here
        # instead of raising from deep inside the first connection. The value is not
        # quoted back: a Redis URL may carry a password.
        from redis.asyncio.connection import parse_url

        if value:
            try:
                parse_url(value)
            except (ValueError, TypeError):
                raise ValueError(
                    "not a Redis URL: use redis://HOST:PORT/DB, rediss://HOST:PORT/DB or "
                    "unix:///PATH (or leave it empty: hookd serve then processes events itself)"
                ) from None
        return value

    @field_validator(
        "admin_token", "read_token", "metrics_token", "listen_token", "encryption_keys"
    )
    @classmethod
    def _not_blank(cls, value: str, info: ValidationInfo) -> str:
        # Set, but to spaces: a token no request can carry (a bearer token is read
        # stripped), or no encryption key at all where one was meant (the keys are a
        # comma-separated list, so commas and spaces alone are none either). Empty
        # still means "none".
        text = value.replace(",", "") if info.field_name == "encryption_keys" else value
        if value and not text.strip():
            raise ValueError("is only whitespace; set the real value, or leave it empty for none")
        return value

    @model_validator(mode="after")
    def _tokens_differ(self) -> Settings:
        # A narrower token equal to the admin token would be the admin token: whoever
        # holds the one meant for Prometheus could replay events.
        named = [
            (f"HOOKD_{field.upper()}", getattr(self, field))
            for field in ("admin_token", "read_token", "metrics_token", "listen_token")
        ]
        for i, (name, value) in enumerate(named):
            for other, other_value in named[i + 1 :]:
                if (
                    value
                    and other_value
                    and hmac.compare_digest(value.encode(), other_value.encode())
                ):
                    raise ValueError(f"{name} and {other} must be different tokens")
        return self

    @model_validator(mode="after")
    def _lease_covers_handlers(self) -> Settings:
        if self.lease_s <= self.handler_timeout_s:

            def shown(field: str) -> str:
                value = f"HOOKD_{field.upper()}={getattr(self, field):g}"
                return value if field in self.model_fields_set else value + " (the default)"

            # A lease that can expire while a handler still runs lets a second
            # worker claim the same event and run it again.
            raise ValueError(
                f"{shown('lease_s')} must be longer than {shown('handler_timeout_s')}: "
                "raise HOOKD_LEASE_S or lower HOOKD_HANDLER_TIMEOUT_S"
            )
        return self

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        try:
            return cls(**overrides)
        except ValidationError as exc:
            err = exc.errors()[0]
            # Our own validators' text, and pydantic's in hookd's words.
            message = validation_problem(err, kinds=False)
            if not err["loc"]:  # a rule across several variables names them itself
                raise ConfigError(f"environment: {message}") from None
            key = "HOOKD_" + str(err["loc"][0]).upper()
            raise ConfigError(f"environment: {key}: {message}") from None
        except UnicodeDecodeError:
            raise ConfigError("environment: .env: not UTF-8 text") from None
        except OSError as exc:
            raise ConfigError(f"environment: .env: cannot read: {exc.strerror}") from None
