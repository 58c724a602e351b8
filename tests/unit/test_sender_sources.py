"""The sources file for the new senders: each mistake is one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookd.errors import ConfigError
from hookd.sources import parse_sources


def source(provider: str, secret: str, verify: str = "") -> str:
    table = f"[sources.verify]\n{verify}\n" if verify else ""
    return f'[[sources]]\nname = "s"\nprovider = "{provider}"\nsecrets = ["{secret}"]\n{table}'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (source("meta", "app-secret"), "key 'verify.verify_token': is required"),
        (source("meta", "app-secret", 'verify_token = " "'), "key 'verify.verify_token': must be"),
        (source("meta", "app-secret", 'verify_tokn = "x"'), "did you mean 'verify_token'?"),
        (source("asana", "short"), "key 'secrets.0': an asana secret is the handshake token"),
        (source("basic", "nocolon", 'dedupe = "body_sha256"'), 'is "user:password"'),
        (source("basic", "a:b"), "key 'verify.dedupe': is required"),
        (source("okta", "x", 'header = "bad header"'), "key 'verify.header': must be a header"),
        (source("twitch", "short"), "10 to 100 ASCII characters"),
        (source("twitch", "long-enough-secret", 'header = "x"'), "twitch sources take no verify"),
    ],
)
def test_each_mistake_is_one_line(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_sources(text, Path("hookd.toml"), {})
    message = str(info.value)
    assert said in message and "\n" not in message, message


def test_valid_tables_load_with_their_settings() -> None:
    text = (
        source("meta", "app-secret", 'verify_token = "meatyhamhock"')
        + source("okta", "Bearer x", 'header = "X-Okta-Secret"').replace('"s"', '"o"')
        + source("basic", "u:p", 'dedupe = "json:id"').replace('"s"', '"b"')
        + source("asana", "a-handshake-token-123").replace('"s"', '"a"')
    )
    loaded = parse_sources(text, Path("hookd.toml"), {})
    assert [s.provider for s in loaded] == ["meta", "okta", "basic", "asana"]
    okta = loaded.get("o")
    assert okta is not None and okta.adapter.header_challenge is not None
    asana = loaded.get("a")
    assert asana is not None and asana.adapter.learns_secret is not None
