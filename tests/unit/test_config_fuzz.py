"""Property tests of the config loader: whatever the sources file, the environment or the
``.env`` file hold, ``parse_sources``/``load_sources`` and ``Settings.from_env`` either
succeed with a usable result or raise ``ConfigError`` with a one-line message; nothing else.

(``chaos/fuzz.py`` runs the same properties coverage-guided, for a million inputs each.)
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hookd.errors import ConfigError
from hookd.routing import NAME_RE
from hookd.settings import Settings
from hookd.sources import Sources, load_sources, parse_sources

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
P = Path("hookd.toml")
WHPK = "whpk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def loads_or_config_error(text: str, env: dict[str, str]) -> Sources | None:
    """``parse_sources``: a usable ``Sources`` or ``None`` after a one-line ``ConfigError``."""
    try:
        sources = parse_sources(text, P, env)
    except ConfigError as exc:
        one_line(exc)
        return None
    check_sources(sources)
    return sources


def one_line(error: ConfigError) -> None:
    message = str(error)
    assert message
    assert "\n" not in message


def check_sources(sources: Sources) -> None:
    assert len(sources) >= 1
    for source in sources:
        assert NAME_RE.fullmatch(source.name)
        assert len(source.keys) == len(source.config.secrets) >= 1


# --- TOML text -----------------------------------------------------------------------


def toml_str(text: str) -> str:
    escaped = []
    for ch in text:
        if ch in '"\\':
            escaped.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            escaped.append(f"\\u{ord(ch):04x}")
        else:
            escaped.append(ch)
    return '"' + "".join(escaped) + '"'


def render(value: Any) -> str:
    """A TOML inline value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_str(k)} = {render(v)}" for k, v in value.items()) + "}"
    return "[" + ", ".join(render(v) for v in value) + "]"


def document(sources: list[dict[str, Any]]) -> str:
    lines = []
    for source in sources:
        lines.append("[[sources]]")
        lines.extend(f"{toml_str(key)} = {render(value)}" for key, value in source.items())
    return "\n".join(lines) + "\n"


toml_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=30),
    st.sampled_from(["", "${X}", "${MISSING}", "whsec_", "whsec_dGVzdA==", WHPK, "x" * 65]),
)
toml_values = st.recursive(
    toml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["x", "url", "token", "name"]), children, max_size=3),
    ),
    max_leaves=6,
)

VALID_SECRETS = {
    "github": [["s"], ["old", "new"], ["${X}"]],
    "stripe": [["whsec_abc"], ["whsec_old", "whsec_new"]],
    "slack": [["s"], ["a-${X}-b"]],
    "standard": [["whsec_dGVzdA=="], ["whsec_dGVzdA", WHPK], [WHPK]],
}
VALID_RECONCILE = {
    "github": {"token": "t", "hook": "repos/o/r/hooks/1"},
    "stripe": {"token": "t", "every_s": 900, "min_every_s": 60, "max_every_s": 3600},
    "slack": {"token": "t", "channels": ["C1"]},
}
SOURCE_KEYS = [
    "name",
    "provider",
    "secrets",
    "tolerance_s",
    "max_body_bytes",
    "handlers",
    "max_attempts",
    "forward",
    "reconcile",
    "retries",
]


