"""``hookd send-test``: correctly signed sample events, sent to a source of a running
``hookd serve`` (or to ``--url``)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
from pathlib import Path

import httpx

from hookd.cli.parser import DEFAULT_HOST, EXIT_FAIL, EXIT_OK, listen_port
from hookd.errors import ConfigError
from hookd.providers.signing import chosen_event
from hookd.settings import Settings
from hookd.sources import Sources


def send_test_url(settings: Settings, source: str) -> str:
    """Where ``hookd serve`` listens with the same environment (HOOKD_HOST, HOOKD_PORT)."""
    host = settings.host or DEFAULT_HOST
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:  # a host name
        pass
    else:
        if address.is_unspecified:  # listening on every address: loopback is one of them
            host = DEFAULT_HOST
        elif address.version == 6:
            host = f"[{address}]"
    return f"http://{host}:{listen_port(settings, '--url')}/hooks/{source}"


def unreachable(url: str, exc: httpx.HTTPError, url_given: bool) -> str:
    """One line: where send-test tried, why it failed, and what to do."""
    why = type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        why = "could not connect (nothing listens there, or the host is unknown)"
    elif isinstance(exc, httpx.TimeoutException):
        why = f"no answer in time ({type(exc).__name__})"
    if url_given:
        todo = "check --url, and that hookd serve runs there"
    else:
        todo = (
            "start `hookd serve` with the same HOOKD_HOST/HOOKD_PORT, or set them to where it "
            "listens, or pass --url"
        )
    return f"cannot reach {url}: {why}; {todo}"


def read_body(path: Path | None) -> bytes | None:
    """The ``--body`` file's bytes, or one line saying why they cannot be sent."""
    if path is None:
        return None
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"--body {path}: cannot read it ({exc.strerror or type(exc).__name__}); give the "
            "path of a file that holds the request body"
        ) from None
    if not body:
        raise ConfigError(f"--body {path}: the file is empty; give the request body to send")
    return body


def cmd_send_test(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    source = sources.get(args.source)
    if source is None:
        known = ", ".join(s.name for s in sources)
        raise ConfigError(f"{sources.path}: no source named {args.source!r} (known: {known})")
    secret = source.config.secrets[0]
    needed = source.adapter.signing_key_needed(secret)
    if needed is not None:
        secret = args.signing_key or settings.send_test_key
        if not secret:
            raise ConfigError(
                f"{sources.path}: source {source.name!r}: key 'secrets.0': a public key "
                f"cannot sign; pass --signing-key with {needed} (or set HOOKD_SEND_TEST_KEY)"
            )
    chosen = read_body(args.body)
    url = args.url or send_test_url(settings, source.name)
    failures = 0
    with httpx.Client(timeout=10.0) as client:
        for seq in range(1, args.count + 1):
            try:
                headers, body = chosen_event(
                    source.adapter,
                    secret,
                    seq,
                    int(time.time()),
                    event_type=args.type,
                    body=chosen,
                )
            except ValueError as exc:
                option = "--type/--body" if args.type or chosen is not None else "--signing-key"
                raise ConfigError(f"hookd send-test: {option}: {exc}") from None
            try:
                response = client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                print(f"hookd: {unreachable(url, exc, args.url is not None)}", file=sys.stderr)
                return EXIT_FAIL
            try:
                answer = response.json()
            except ValueError:
                answer = {"raw": response.text[:200]}
            print(f"{response.status_code} {json.dumps(answer)}")
            if not response.is_success:
                failures += 1
    return EXIT_FAIL if failures else EXIT_OK
