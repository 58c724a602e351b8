"""Whatever a handshake request holds, the new senders' handshake hooks (Meta's and
Okta's challenges, Asana's token check and learned secret) answer, decline (None) or
refuse with the documented errors only, and answer only what they should."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.meta import CONFIGURABLE as META
from hookd.providers.meta import MetaSettings
from hookd.providers.okta import CONFIGURABLE as OKTA
from hookd.providers.okta import OktaSettings

PROPERTY = settings(deadline=None, max_examples=200)
meta = META.bind(MetaSettings(verify_token="meatyhamhock"))
okta = OKTA.bind(OktaSettings())
asana = PROVIDERS["asana"]
TOKEN = "asana-handshake-token-0"
texts = st.one_of(st.text(max_size=40), st.sampled_from(["subscribe", "meatyhamhock", TOKEN]))
values = st.lists(texts, min_size=0, max_size=3)
methods = st.sampled_from(["GET", "POST", "HEAD"])


@PROPERTY
@given(
    method=methods,
    query=st.dictionaries(
        st.sampled_from(["hub.mode", "hub.challenge", "hub.verify_token", "x"]), values
    ),
)
def test_meta_challenge(method: str, query: dict[str, list[str]]) -> None:
    assert meta.challenge is not None
    try:
        reply = meta.challenge(method, query, [meta.parse_secret("app-secret")])
    except (SignatureError, PayloadError):
        return
    if reply is not None:
        assert query["hub.verify_token"] == ["meatyhamhock"]
        assert reply.body.decode() == query["hub.challenge"][0]


@PROPERTY
@given(
    method=methods,
    headers=st.dictionaries(
        st.sampled_from(["x-okta-verification-challenge", "authorization", "x"]), values
    ),
)
def test_okta_challenge(method: str, headers: dict[str, list[str]]) -> None:
    assert okta.header_challenge is not None
    try:
        reply = okta.header_challenge(method, {}, headers, [okta.parse_secret("meatyhamhock")])
    except (SignatureError, PayloadError):
        return
    if reply is not None:
        assert headers["authorization"] == ["meatyhamhock"]


@PROPERTY
@given(query=st.dictionaries(st.sampled_from(["token", "x"]), values), secret=st.text(max_size=80))
def test_asana_handshake(query: dict[str, list[str]], secret: str) -> None:
    learns = asana.learns_secret
    assert learns is not None
    try:
        index = learns.opened_by(query, [asana.parse_secret(TOKEN)])
    except SignatureError:
        assert query.get("token") != [TOKEN]
    else:
        assert (index, query["token"]) == (0, [TOKEN])
    try:
        learns.parse(secret)
    except PayloadError:
        return
    assert dict(learns.answer(secret).headers)["x-hook-secret"] == secret
