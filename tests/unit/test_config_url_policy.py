"""The sources file's rules for what carries a secret: a destination's, ``[sources.forward]``'s
and ``[sources.reconcile]``'s URL must be https:// unless its table says
``allow_insecure = true``; one naming this machine or a private network (as a literal
address, or ``localhost``) is a warning, never resolved through DNS; a secret that is
only whitespace is refused, in the sources file and in the environment."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from hookd.errors import ConfigError
from hookd.settings import Settings
from hookd.sources import Sources, internal_target, parse_sources
from processing.delivery import header_value

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ="
GH = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\n'
STRIPE = '[[sources]]\nname = "st"\nprovider = "stripe"\nsecrets = ["whsec_x"]\n'


def parse(text: str, env: dict[str, str] | None = None) -> Sources:
    return parse_sources(text, Path("hookd.toml"), env=env or {})


def error_of(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, env)
    message = str(info.value)
    assert "\n" not in message
    return message


def destination(url: str, extra: str = "") -> str:
    return (
        f'[[sources.destinations]]\nname = "billing"\nurl = "{url}"\nsecret = "{SECRET}"\n{extra}'
    )


def forward(url: str, extra: str = "") -> str:
    return f'[sources.forward]\nurl = "{url}"\nsecret = "{SECRET}"\n{extra}'


def reconcile(url: str, extra: str = "") -> str:
    return f'[sources.reconcile]\napi_url = "{url}"\ntoken = "sk_test_x"\n{extra}'


@pytest.fixture(autouse=True)
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a sources file never asks DNS (or the hosts file) for an address."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"resolved {args[0]!r} while loading the sources file")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "gethostbyname", refuse)


# -- https, or allow_insecure --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GH + destination("http://billing.internal/in"),
            "hookd.toml: source 'gh': key 'destinations.billing.url': http:// would send the "
            "signed payloads unencrypted; use https://, or set allow_insecure = true in this "
            "[[sources.destinations]] table (a test server, a trusted network)",
        ),
        (
            GH + forward("http://billing.internal/in"),
            "hookd.toml: source 'gh': key 'forward.url': http:// would send the signed "
            "payloads unencrypted; use https://, or set allow_insecure = true in "
            "[sources.forward] (a test server, a trusted network)",
        ),
        (
            STRIPE + reconcile("http://stripe-proxy.internal"),
            "hookd.toml: source 'st': key 'reconcile.api_url': http:// would send the API "
            "token unencrypted; use https://, or set allow_insecure = true in "
            "[sources.reconcile] (a test server, a trusted network)",
        ),
        (
            STRIPE + reconcile("ftp://stripe-proxy.internal"),
            "hookd.toml: source 'st': key 'reconcile.api_url': must be an https:// URL",
        ),
        (
            STRIPE + reconcile("stripe-proxy.internal"),
            "hookd.toml: source 'st': key 'reconcile.api_url': must be an https:// URL",
        ),
    ],
    ids=["destination", "forward", "reconcile", "reconcile-ftp", "reconcile-no-scheme"],
)
def test_a_plain_http_url_that_carries_a_secret_is_one_line_saying_what_to_do(
    text: str, message: str
) -> None:
    assert error_of(text) == message


@pytest.mark.parametrize(
    "text",
    [
        GH + destination("http://billing.internal/in", "allow_insecure = true\n"),
        GH + forward("http://billing.internal/in", "allow_insecure = true\n"),
        STRIPE + reconcile("http://stripe-proxy.internal", "allow_insecure = true\n"),
        GH + destination("https://billing.internal/in"),
        GH + forward("https://billing.internal/in"),
        STRIPE + reconcile("https://stripe-proxy.internal"),
        STRIPE + reconcile("HTTPS://stripe-proxy.internal"),
    ],
)
def test_https_or_allow_insecure_loads_without_a_warning(text: str) -> None:
    sources = parse(text)
    assert len(sources) == 1
    assert sources.warnings == ()


def test_allow_insecure_is_a_key_of_its_own_table_only() -> None:
    """Set beside a plain http:// destination, it does not open the others, nor
    the reconcile table's."""
    text = (
        STRIPE
        + destination("http://a.internal/in", "allow_insecure = true\n")
        + destination("http://b.internal/in").replace('"billing"', '"crm"')
    )
    assert "key 'destinations.crm.url': http://" in error_of(text)
    text = STRIPE + forward("http://a.internal/", "allow_insecure = true\n")
    assert "key 'reconcile.api_url'" in error_of(text + reconcile("http://b.internal"))
    assert "did you mean 'allow_insecure'" in error_of(
        GH + destination("http://a.internal/in", "allow_insecur = true\n")
    )


