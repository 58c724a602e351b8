"""`hookd send-test` against a source verified with a public key (standard ``whpk_``):
the private key to sign with comes from ``--signing-key`` or ``HOOKD_SEND_TEST_KEY``
(a setting like the others); without either, one line says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import hookd
from tests.support.server import free_port
from tests.unit.webhook_requests import V1A_PUBLIC, V1A_SIGNING


@pytest.fixture
def public_key_sources(tmp_path: Path) -> Path:
    path = tmp_path / "hookd.toml"
    path.write_text(
        f'[[sources]]\nname = "std"\nprovider = "standard"\nsecrets = ["{V1A_PUBLIC}"]\n'
    )
    return path


def test_without_a_signing_key_send_test_says_which_to_give(
    sqlite_url: str, public_key_sources: Path
) -> None:
    sent = hookd(sqlite_url, "send-test", "std", HOOKD_CONFIG=str(public_key_sources))
    assert sent.returncode == 2, sent.stderr
    [line] = sent.stderr.splitlines()
    assert "a public key cannot sign; pass --signing-key with" in line
    assert "(or set HOOKD_SEND_TEST_KEY)" in line


@pytest.mark.parametrize("given", ["option", "environment"])
def test_the_signing_key_from_the_option_or_the_environment_is_used(
    sqlite_url: str, public_key_sources: Path, given: str
) -> None:
    """Past the key: it signs, and tries to send (no server here)."""
    port = free_port()
    option = ["--signing-key", V1A_SIGNING] if given == "option" else []
    extra = {"HOOKD_SEND_TEST_KEY": V1A_SIGNING} if given == "environment" else {}
    sent = hookd(
        sqlite_url,
        "send-test",
        "std",
        *option,
        HOOKD_CONFIG=str(public_key_sources),
        HOOKD_PORT=str(port),
        **extra,
    )
    assert sent.returncode == 1, sent.stderr
    [line] = sent.stderr.splitlines()
    assert line.startswith(f"hookd: cannot reach http://127.0.0.1:{port}/hooks/std: ")
