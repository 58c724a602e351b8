"""The other side of hookd's notification channels, real and on loopback: emulators of
Slack's incoming webhooks and of PagerDuty's Events API v2 (each checks the documented
shape and answers as the service does, or fails as told), a webhook receiver that
verifies with the ``standardwebhooks`` package, and an SMTP server (aiosmtpd) with
STARTTLS on a self-signed certificate made here, and a login."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.support.server import free_port

SLACK_TOKEN_PATH = "/services/T0HOOKD01/B0HOOKD02/s3cr3tSlackT0kenXYZ123456"
ROUTING_KEY = "R0ut1ngK3yOfTheHookdTestService"[:31] + "Z"  # 32 characters, as PagerDuty's
SMTP_USER, SMTP_PASSWORD = "alerts", "smtp-Pa55word-never-shown"


@dataclass
class Failing:
    """What an emulator answers instead of its success, while set: (status, body)."""

    answer: tuple[int, str] | None = None
    delay_s: float = 0.0
    location: str | None = None


@dataclass
class SlackEmulator:
    """``POST /services/T/B/TOKEN``: 200 ``ok``; 400 ``invalid_payload`` for a body that is
    not Slack's shape; 404 ``no_service`` for another path. Records what it accepted."""

    received: list[dict[str, Any]] = field(default_factory=list)
    failing: Failing = field(default_factory=Failing)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/services/{rest:path}", self.post, methods=["POST"])])

    async def post(self, request: Request) -> Response:
        if self.failing.delay_s:
            await asyncio.sleep(self.failing.delay_s)  # the caller has gone by then
            return PlainTextResponse("ok")
        if self.failing.answer is not None:
            status, body = self.failing.answer
            headers = {"location": self.failing.location} if self.failing.location else {}
            return PlainTextResponse(body, status_code=status, headers=headers)
        if request.url.path != SLACK_TOKEN_PATH:
            return PlainTextResponse("no_service", status_code=404)
        try:
            payload = json.loads(await request.body())
        except ValueError:
            return PlainTextResponse("invalid_payload", status_code=400)
        if slack_problem(payload) is not None:
            return PlainTextResponse("invalid_payload", status_code=400)
        self.received.append(payload)
        return PlainTextResponse("ok")


def slack_problem(payload: Any) -> str | None:
    """What is wrong with an incoming webhook's payload, by Slack's documented shape."""
    if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
        return "text: a string"
    blocks = payload.get("blocks", [])
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "blocks: at most 50"
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            text = block["text"]
            if text["type"] != "plain_text" or not 0 < len(text["text"]) <= 150:
                return "header: plain_text, 1..150"
        elif kind == "section":
            text = block["text"]
            if text["type"] not in ("mrkdwn", "plain_text") or not 0 < len(text["text"]) <= 3000:
                return "section: 1..3000"
        elif kind == "context":
            if not 0 < len(block["elements"]) <= 10:
                return "context: 1..10 elements"
        else:
            return f"unknown block {kind}"
    return None


_PD_SEVERITIES = ("critical", "error", "warning", "info")


@dataclass
class PagerDutyEmulator:
    """``POST /v2/enqueue``: 202 ``{"status": "success", "dedup_key": ...}``; 400
    ``invalid event`` with PagerDuty's errors for an event not of the documented shape."""

    received: list[dict[str, Any]] = field(default_factory=list)
    failing: Failing = field(default_factory=Failing)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v2/enqueue", self.post, methods=["POST"])])

    async def post(self, request: Request) -> Response:
        if self.failing.answer is not None:
            status, body = self.failing.answer
            return PlainTextResponse(body, status_code=status)
        try:
            event = json.loads(await request.body())
        except ValueError:
            return _invalid(["Event object is not valid JSON"])
        errors = pagerduty_problems(event)
        if errors:
            return _invalid(errors)
        self.received.append(event)
        return JSONResponse(
            {"status": "success", "message": "Event processed", "dedup_key": event["dedup_key"]},
            status_code=202,
        )


def _invalid(errors: list[str]) -> Response:
    return JSONResponse(
        {"status": "invalid event", "message": "Event object is invalid", "errors": errors},
        status_code=400,
    )