def test_the_providers_own_api_urls_are_https() -> None:
    """A source without api_url uses its provider's default: nothing to allow."""
    sources = parse(STRIPE + '[sources.reconcile]\ntoken = "sk_test_x"\n')
    assert sources.warnings == ()


# -- warnings for this machine and private networks ----------------------------------


@pytest.mark.parametrize(
    ("url", "host", "kind"),
    [
        ("https://127.0.0.1:8443/in", "127.0.0.1", "loopback"),
        ("https://127.9.9.9/in", "127.9.9.9", "loopback"),
        ("https://[::1]/in", "::1", "loopback"),
        ("https://localhost/in", "localhost", "loopback"),
        ("https://LOCALHOST./in", "localhost", "loopback"),
        ("https://api.localhost/in", "api.localhost", "loopback"),
        ("https://127.1/in", "127.1", "loopback"),
        ("https://0x7f.0.0.1/in", "0x7f.0.0.1", "loopback"),
        ("https://2130706433/in", "2130706433", "loopback"),
        ("https://0.0.0.0/in", "0.0.0.0", "unspecified"),
        ("https://[::]/in", "::", "unspecified"),
        ("https://10.1.2.3/in", "10.1.2.3", "private"),
        ("https://172.16.0.1/in", "172.16.0.1", "private"),
        ("https://172.31.255.254/in", "172.31.255.254", "private"),
        ("https://192.168.1.10/in", "192.168.1.10", "private"),
        ("https://[fd00::5]/in", "fd00::5", "private"),
        ("https://[::ffff:192.168.1.1]/in", "::ffff:192.168.1.1", "private"),
        ("https://169.254.169.254/latest", "169.254.169.254", "link-local"),
        ("https://[fe80::1%25eth0]/in", "fe80::1%eth0", "link-local"),
        ("https://u:p@10.0.0.1:8443/in?k=v", "10.0.0.1", "private"),
    ],
)
def test_an_internal_literal_address_is_recognised(url: str, host: str, kind: str) -> None:
    found = internal_target(url)
    assert found is not None
    assert found[:2] == (host, kind)


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/in",
        "https://172.32.0.1/in",  # just past 172.16.0.0/12
        "https://192.169.0.1/in",
        "https://[2001:4860::8888]/in",
        "https://billing.internal/in",  # a name: never resolved, so not judged
        "https://10.example.com/in",
        "https://localhost.example.com/in",
        "https://[::1/in",  # not a URL httpx would send to either: no warning, no crash
    ],
)
def test_a_public_address_or_any_name_is_no_warning(url: str) -> None:
    assert internal_target(url) is None


def test_the_warnings_name_file_source_key_address_and_what_goes_there() -> None:
    text = (
        STRIPE
        + destination("https://192.168.0.7/in")
        + forward("http://localhost:9000/", "allow_insecure = true\n")
        + reconcile("https://169.254.169.254", "")
    )
    assert parse(text).warnings == (
        "hookd.toml: source 'st': key 'forward.url': localhost is a loopback name (this "
        "machine): hookd sends the signed payloads there; check that it is meant to",
        "hookd.toml: source 'st': key 'destinations.billing.url': 192.168.0.7 is a private "
        "address (RFC 1918, fc00::/7): hookd sends the signed payloads there; check that it "
        "is meant to",
        "hookd.toml: source 'st': key 'reconcile.api_url': 169.254.169.254 is a link-local "
        "address (169.254.0.0/16, fe80::/10: where cloud metadata services are): hookd "
        "sends the API token there; check that it is meant to",
    )


