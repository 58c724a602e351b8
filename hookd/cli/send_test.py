"""``hookd send-test``: correctly signed sample events, sent to a source of a running
``hookd serve`` (or to ``--url``)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
import time

import httpx

from hookd.cli.parser import DEFAULT_HOST, EXIT_FAIL, EXIT_OK, listen_port
from hookd.errors import ConfigError
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


def cmd_send_test(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    source = sources.get(args.source)
    if source is None:
        known = ", ".join(s.name for s in sources)
        raise ConfigError(f"{sources.path}: no source named {args.source!r} (known: {known})")
    secret = source.config.secrets[0]
    needed = source.adapter.signing_key_needed(secret)
    if needed is not None:
        secret = args.signing_key or os.environ.get("HOOKD_SEND_TEST_KEY", "")
        if not secret:
            raise ConfigError(
                f"{sources.path}: source {source.name!r}: key 'secrets.0': a public key "
                f"cannot sign; pass --signing-key with {needed} (or set HOOKD_SEND_TEST_KEY)"
            )
    url = args.url or send_test_url(settings, source.name)
    failures = 0
    with httpx.Client(timeout=10.0) as client:
        for seq in range(1, args.count + 1):
            try:
                headers, body = source.adapter.sample_event(secret, seq, int(time.time()))
            except ValueError as exc:
                raise ConfigError(f"hookd send-test: --signing-key: {exc}") from None
            try:
                response = client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                print(f"hookd: cannot reach {url}: {type(exc).__name__}", file=sys.stderr)
                return EXIT_FAIL
            try:
                answer = response.json()
            except ValueError:
                answer = {"raw": response.text[:200]}
            print(f"{response.status_code} {json.dumps(answer)}")
            if not response.is_success:
                failures += 1
    return EXIT_FAIL if failures else EXIT_OK