@st.composite
def valid_sources(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One to three sources that load."""
    sources = []
    for index in range(draw(st.integers(1, 3))):
        provider = draw(st.sampled_from(sorted(VALID_SECRETS)))
        source: dict[str, Any] = {
            "name": f"{provider}-{index}",
            "provider": provider,
            "secrets": draw(st.sampled_from(VALID_SECRETS[provider])),
        }
        if draw(st.booleans()):
            source["tolerance_s"] = draw(st.integers(1, 86_400))
        if draw(st.booleans()):
            source["handlers"] = ["mod:fn"]
        if draw(st.booleans()):
            source["forward"] = {"url": "https://example.invalid/", "secret": "whsec_dGVzdA=="}
        if provider in VALID_RECONCILE and draw(st.booleans()):
            source["reconcile"] = dict(VALID_RECONCILE[provider])
        sources.append(source)
    return sources


@st.composite
def near_valid_sources(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid sources with one or two keys (of a source, its forward or reconcile table)
    set to an arbitrary TOML value, or removed."""
    sources = draw(valid_sources())
    for _ in range(draw(st.integers(1, 2))):
        source = draw(st.sampled_from(sources))
        table = source
        for nested in ("forward", "reconcile"):
            if isinstance(source.get(nested), dict) and draw(st.booleans()):
                table = source[nested]
        key = draw(st.sampled_from([*table, *SOURCE_KEYS, "hook", "app_id", "every_s"]))
        if draw(st.integers(0, 4)) == 0:
            table.pop(key, None)
        else:
            table[key] = draw(toml_values)
    return sources


ENV = {"X": "whsec_dGVzdA=="}
environment_text = st.binary(max_size=30).map(lambda raw: os.fsdecode(raw.replace(b"\0", b"")))


@PROPERTY
@given(text=st.text())
def test_arbitrary_text_is_sources_or_config_error(text: str) -> None:
    """Any text at all: a ConfigError (one line) or usable sources."""
    loads_or_config_error(text, ENV)


@PROPERTY
@given(sources=valid_sources())
def test_valid_sources_load(sources: list[dict[str, Any]]) -> None:
    """Baseline for the next property: the configurations it corrupts do load."""
    assert loads_or_config_error(document(sources), ENV) is not None


@PROPERTY
@given(sources=near_valid_sources())
def test_near_valid_sources_are_sources_or_config_error(sources: list[dict[str, Any]]) -> None:
    """A real configuration with a key mistyped, out of range or missing: ConfigError."""
    loads_or_config_error(document(sources), ENV)


@PROPERTY
@given(sources=valid_sources(), cut=st.integers(0, 400), insert=st.text(max_size=4))
def test_edited_toml_text_is_sources_or_config_error(
    sources: list[dict[str, Any]], cut: int, insert: str
) -> None:
    """Text-level damage to a valid file (a cut, an inserted character) never escapes."""
    text = document(sources)
    at = cut % (len(text) + 1)
    loads_or_config_error(text[:at] + insert + text[at + 1 :], ENV)


@PROPERTY
@given(sources=valid_sources(), value=environment_text)
def test_any_environment_value_interpolated_is_sources_or_config_error(
    sources: list[dict[str, Any]], value: str
) -> None:
    """${X} replaced by anything the environment can hold (surrogate-escaped bytes too)."""
    for source in sources:
        source["name"] = "${X}" if len(sources) == 1 else source["name"]
    loads_or_config_error(document(sources), {"X": value})


@pytest.mark.parametrize("depth", [10, 300, 1_000, 20_000])
@pytest.mark.parametrize(
    ("opener", "closer"), [("[", "]"), ("{a=", "}"), ("{a=[", "]}")], ids=["array", "table", "mix"]
)
@pytest.mark.parametrize("where", ["top", "source"])
def test_deeply_nested_values_are_config_error(
    depth: int, opener: str, closer: str, where: str
) -> None:
    """Nesting deep enough to exhaust tomllib's (or interpolation's) recursion is a
    ConfigError, not a RecursionError."""
    value = opener * depth + "1" + closer * depth
    text = (
        f"x = {value}\n"
        if where == "top"
        else (
            f'[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\nhandlers = {value}\n'
        )
    )
    with pytest.raises(ConfigError) as info:
        parse_sources(text, P, {})
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("config-fuzz")


@PROPERTY
@given(raw=st.binary(max_size=300))
def test_any_file_bytes_are_sources_or_config_error(scratch: Path, raw: bytes) -> None:
    """load_sources on any bytes (not UTF-8 included): ConfigError or usable sources."""
    path = scratch / "hookd.toml"
    path.write_bytes(raw)
    try:
        check_sources(load_sources(path, ENV))
    except ConfigError as exc:
        one_line(exc)


# --- Settings from the environment ---------------------------------------------------

FIELDS = sorted(Settings.model_fields)
env_values = st.one_of(
    st.sampled_from(
        [
            *("1", "0", "-1", "1.5", "1e309", "nan", "inf", "-inf", "0x10", "1_000", " 5 "),
            *("true", "off", "", "9" * 40, "{}", "sqlite+aiosqlite:///./x.db", "DEBUG"),
        ]
    ),
    environment_text,
)


@contextlib.contextmanager
def environment(values: dict[str, str], dotenv: bytes | None, directory: Path) -> Iterator[None]:
    """Only these HOOKD_* variables, and this .env file (or none) in the working directory."""
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOOKD_")}
    dotenv_path = directory / ".env"
    if dotenv is None:
        dotenv_path.unlink(missing_ok=True)
    else:
        dotenv_path.write_bytes(dotenv)
    with mock.patch.dict(os.environ, {**base, **values}, clear=True), contextlib.chdir(directory):
        yield


def settings_or_config_error() -> None:
    try:
        loaded = Settings.from_env()
    except ConfigError as exc:
        environment_error(exc)
        return
    assert loaded.lease_s > loaded.handler_timeout_s


def environment_error(error: ConfigError) -> None:
    one_line(error)
    assert str(error).startswith("environment: ")


@PROPERTY
@given(values=st.dictionaries(st.sampled_from(FIELDS), env_values, max_size=6))
def test_any_environment_is_settings_or_config_error(scratch: Path, values: dict[str, str]) -> None:
    """Any HOOKD_* values: ConfigError naming the variable, or valid Settings."""
    env = {"HOOKD_" + name.upper(): value for name, value in values.items()}
    with environment(env, None, scratch):
        settings_or_config_error()


@PROPERTY
@given(
    dotenv=st.one_of(
        st.binary(max_size=200),
        st.lists(
            st.tuples(
                st.sampled_from(FIELDS), st.sampled_from(['"', "'", "", "export "]), env_values
            ),
            max_size=4,
        ).map(
            lambda lines: "\n".join(
                f"HOOKD_{name.upper()}={quote}{value}" for name, quote, value in lines
            ).encode("utf-8", "surrogateescape")
        ),
    )
)
def test_any_dotenv_file_is_settings_or_config_error(scratch: Path, dotenv: bytes) -> None:
    """Any .env file, not UTF-8 included: ConfigError, or valid Settings."""
    with environment({}, dotenv, scratch):
        settings_or_config_error()


def test_dotenv_that_is_not_utf8_is_config_error(tmp_path: Path) -> None:
    """Regression: a .env with invalid UTF-8 raised UnicodeDecodeError out of from_env."""
    with (
        environment({}, b"HOOKD_LOG_LEVEL=\xff\xfe\n", tmp_path),
        pytest.raises(ConfigError) as info,
    ):
        Settings.from_env()
    assert str(info.value) == "environment: .env: not UTF-8 text"