# -- whitespace-only secrets ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "env", "where"),
    [
        (GH.replace('["s"]', '["   "]'), {}, "source 'gh': key 'secrets.0'"),
        (GH.replace('["s"]', '["ok", "\\t\\n"]'), {}, "source 'gh': key 'secrets.1'"),
        (
            GH.replace('["s"]', '["${WEBHOOK_SECRET}"]'),
            {"WEBHOOK_SECRET": "  "},
            "source 'gh': key 'secrets.0'",
        ),
        (GH.replace('["s"]', '["\u00a0"]'), {}, "source 'gh': key 'secrets.0'"),
        (
            STRIPE + reconcile("https://api.stripe.com").replace("sk_test_x", " "),
            {},
            "source 'st': key 'reconcile.token'",
        ),
        (
            GH + '[sources.reconcile]\nhook = "app"\napp_id = 1\nprivate_key = " \\n "\n',
            {},
            "source 'gh': key 'reconcile.private_key'",
        ),
        (
            GH + destination("https://x.example/").replace(SECRET, "  "),
            {},
            "source 'gh': key 'destinations.billing.secret'",
        ),
        (
            GH + forward("https://x.example/").replace(SECRET, "${F}"),
            {"F": "\t"},
            "source 'gh': key 'forward.secret'",
        ),
    ],
    ids=[
        "spaces",
        "tab-newline",
        "env-spaces",
        "nbsp",
        "reconcile-token",
        "private-key",
        "destination",
        "forward-env",
    ],
)
def test_a_whitespace_only_secret_is_one_line_naming_its_key(
    text: str, env: dict[str, str], where: str
) -> None:
    assert error_of(text, env) == (
        f"hookd.toml: {where}: the secret is only whitespace (is the environment variable "
        "it comes from set to spaces?); set the real secret"
    )


def test_a_stripe_secret_that_is_its_prefix_and_spaces_is_refused() -> None:
    assert error_of(STRIPE.replace('"whsec_x"', '"whsec_   "')) == (
        "hookd.toml: source 'st': key 'secrets.0': the secret is only whitespace after its "
        "whsec_ prefix (is the environment variable it comes from set to spaces?); set the "
        "real secret"
    )


def test_an_empty_secret_keeps_its_own_rule() -> None:
    """Empty is not whitespace: the key's own rule speaks (unchanged)."""
    assert "only whitespace" not in error_of(GH.replace('["s"]', '[""]'))
    assert error_of(STRIPE + '[sources.reconcile]\ntoken = ""\n') == (
        "hookd.toml: source 'st': key 'reconcile.token': is required"
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HOOKD_ADMIN_TOKEN", " "),
        ("HOOKD_READ_TOKEN", "\t"),
        ("HOOKD_METRICS_TOKEN", "  \n"),
        ("HOOKD_ENCRYPTION_KEYS", "  "),
        ("HOOKD_ENCRYPTION_KEYS", " , "),
    ],
)
def test_a_whitespace_only_token_or_key_in_the_environment_is_one_line(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """A token set to spaces can never match a request (a bearer token is read
    stripped); encryption keys set to spaces would store bodies in clear."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        Settings.from_env(_env_file=None)
    assert str(info.value) == (
        f"environment: {variable}: is only whitespace; set the real value, or leave it "
        "empty for none"
    )


def test_empty_tokens_still_mean_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("HOOKD_ADMIN_TOKEN", "HOOKD_ENCRYPTION_KEYS"):
        monkeypatch.setenv(variable, "")
    settings = Settings.from_env(_env_file=None)
    assert (settings.admin_token, settings.encryption_keys) == ("", "")
    monkeypatch.setenv("HOOKD_ADMIN_TOKEN", "a,b")  # a comma is a token's character
    assert Settings.from_env(_env_file=None).admin_token == "a,b"


# -- the event type header -----------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    ["invoice.paid", "customer.subscription.updated", "a b", "100%", "x/y:z", "Invoice_Paid~1"],
)
def test_an_ascii_event_type_is_sent_as_it_is(kind: str) -> None:
    assert header_value(kind) == kind


@pytest.mark.parametrize(
    ("kind", "sent"),
    [
        ("café", "UTF-8''caf%C3%A9"),
        ("a\r\nb", "UTF-8''a%0D%0Ab"),
        ("tab\there", "UTF-8''tab%09here"),
        ("nul\x00", "UTF-8''nul%00"),
        (" lead", "UTF-8''%20lead"),
        ("trail ", "UTF-8''trail%20"),
        ("UTF-8''x", "UTF-8''UTF-8%27%27x"),  # the marker itself: encoded, so unambiguous
        ("utf-8''x", "UTF-8''utf-8%27%27x"),
        ("emoji.🎉", "UTF-8''emoji.%F0%9F%8E%89"),
    ],
)
def test_any_other_type_is_an_rfc_8187_ext_value(kind: str, sent: str) -> None:
    assert header_value(kind) == sent
    sent.encode("ascii")
