"""Configuration: sources TOML, ${VAR} interpolation, one-line errors."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from hookd.errors import ConfigError
from hookd.providers import PROVIDERS
from hookd.providers.base import Ed25519Key, HmacKey
from hookd.settings import Settings
from hookd.sources import load_sources, parse_sources
from tests.support.sources_file import error_of, parse

ROOT = Path(__file__).resolve().parents[2]
P = Path("hookd.toml")


GH = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\n'


def test_example_config_parses_with_demo_env() -> None:
    env = dict(
        line.split("=", 1)
        for line in (ROOT / "examples/demo.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    sources = load_sources(ROOT / "examples/hookd.toml", env)
    assert [s.provider for s in sources] == ["github", "stripe", "slack", "standard"]


def test_variables_are_interpolated_anywhere_in_strings() -> None:
    text = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["a-${X}-b", "${Y}"]\n'
    source = parse(text, {"X": "1", "Y": "two"}).get("gh")
    assert source is not None
    assert source.config.secrets == ("a-1-b", "two")
    assert source.keys == (HmacKey(b"a-1-b"), HmacKey(b"two"))


def test_missing_variable_names_file_source_key_and_variable() -> None:
    text = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["${GH_SECRET}"]\n'
    message = error_of(text)
    assert (
        message
        == "hookd.toml: source 'gh': key 'secrets.0': environment variable GH_SECRET is not set"
    )


def test_unknown_provider_is_named() -> None:
    message = error_of('[[sources]]\nname = "x"\nprovider = "nosuchprovider"\nsecrets = ["s"]\n')
    assert "source 'x'" in message and "key 'provider'" in message


def test_duplicate_name_is_refused() -> None:
    message = error_of(GH + GH)
    assert "source 'gh'" in message and "duplicate source name" in message


def test_unknown_key_is_refused() -> None:
    message = error_of(GH + "retries = 3\n")
    assert message == "hookd.toml: source 'gh': key 'retries': unknown key"


def test_unknown_reconcile_key_is_refused() -> None:
    message = error_of(GH + '[sources.reconcile]\ntoken = "t"\nhook = "app"\nfoo = 1\n')
    assert "key 'reconcile.foo': unknown key" in message


def test_other_providers_reconcile_key_is_refused() -> None:
    text = GH + '[sources.reconcile]\ntoken = "t"\nhook = "repos/o/r/hooks/1"\nchannels = ["C1"]\n'
    assert "key 'reconcile.channels': not a github setting" in error_of(text)


def test_bad_source_name_is_refused() -> None:
    assert "key 'name'" in error_of(
        '[[sources]]\nname = "Git Hub"\nprovider = "github"\nsecrets = ["s"]\n'
    )


@pytest.mark.parametrize(
    ("provider", "secret", "expected"),
    [
        ("stripe", "sk_test_123", "whsec_"),
        ("standard", "whsec_***notbase64***", "base64"),
        ("standard", "whpk_" + base64.b64encode(b"short").decode(), "32-byte"),
        ("standard", "plain", "whsec_ or whpk_"),
        ("github", "", "empty"),
    ],
)
def test_bad_secret_format_names_the_secret(provider: str, secret: str, expected: str) -> None:
    message = error_of(
        f'[[sources]]\nname = "s"\nprovider = "{provider}"\nsecrets = ["{secret}"]\n'
    )
    assert "source 's': key 'secrets.0'" in message
    assert expected in message


def test_whpk_secret_becomes_an_ed25519_key() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    secret = "whpk_" + base64.b64encode(raw).decode()
    text = f'[[sources]]\nname = "s"\nprovider = "standard"\nsecrets = ["{secret}"]\n'
    source = parse(text).get("s")
    assert source is not None and isinstance(source.keys[0], Ed25519Key)


def test_no_secrets_is_refused() -> None:
    assert "key 'secrets'" in error_of(
        '[[sources]]\nname = "s"\nprovider = "github"\nsecrets = []\n'
    )


def test_invalid_toml_is_one_line() -> None:
    assert error_of("[[sources]\nname=").startswith("hookd.toml: not valid TOML")


def test_no_sources_is_refused() -> None:
    assert "at least one [[sources]]" in error_of("")


def test_reconcile_requires_provider_specific_keys() -> None:
    slack = '[[sources]]\nname = "sl"\nprovider = "slack"\nsecrets = ["s"]\n'
    slack += '[sources.reconcile]\ntoken = "t"\n'
    assert "key 'reconcile.channels': is required for slack" in error_of(slack)
    app = GH + '[sources.reconcile]\nhook = "app"\n'
    assert "key 'reconcile.app_id'" in error_of(app)
    bad_hook = GH + '[sources.reconcile]\ntoken = "t"\nhook = "repos/o/hooks/1"\n'
    assert "key 'reconcile.hook'" in error_of(bad_hook)


def test_reconcile_interval_bounds_are_checked() -> None:
    text = GH + '[sources.reconcile]\ntoken = "t"\nhook = "orgs/o/hooks/1"\n'
    text += "every_s = 10\nmin_every_s = 60\n"
    assert "min_every_s <= every_s <= max_every_s" in error_of(text)


SLACK = '[[sources]]\nname = "sl"\nprovider = "slack"\nsecrets = ["s"]\n'
# How an unknown provider's line lists the registered ones: "'a', 'b' or 'c'".
EXPECTED_PROVIDERS = "{} or {}".format(
    ", ".join(repr(name) for name in list(PROVIDERS)[:-1]), repr(list(PROVIDERS)[-1])
)
UNKNOWN = '[[sources]]\nname = "x"\nprovider = "nosuchprovider"\nsecrets = ["s"]\n'
HOOK_FORMAT = 'must be "repos/OWNER/REPO/hooks/ID", "orgs/ORG/hooks/ID" or "app"'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Another provider's key: a wrong value is named before the key is refused.
        (
            GH + '[sources.reconcile]\ntoken = "t"\nhook = "app"\nchannels = "C1"\n',
            "source 'gh': key 'reconcile.channels': must be an array (in brackets: "
            '["a", "b"]), not a string',
        ),
        (
            '[[sources]]\nname = "st"\nprovider = "standard"\nsecrets = ["whsec_dGVzdA=="]\n'
            '[sources.reconcile]\napp_id = "x"\n',
            "source 'st': key 'reconcile.app_id': must be a whole number, not a string",
        ),
        # Several wrong values: the provider keys' come before the schedule's, GitHub's
        # before Slack's.
        (
            GH + '[sources.reconcile]\ntoken = "t"\nevery_s = 0\nhook = "bad"\n',
            f"source 'gh': key 'reconcile.hook': {HOOK_FORMAT}",
        ),
        (
            SLACK + '[sources.reconcile]\ntoken = "t"\nchannels = 5\nhook = "bad"\n',
            f"source 'sl': key 'reconcile.hook': {HOOK_FORMAT}",
        ),
        (
            SLACK + '[sources.reconcile]\ntoken = "t"\nchannels = ["C"]\nevery_s = 10\n'
            'max_every_s = 5\nrepair = "x"\n',
            "source 'sl': key 'reconcile.repair': must be 'fetch' or 'redeliver', not 'x'",
        ),
        (
            SLACK + '[sources.reconcile]\ntoken = "t"\nchannels = ["C"]\nevery_s = 10\n'
            'max_every_s = 5\nrepair = "fetch"\n',
            "source 'sl': key 'reconcile': needs min_every_s <= every_s <= max_every_s",
        ),
        # An unknown provider's table is still read; an unknown key in it comes first.
        (
            UNKNOWN + '[sources.reconcile]\ntokn = "t"\n',
            "source 'x': key 'reconcile.tokn': unknown key (did you mean 'token'?)",
        ),
        (
            UNKNOWN + '[sources.reconcile]\nrepair = "x"\n',
            "source 'x': key 'provider': unknown provider 'nosuchprovider'; use one of "
            + EXPECTED_PROVIDERS,
        ),
        # A wrong value elsewhere in the source comes before another provider's key.
        (
            GH.replace('"s"]', '"s"]\ntolerance_s = 0')
            + '[sources.reconcile]\ntoken = "t"\nhook = "repos/o/r/hooks/1"\nchannels = ["C1"]\n',
            "source 'gh': key 'tolerance_s': must be greater than 0",
        ),
    ],
)
def test_reconcile_errors_name_the_first_problem_in_a_fixed_order(text: str, expected: str) -> None:
    assert error_of(text) == f"hookd.toml: {expected}"


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sources file not found"):
        load_sources(tmp_path / "nope.toml")


def test_settings_read_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKD_DATABASE_URL", "postgresql+asyncpg://u@h/db")
    monkeypatch.setenv("HOOKD_COMMIT_BATCH_MAX", "64")
    settings = Settings.from_env()
    assert settings.database_url == "postgresql+asyncpg://u@h/db"
    assert settings.commit_batch_max == 64


def test_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKD_COMMIT_BATCH_MAX", "lots")
    with pytest.raises(ConfigError, match="HOOKD_COMMIT_BATCH_MAX"):
        Settings.from_env()


@pytest.mark.parametrize("provider", ["github", "stripe", "slack", "standard"])
def test_undecodable_secret_is_refused_without_quoting_it(provider: str) -> None:
    """A secret from an environment variable that is not valid text (surrogate escapes):
    the error names the key, never a character of the secret."""
    text = f'[[sources]]\nname = "x"\nprovider = "{provider}"\nsecrets = ["${{S}}"]\n'
    with pytest.raises(ConfigError) as info:
        parse_sources(text, Path("hookd.toml"), env={"S": "whsec_abc\udcffSECRETPART"})
    message = str(info.value)
    assert "secrets.0" in message
    assert "SECRETPART" not in message and "\\udcff" not in message and "abc" not in message


@pytest.mark.parametrize(
    ("line", "key", "suggestion"),
    [
        ('secret = ["s"]', "secret", "secrets"),  # secrets itself is then missing
        ('max_attempt = 3\nsecrets = ["s"]', "max_attempt", "max_attempts"),
    ],
)
def test_misspelt_key_is_reported_not_the_missing_one(line: str, key: str, suggestion: str) -> None:
    message = error_of(f'[[sources]]\nname = "gh"\nprovider = "github"\n{line}\n')
    assert message == (
        f"hookd.toml: source 'gh': key {key!r}: unknown key (did you mean {suggestion!r}?)"
    )


def test_misspelt_provider_is_reported_not_the_missing_one() -> None:
    message = error_of('[[sources]]\nname = "gh"\nprovidr = "github"\nsecrets = ["s"]\n')
    assert message == (
        "hookd.toml: source 'gh': key 'providr': unknown key (did you mean 'provider'?)"
    )


def test_misspelt_key_in_a_subtable_suggests_a_key_of_that_table() -> None:
    reconcile = GH + '[sources.reconcile]\ntokn = "t"\nhook = "app"\n'
    assert error_of(reconcile) == (
        "hookd.toml: source 'gh': key 'reconcile.tokn': unknown key (did you mean 'token'?)"
    )
    forward = GH + '[sources.forward]\nurl = "http://x"\nsecet = "whsec_x"\n'
    assert error_of(forward) == (
        "hookd.toml: source 'gh': key 'forward.secet': unknown key (did you mean 'secret'?)"
    )


def test_misspelt_top_level_table_suggests_sources() -> None:
    message = error_of('[[source]]\nname = "gh"\n')
    assert message == "hookd.toml: key 'source': unknown top-level key (did you mean 'sources'?)"


def test_lease_not_longer_than_handler_timeout_names_both_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOOKD_LEASE_S", "10")
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    assert str(info.value) == (
        "environment: HOOKD_LEASE_S=10 must be longer than HOOKD_HANDLER_TIMEOUT_S=30 "
        "(the default): raise HOOKD_LEASE_S or lower HOOKD_HANDLER_TIMEOUT_S"
    )
    monkeypatch.setenv("HOOKD_HANDLER_TIMEOUT_S", "12.5")
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    assert str(info.value).startswith(
        "environment: HOOKD_LEASE_S=10 must be longer than HOOKD_HANDLER_TIMEOUT_S=12.5: "
    )


def test_bad_log_level_names_the_variable_and_the_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKD_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    assert str(info.value) == (
        "environment: HOOKD_LOG_LEVEL: 'LOUD' is not a log level; "
        "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    )
    monkeypatch.setenv("HOOKD_LOG_LEVEL", "debug")
    assert Settings.from_env().log_level == "DEBUG"


def test_sqlite_writer_takes_three_words_and_auto_follows_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOOKD_SQLITE_WRITER", "fork")
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    assert str(info.value) == (
        "environment: HOOKD_SQLITE_WRITER: 'fork' is not a SQLite writer; "
        "use auto, process or thread"
    )
    for value, expected in (("Process", True), (" thread ", False)):
        monkeypatch.setenv("HOOKD_SQLITE_WRITER", value)
        assert Settings.from_env().sqlite_writer_process() is expected
    monkeypatch.setenv("HOOKD_SQLITE_WRITER", "auto")
    for cores, expected in ((1, False), (2, True), (None, False)):
        monkeypatch.setattr("hookd.settings.os.cpu_count", lambda cores=cores: cores)
        assert Settings.from_env().sqlite_writer_process() is expected


@pytest.mark.parametrize("url", ["notaurl", "redis://:hunter2@h:port/0", "http://:hunter2@h/"])
def test_bad_redis_url_names_the_variable_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("HOOKD_REDIS_URL", url)
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    message = str(info.value)
    assert message.startswith("environment: HOOKD_REDIS_URL: not a Redis URL: use redis://")
    assert "hunter2" not in message and url not in message


@pytest.mark.parametrize("provider", ["twilio", "square", "hubspot"])
def test_a_url_signing_source_keeps_what_its_provider_declares(provider: str) -> None:
    """Bound to its public_url, a source's provider still has the registered horizon,
    list API and answers; only verifying and signing use the URL."""
    text = (
        f'[[sources]]\nname = "s"\nprovider = "{provider}"\nsecrets = ["k"]\n'
        'public_url = "https://hooks.example.com/hooks/s?x=1"\n'
    )
    source = parse_sources(text, Path("hookd.toml"), {}).get("s")
    assert source is not None
    registered = PROVIDERS[provider]
    adapter = source.adapter
    assert adapter.redelivery_horizon_days == registered.redelivery_horizon_days
    assert adapter.reconcile == registered.reconcile
    assert adapter.accepted_status == registered.accepted_status
    assert adapter.verify is not registered.verify


# Pydantic's own sentences, which a sources file or HOOKD_* line must never carry.
PYDANTIC_WORDING = (
    "Input should",
    "Value error",
    "Field required",
    "valid tuple",
    "instance of",
    "after validation",
    "unable to parse",
)
FWD = '[sources.forward]\nurl = "https://x.example"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GH.replace('["s"]', '"s"'),
            'key \'secrets\': must be an array (in brackets: ["a", "b"]), not a string',
        ),
        (GH.replace('["s"]', "[]"), "key 'secrets': needs at least 1 entry"),
        (GH.replace('secrets = ["s"]\n', ""), "key 'secrets': is required; add it"),
        (GH + 'tolerance_s = "x"\n', "key 'tolerance_s': must be a whole number, not a string"),
        (
            GH + "tolerance_s = 1.5\n",
            "key 'tolerance_s': must be a whole number, not a number with a fraction",
        ),
        (GH + "tolerance_s = 100000\n", "key 'tolerance_s': must be 86400 or less"),
        (GH + "max_attempts = 0\n", "key 'max_attempts': must be 1 or more"),
        (
            GH + 'forward = "x"\n',
            "key 'forward': must be a table (key = { ... } or a [section] of its own), "
            "not a string",
        ),
        (GH + FWD, "key 'forward.secret': is required; add it"),
        (
            GH + '[sources.retention]\nkeep_body_days = "x"\n',
            "key 'retention.keep_body_days': must be a number, not a string",
        ),
        (
            GH + "public_url = 3\n",
            "key 'public_url': must be a string (in quotes: \"...\"), not a whole number",
        ),
        (
            GH.replace('"gh"', '"Git Hub"'),
            "key 'name': must be 1 to 64 lowercase letters, digits and '-', starting with a "
            "letter or digit ([a-z0-9][a-z0-9-]{0,63})",
        ),
    ],
)
def test_config_errors_are_said_in_hookds_words_not_pydantics(text: str, expected: str) -> None:
    message = error_of(text)
    name = "Git Hub" if "Git Hub" in text else "gh"
    assert message == f"hookd.toml: source {name!r}: {expected}"
    assert not any(words in message for words in PYDANTIC_WORDING), message


@pytest.mark.parametrize(
    ("written", "suggestion"),
    [("githb", "github"), ("Github", "github"), ("stripee", "stripe"), ("slak", "slack")],
)
def test_misspelt_provider_suggests_the_closest_and_lists_them_all(
    written: str, suggestion: str
) -> None:
    message = error_of(GH.replace('"github"', f'"{written}"'))
    assert message == (
        f"hookd.toml: source 'gh': key 'provider': unknown provider {written!r} "
        f"(did you mean {suggestion!r}?); use one of {EXPECTED_PROVIDERS}"
    )


def test_a_provider_that_is_not_a_string_is_one_line() -> None:
    message = error_of(GH.replace('"github"', "5"))
    assert message == (
        "hookd.toml: source 'gh': key 'provider': must be the name of a provider "
        f"({EXPECTED_PROVIDERS}), not a whole number"
    )


def test_a_wrong_word_suggests_the_closest_allowed_one() -> None:
    message = error_of(
        GH + '[sources.order]\nkey = "id"\nversion = "created"\nstale = "supersed"\n'
    )
    assert message == (
        "hookd.toml: source 'gh': key 'order.stale': must be 'supersede' or 'run', "
        "not 'supersed' (did you mean 'supersede'?)"
    )


def test_a_wrong_type_never_quotes_the_value_it_got() -> None:
    """A secret written where a list is wanted: the line names its kind, not its text."""
    message = error_of(GH.replace('["s"]', '"whsec_TOPSECRET"'))
    assert "TOPSECRET" not in message
    assert message.endswith("not a string")


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("HOOKD_COMMIT_BATCH_MAX", "lots", "must be a whole number"),
        ("HOOKD_COMMIT_BATCH_MAX", "0", "must be 1 or more"),
        ("HOOKD_BODY_TIMEOUT_S", "soon", "must be a number"),
        ("HOOKD_BODY_TIMEOUT_S", "900", "must be 300 or less"),
        ("HOOKD_LOG_JSON", "maybe", "must be true or false"),
        ("HOOKD_WORKER_METRICS_PORT", "70000", "must be 65535 or less"),
    ],
)
def test_bad_settings_are_said_in_hookds_words(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    assert str(info.value) == f"environment: {variable}: {expected}"
