"""The config loader's targets of ``chaos.fuzz``: ``config-toml`` (``parse_sources`` and
``load_sources`` on fuzzed files) and ``config-env`` (``Settings.from_env`` on fuzzed
``HOOKD_*`` values and ``.env`` files): only ``ConfigError``, one line."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.fuzz_requests import PROVIDERS


def toml_str(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("?")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


WHPK = "whpk_" + base64.b64encode(bytes(range(32))).decode()
VALID_SECRETS: dict[str, list[list[str]]] = {
    "github": [["s"], ["old", "new"], ["${SECRET}"], ["a-${SECRET}-b"]],
    "stripe": [["whsec_abc"], ["whsec_old", "whsec_new"], ["${SECRET}"]],
    "slack": [["s"], ["${SECRET}", "x"]],
    "standard": [["whsec_dGVzdA=="], ["whsec_dGVzdA", WHPK], [WHPK], ["${SECRET}"]],
}
VALID_RECONCILE: dict[str, list[dict[str, Any]]] = {
    "github": [
        {"token": "t", "hook": "repos/o/r/hooks/1"},
        {"token": "${TOKEN}", "hook": "orgs/o/hooks/2", "repair": "redeliver"},
        {"hook": "app", "app_id": 1, "private_key": "-----BEGIN KEY-----"},
    ],
    "stripe": [{"token": "t", "every_s": 900, "min_every_s": 60, "max_every_s": 3600}],
    "slack": [{"token": "t", "channels": ["C1"], "requests_per_minute": 20}],
    "standard": [{"token": "t"}],  # standard has no API to reconcile: always refused
}
# Odd values for any key: wrong types, edges, out of range, references, empty.
ODD_TOML: list[Any] = [
    "",
    " ",
    "${MISSING}",
    "${BAD}",
    "${NAME}",
    "$",
    "${",
    "x" * 65,
    "Bad",
    "-a",
    "gitlab",
    "whsec_",
    "whpk_AAAA",
    "whsk_" + "A" * 43 + "=",
    "ftp://x",
    "repos/o/hooks/x",
    "bad",
    "1x:y",
    0,
    -1,
    1,
    2**63 - 1,
    86_401,
    64 * 1024 * 1024 + 1,
    1.5,
    0.0,
    -0.5,
    1e308,
    True,
    False,
    [],
    [""],
    ["s", 1],
    [[]],
    {"x": 1},
]
SOURCE_KEYS = ["name", "provider", "secrets", "tolerance_s", "max_body_bytes", "handlers"]
FORWARD_KEYS = ["url", "secret", "timeout_s"]
RECONCILE_KEYS = [
    "api_url",
    "token",
    "hook",
    "app_id",
    "private_key",
    "repair",
    "channels",
    "requests_per_minute",
    "every_s",
    "min_every_s",
    "max_every_s",
    "lookback_s",
    "overlap_s",
    "disable_after_auth_failures",
]


def valid_source(fdp: Any, index: int) -> dict[str, Any]:
    """A source that loads (Standard Webhooks' reconcile table aside)."""
    provider = fdp.PickValueInList(list(PROVIDERS))
    source: dict[str, Any] = {
        "name": fdp.PickValueInList([f"s{index}", f"{provider}-{index}", "${NAME}"]),
        "provider": provider,
        "secrets": fdp.PickValueInList(VALID_SECRETS[provider]),
    }
    for key, choices in (
        ("tolerance_s", [1, 300, 86_400]),
        ("max_body_bytes", [1, 4096, 64 * 1024 * 1024]),
        ("handlers", [[], ["mod:fn"], ["a.b:c", "d:e"]]),
        ("max_attempts", [1, 8, 100]),
    ):
        if fdp.ConsumeBool():
            source[key] = fdp.PickValueInList(choices)
    if fdp.ConsumeIntInRange(0, 3) == 3:
        source["forward"] = {"url": "https://example.invalid/hook", "secret": "whsec_dGVzdA=="}
    if fdp.ConsumeIntInRange(0, 2) == 2:
        source["reconcile"] = dict(fdp.PickValueInList(VALID_RECONCILE[provider]))
    return source


def corrupt(fdp: Any, sources: list[dict[str, Any]]) -> None:
    """One change to a valid configuration: a value made odd, a key dropped or unknown."""
    source = fdp.PickValueInList(sources)
    table = source
    keys = SOURCE_KEYS
    where = fdp.ConsumeIntInRange(0, 3)
    if where == 1 and isinstance(source.get("forward"), dict):
        table, keys = source["forward"], FORWARD_KEYS
    elif where == 2 and isinstance(source.get("reconcile"), dict):
        table, keys = source["reconcile"], RECONCILE_KEYS
    key = fdp.PickValueInList(keys)
    op = fdp.ConsumeIntInRange(0, 7)
    if op == 0:
        table.pop(key, None)
    elif op == 1:
        table[fdp.PickValueInList(["retries", "Name", "secret", "x"])] = 1
    elif op == 2:
        table[key] = fuzz_toml_value(fdp)
    elif op == 3 and len(sources) > 1:
        sources[-1]["name"] = sources[0].get("name", "dup")
    elif op == 4:  # another provider's secret or reconcile table
        other = fdp.PickValueInList(list(PROVIDERS))
        source["secrets"] = fdp.PickValueInList(VALID_SECRETS[other])
        if fdp.ConsumeBool():
            source["reconcile"] = dict(fdp.PickValueInList(VALID_RECONCILE[other]))
    else:
        table[key] = fdp.PickValueInList(ODD_TOML)


def fuzz_toml_value(fdp: Any, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 6 if depth < 3 else 3)
    if kind == 0:
        return fdp.PickValueInList(ODD_TOML)
    if kind == 1:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 30))
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 9))
    if kind == 3:
        return fdp.ConsumeFloat()
    if kind in (4, 5):
        return [fuzz_toml_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return {"x": fuzz_toml_value(fdp, depth + 1)}


def render(value: Any) -> str:
    """A TOML value (inline); floats TOML has no literal for become strings of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_str(k)} = {render(v)}" for k, v in value.items()) + "}"
    return "[" + ", ".join(render(v) for v in value) + "]"


def nested(fdp: Any, depth: int) -> str:
    opener, closer = fdp.PickValueInList([("[", "]"), ("{a=", "}"), ("{a=[", "]}")])
    return str(opener * depth + "1" + closer * depth)


def fuzz_toml(fdp: Any) -> str:
    """A valid configuration, then a few corruptions, rendered as TOML, maybe then edited."""
    sources = [valid_source(fdp, i) for i in range(fdp.ConsumeIntInRange(1, 3))]
    for _ in range(fdp.ConsumeIntInRange(0, 2)):
        corrupt(fdp, sources)
    lines: list[str] = []
    for source in sources:
        lines.append("[[sources]]")
        tables = []
        for key, value in source.items():
            if isinstance(value, dict) and fdp.ConsumeIntInRange(0, 3) > 0:
                tables.append((key, value))
            else:
                lines.append(f"{toml_str(key) if fdp.ConsumeBool() else key} = {render(value)}")
        for key, value in tables:
            lines.append(f"[sources.{key}]")
            lines.extend(f"{toml_str(k)} = {render(v)}" for k, v in value.items())
    # Rare changes are taken on the highest value: an input that has run out gives 0.
    if fdp.ConsumeIntInRange(0, 15) == 15:
        lines.insert(0, f"{fdp.PickValueInList(['top', 'sources', 'a.b'])} = 1")
    if fdp.ConsumeIntInRange(0, 15) == 15:  # nesting deep enough to exhaust a stack
        at = fdp.ConsumeIntInRange(0, len(lines))
        key = fdp.PickValueInList([*SOURCE_KEYS, "x"])
        lines.insert(at, f"{key} = {nested(fdp, fdp.ConsumeIntInRange(1, 1500))}")
    text = "\n".join(lines) + "\n"
    if fdp.ConsumeIntInRange(0, 3) == 3:  # byte-level edits of the text
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            at = fdp.ConsumeIntInRange(0, len(text))
            cut = fdp.ConsumeIntInRange(0, 4)
            text = text[:at] + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 4)) + text[at + cut :]
    return text


def fuzz_env(fdp: Any) -> dict[str, str]:
    env = {
        "NAME": "gh",
        "PROVIDER": "github",
        "SECRET": "whsec_dGVzdA==",
        "TOKEN": "t",
        "URL": "https://example.invalid/",
    }
    for key in ("NAME", "SECRET", "BAD", "TOKEN"):
        if fdp.ConsumeIntInRange(0, 3) == 0:
            env[key] = env_text(fdp, 40)
    return env


def env_text(fdp: Any, max_len: int) -> str:
    """An environment value as Python sees it: any bytes but NUL, surrogate-escaped."""
    raw: bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, max_len))
    return os.fsdecode(raw.replace(b"\x00", b""))


def config_toml_target() -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import ConfigError
    from hookd.routing import NAME_RE
    from hookd.sources import load_sources, parse_sources

    path = Path("hookd.toml")

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        mode = fdp.ConsumeIntInRange(0, 7)
        env = fuzz_env(fdp)
        try:
            if mode == 0:  # the file's raw bytes, through load_sources
                path.write_bytes(fdp.ConsumeBytes(fdp.remaining_bytes()))
                sources = load_sources(path, env)
            elif mode == 1:
                sources = parse_sources(fdp.ConsumeUnicode(fdp.remaining_bytes()), path, env)
            else:
                sources = parse_sources(fuzz_toml(fdp), path, env)
        except ConfigError as exc:
            if "\n" in str(exc):
                raise AssertionError("a config error is not one line") from exc
            return
        assert len(sources) >= 1
        for source in sources:
            assert NAME_RE.fullmatch(source.name)
            assert len(source.keys) == len(source.config.secrets) >= 1

    return one


ENV_VALUES = [
    "1",
    "0",
    "-1",
    "1.5",
    "1e309",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "1_000",
    " 5 ",
    "true",
    "false",
    "yes",
    "off",
    "",
    "9" * 40,
    "sqlite+aiosqlite:///./x.db",
    "redis://127.0.0.1:1/0",
    "DEBUG",
    "{}",
    "[]",
]


def config_env_target() -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import ConfigError
    from hookd.settings import Settings

    fields = sorted(Settings.model_fields)
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOOKD_")}
    dotenv = Path(".env")

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        os.environ.clear()
        os.environ.update(base)
        for name in fields:
            how = fdp.ConsumeIntInRange(0, 5)
            if how <= 2:
                continue
            value = fdp.PickValueInList(ENV_VALUES) if how < 5 else env_text(fdp, 40)
            os.environ["HOOKD_" + name.upper()] = value
        kind = fdp.ConsumeIntInRange(0, 3)
        if kind == 3:
            dotenv.write_bytes(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200)))
        elif kind == 2:
            lines = [
                f"HOOKD_{fdp.PickValueInList(fields).upper()}="
                + fdp.PickValueInList(['"', "'", "", "export "])
                + env_text(fdp, 30)
                for _ in range(fdp.ConsumeIntInRange(0, 4))
            ]
            dotenv.write_text("\n".join(lines), encoding="utf-8", errors="surrogateescape")
        elif dotenv.exists():
            dotenv.unlink()
        try:
            Settings.from_env()
        except ConfigError as exc:
            if "\n" in str(exc):
                raise AssertionError("a config error is not one line") from exc

    return one