def pagerduty_problems(event: Any) -> list[str]:
    """The Events API v2's checks of an event, in its words."""
    if not isinstance(event, dict):
        return ["Event object is not an object"]
    errors = []
    if not isinstance(event.get("routing_key"), str) or len(event["routing_key"]) != 32:
        errors.append("Length of 'routing_key' is incorrect (should be 32 characters)")
    action = event.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errors.append("'event_action' is invalid (must be one of trigger, acknowledge, resolve)")
    key = event.get("dedup_key")
    if action != "trigger" and not isinstance(key, str):
        errors.append("'dedup_key' is required for acknowledge and resolve")
    if isinstance(key, str) and not 0 < len(key) <= 255:
        errors.append("'dedup_key' must be 1 to 255 characters")
    if action == "trigger":
        payload = event.get("payload")
        if not isinstance(payload, dict):
            return [*errors, "'payload' is missing or not an object"]
        summary = payload.get("summary")
        if not isinstance(summary, str) or not 0 < len(summary) <= 1024:
            errors.append("'payload.summary' is missing or longer than 1024 characters")
        if not isinstance(payload.get("source"), str) or not payload["source"]:
            errors.append("'payload.source' is missing")
        if payload.get("severity") not in _PD_SEVERITIES:
            errors.append("'payload.severity' is invalid (must be critical, error, warning, info)")
        for link in event.get("links", []):
            if not isinstance(link, dict) or not isinstance(link.get("href"), str):
                errors.append("'links' entries need an href")
    return errors


@dataclass
class WebhookReceiver:
    """A receiver that verifies each POST with the ``standardwebhooks`` package: 204, or
    401 when the signature does not hold."""

    secret: str
    received: list[tuple[dict[str, str], Any]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/alerts", self.post, methods=["POST"])])

    async def post(self, request: Request) -> Response:
        body = await request.body()
        headers = dict(request.headers)
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            return PlainTextResponse("bad signature", status_code=401)
        self.received.append((headers, payload))
        return Response(status_code=204)


# -- SMTP ----------------------------------------------------------------------------


def self_signed(folder: Path, name: str = "smtp") -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key: (cert, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hookd test SMTP")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass
class Mailbox:
    """aiosmtpd's handler: keeps each message, or answers ``reply`` to DATA while set."""

    received: list[Envelope] = field(default_factory=list)
    reply: str | None = None

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.reply is not None:
            return self.reply
        self.received.append(envelope)
        return "250 Message accepted for delivery"


def _login(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
) -> AuthResult:
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == SMTP_USER.encode()
        and auth_data.password == SMTP_PASSWORD.encode()
    )
    # handled=False: the server answers 535 itself (True would leave the client waiting).
    return AuthResult(success=ok, handled=False)


@dataclass
class SmtpServer:
    mailbox: Mailbox
    port: int
    cert: Path


def smtp_server(folder: Path, *, tls: bool = True, implicit: bool = False) -> Iterator[SmtpServer]:
    """An SMTP server on 127.0.0.1 in a thread of its own: STARTTLS with a self-signed
    certificate (``tls``; or TLS from the first byte, ``implicit``), AUTH PLAIN/LOGIN
    after TLS only, for ``SMTP_USER``/``SMTP_PASSWORD``. A generator for a fixture."""
    cert, key = self_signed(folder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    mailbox = Mailbox()
    port = free_port()
    options: dict[str, Any] = {"authenticator": _login, "auth_require_tls": True}
    if tls and not implicit:
        options |= {"tls_context": context, "require_starttls": True}
    if implicit:
        # aiosmtpd counts only STARTTLS as TLS for AUTH; here every byte is TLS already.
        options["auth_require_tls"] = False
    controller = Controller(
        mailbox,
        hostname="127.0.0.1",
        port=port,
        ssl_context=context if implicit else None,
        server_hostname="127.0.0.1",
        **options,
    )
    controller.start()
    try:
        yield SmtpServer(mailbox, port, cert)
    finally:
        controller.stop()
