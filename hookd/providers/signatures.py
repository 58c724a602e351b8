"""The signature toolkit: the shapes providers sign with, written once.

A provider module says only what is its own (header names, what is signed, its scheme's
name, its secret's refusal) and takes the rest from here. Four shapes are whole schemes
(``hookd.providers.base.Scheme``), declared where the provider is: ``HmacHeader`` (one
header, ``[prefix]<hex or base64 HMAC of the body>``), ``HmacEntries``
(``t=…,v1=…,v1=…``), ``TimestampedSignature`` (a timestamp header and a signature
header over the timestamp and the body: its timestamp reader, signature decoder and
matcher are its fields) and ``SharedToken`` (a secret sent as it is). Their parts serve
a scheme of its own (``hookd.providers.base.Handwritten``):

- timestamps: ``parse_timestamp`` (whole seconds in a header) and ``check_window`` (any
  signed time against ``now ± tolerance_s``);
- digests as they travel: ``parse_hex_digest`` (lower-case hex), ``parse_b64_digest``
  (canonical base64), ``after_prefix`` (``sha256=<hex>``, ``v0=<hex>``);
- signature lists: ``named_entries``, ``only_timestamp``, ``hex_signatures`` and
  ``signature_entries`` (an entry that is no signature is passed over: it cannot spoil
  a valid one beside it);
- matching, in constant time against every secret and candidate: ``matching_key`` (an
  HMAC of a message given as its parts), ``match_hmac`` (``prefix + body``, SHA-256),
  ``matching_public_key``, ``match_ed25519`` and ``match_ecdsa`` (P-256, SHA-256);
- secrets: ``hmac_secret`` (a ``parse_secret`` for a secret used as text, with the
  provider's refusal), ``plain_secret`` (any non-empty text);
- signing, for samples and ``hookd send-test`` only: ``hmac_digest``,
  ``hmac_sha256_hex``, ``hmac_b64``.

Nothing here logs, reads a clock or touches the network.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from hookd.errors import SignatureError
from hookd.providers.base import (
    EcdsaP256Key,
    Ed25519Key,
    HeaderMap,
    HmacKey,
    Key,
    RsaKey,
    SignedHeaders,
    Verified,
    one_header,
)

# A timestamp is seconds since the epoch; twelve digits reach the year 33658.
MAX_TIMESTAMP_DIGITS = 12
HEX_DIGITS = frozenset("0123456789abcdef")
# A header with more entries than a secret's rotation can produce is hostile.
MAX_ENTRIES = 16
# (version, signature bytes) pairs, as ``SignedHeaders.signatures`` holds them.
Signatures = tuple[tuple[str, bytes], ...]
DIGEST_BYTES = {"sha1": 20, "sha256": 32, "sha512": 64}
SHA256_BYTES = DIGEST_BYTES["sha256"]
# Printable ASCII without spaces: what a provider that shows its key as text shows.
PRINTABLE_WORD = re.compile(r"[!-~]+")


def parse_timestamp(raw: str, now: float, tolerance_s: int) -> int:
    """Seconds since the epoch, inside ``now ± tolerance_s`` (see ``check_window``)."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_TIMESTAMP_DIGITS:
        raise SignatureError("malformed_timestamp")
    ts = int(raw)
    check_window(ts, now, tolerance_s)
    return ts


def check_window(signed_at: float, now: float, tolerance_s: int, per_second: int = 1) -> None:
    """``signed_at`` (in ``1 / per_second`` seconds: 1000 for milliseconds) inside
    ``now ± tolerance_s``, both edges inclusive, or ``timestamp_too_old``/
    ``timestamp_in_future``.

    ``now`` keeps its fraction, as the providers' own Python libraries compare (stripe,
    standardwebhooks, slack_sdk): a timestamp ``tolerance_s`` old is accepted at that
    exact instant and refused a quarter second later; flooring ``now`` would stretch the
    past edge by up to a second. On the future edge the two agree, the timestamp being a
    whole number. Those libraries all accept the exact edges (strict comparisons), so
    hookd does too."""
    if signed_at < (now - tolerance_s) * per_second:
        raise SignatureError("timestamp_too_old")
    if signed_at > (now + tolerance_s) * per_second:
        raise SignatureError("timestamp_in_future")


def parse_hex_digest(raw: str, size: int = SHA256_BYTES) -> bytes:
    """A digest of ``size`` bytes (SHA-256's by default) in lower-case hex, as every
    provider sends it, or ``malformed_signature``. Upper case is refused: it decodes to
    the same bytes, so accepting it would let a changed header verify (the providers' own
    libraries compare the hex strings and refuse it too)."""
    if len(raw) != 2 * size or not HEX_DIGITS.issuperset(raw):
        raise SignatureError("malformed_signature")
    try:
        digest = bytes.fromhex(raw)
    except ValueError:
        raise SignatureError("malformed_signature") from None
    # fromhex skips whitespace, so a string of the right length can decode to fewer bytes.
    if len(digest) != size:
        raise SignatureError("malformed_signature")
    return digest


def b64decode_strict(raw: str) -> bytes:
    """Canonical standard base64 only, or ``malformed_signature``. The decoder ignores the
    unused low bits of the last character, so several strings decode to the same bytes;
    only the one the encoder writes is accepted, so that a flipped bit never verifies."""
    try:
        encoded = raw.encode("ascii")
        decoded = binascii.a2b_base64(encoded, strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SignatureError("malformed_signature") from None
    if binascii.b2a_base64(decoded, newline=False) != encoded:
        raise SignatureError("malformed_signature")
    return decoded


def parse_b64_digest(raw: str, size: int = SHA256_BYTES) -> bytes:
    """A digest of ``size`` bytes in canonical base64 (``b64decode_strict``), or
    ``malformed_signature``."""
    digest = b64decode_strict(raw)
    if len(digest) != size:
        raise SignatureError("malformed_signature")
    return digest


def hmac_digest(key: bytes, *parts: bytes, algorithm: str = "sha256") -> bytes:
    """The HMAC of ``parts`` one after the other (fed in turn, never joined: the body
    is not copied)."""
    mac = hmac.new(key, parts[0] if parts else b"", algorithm)
    for part in parts[1:]:
        mac.update(part)
    return mac.digest()


def hmac_sha256_hex(key: bytes, message: bytes) -> str:
    """The lower-case hex HMAC-SHA256 most providers sign with (for signing only)."""
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def hmac_b64(key: bytes, *parts: bytes, algorithm: str = "sha256") -> str:
    """The base64 HMAC of ``parts`` one after the other (for signing only)."""
    return base64.b64encode(hmac_digest(key, *parts, algorithm=algorithm)).decode("ascii")


def matching_key(
    keys: Sequence[Key],
    candidates: Sequence[bytes],
    *messages: Sequence[bytes],
    algorithm: str = "sha256",
) -> int:
    """The index of the first HMAC key whose digest of any of ``messages`` (each given
    as its parts) is one of ``candidates``, each compared in constant time; otherwise
    ``bad_signature``."""
    for index, key in enumerate(keys):
        if not isinstance(key, HmacKey):
            continue
        for message in messages:
            digest = hmac_digest(key.key, *message, algorithm=algorithm)
            for candidate in candidates:
                if hmac.compare_digest(digest, candidate):
                    return index
    raise SignatureError("bad_signature")


def match_hmac(
    scheme: str, signed: SignedHeaders, body: bytes, keys: Sequence[Key], version: str
) -> Verified:
    """Verify any ``version`` signature of ``prefix + body`` against any HMAC-SHA256 key."""
    candidates = [sig for ver, sig in signed.signatures if ver == version]
    index = matching_key(keys, candidates, (signed.prefix, body))
    return Verified(scheme, index, signed.timestamp)


PublicKeyT = TypeVar("PublicKeyT", Ed25519Key, EcdsaP256Key, RsaKey)


def matching_public_key(
    keys: Sequence[Key],
    kind: type[PublicKeyT],
    signatures: Sequence[bytes],
    check: Callable[[PublicKeyT, bytes], None],
) -> int:
    """The index of the first ``kind`` key for which ``check(key, signature)`` passes for
    any of ``signatures`` (it raises ``InvalidSignature`` otherwise); else
    ``bad_signature``."""
    for index, key in enumerate(keys):
        if not isinstance(key, kind):
            continue
        for signature in signatures:
            try:
                check(key, signature)
            except InvalidSignature:
                continue
            return index
    raise SignatureError("bad_signature")


def match_ed25519(
    scheme: str, signed: SignedHeaders, body: bytes, keys: Sequence[Key], version: str
) -> Verified:
    """Verify any ``version`` signature of ``prefix + body`` against any ed25519 key."""
    message = signed.prefix + body
    candidates = [sig for ver, sig in signed.signatures if ver == version]

    def check(key: Ed25519Key, signature: bytes) -> None:
        key.public_key.verify(signature, message)

    index = matching_public_key(keys, Ed25519Key, candidates, check)
    return Verified(scheme, index, signed.timestamp)


def match_ecdsa(
    scheme: str, signed: SignedHeaders, body: bytes, keys: Sequence[Key], version: str
) -> Verified:
    """Verify any ``version`` signature of ``prefix + body`` against any ECDSA P-256
    key (SHA-256)."""
    message = signed.prefix + body
    algorithm = ec.ECDSA(hashes.SHA256())

    def check(key: EcdsaP256Key, signature: bytes) -> None:
        key.public_key.verify(signature, message, algorithm)

    signatures = [signature for ver, signature in signed.signatures if ver == version]
    index = matching_public_key(keys, EcdsaP256Key, signatures, check)
    return Verified(scheme, index, signed.timestamp)


def hmac_secret(
    empty: str = "secret is empty", *, shape: re.Pattern[str] | None = None, unlike: str = ""
) -> Callable[[str], HmacKey]:
    """A ``parse_secret`` for an HMAC secret used as the text it is shown as: refused with
    ``empty`` when empty, and with ``unlike`` when it does not match ``shape``."""

    def parse_secret(raw: str) -> HmacKey:
        if not raw:
            raise ValueError(empty)
        if shape is not None and shape.fullmatch(raw) is None:
            raise ValueError(unlike)
        return HmacKey(raw.encode("utf-8"))

    return parse_secret


# The secret of a provider that takes any non-empty text.
plain_secret = hmac_secret()


def after_prefix(raw: str, prefix: str) -> str:
    """What follows ``prefix`` (``sha256=``) in a header, or ``malformed_signature``."""
    if not raw.startswith(prefix):
        raise SignatureError("malformed_signature")
    return raw[len(prefix) :]


def named_entries(raw: str, separator: str, *, strict: bool) -> list[tuple[str, str]]:
    """The ``name=value`` entries of a header such as ``t=1,v1=ab,v1=cd``, each stripped.
    More than ``MAX_ENTRIES`` is ``malformed_signature``; so is an entry without ``=``
    when ``strict``, and otherwise it is passed over."""
    entries = raw.split(separator)
    if len(entries) > MAX_ENTRIES:
        raise SignatureError("malformed_signature")
    found: list[tuple[str, str]] = []
    for entry in entries:
        name, sep, value = entry.strip().partition("=")
        if sep:
            found.append((name, value))
        elif strict:
            raise SignatureError("malformed_signature")
    return found


def only_timestamp(entries: Iterable[tuple[str, str]], name: str) -> str:
    """The text of the one ``name`` entry, or ``malformed_timestamp``."""
    stamps = [value for entry, value in entries if entry == name]
    if len(stamps) != 1:
        raise SignatureError("malformed_timestamp")
    return stamps[0]


def signature_entries(
    entries: Iterable[tuple[str, str]], decode: Callable[[str, str], bytes], passed_over: int = 0
) -> Signatures:
    """Each (version, text) as (version, ``decode(version, text)``). An entry that does
    not decode is passed over, as the providers' own libraries do: it never verifies,
    and cannot spoil a valid entry beside it. When none is left it is
    ``malformed_signature`` if one (or ``passed_over`` others) was passed over, else
    ``missing_signature``."""
    signatures: list[tuple[str, bytes]] = []
    for version, text in entries:
        try:
            signatures.append((version, decode(version, text)))
        except SignatureError:
            passed_over += 1
    if not signatures:
        raise SignatureError("malformed_signature" if passed_over else "missing_signature")
    return tuple(signatures)


def hex_signatures(entries: Iterable[tuple[str, str]], version: str) -> Signatures:
    """The ``version`` entries as SHA-256 hex digests (see ``signature_entries``)."""
    mine = [(name, value) for name, value in entries if name == version]
    return signature_entries(mine, lambda _, text: parse_hex_digest(text))


@dataclass(frozen=True, slots=True)
class HmacHeader:
    """The plainest scheme: one header holding ``prefix`` and the HMAC of
    ``signed_prefix + body``, in lower-case hex or canonical base64, with no timestamp
    (GitHub's ``sha256=<hex>``, Shopify's base64, Square's URL and body). Its
    ``check_headers`` and ``verify`` are a provider's."""

    # What ``Verified`` says verified the request ("github-sha256").
    scheme: str
    header: str
    prefix: str = ""
    encoding: Literal["hex", "base64"] = "hex"
    algorithm: Literal["sha1", "sha256", "sha512"] = "sha256"
    # Signed ahead of the body (Square: the notification URL).
    signed_prefix: bytes = b""
    parse_secret: Callable[[str], Key] = plain_secret

    def check_headers(self, headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        raw = after_prefix(one_header(headers, self.header), self.prefix)
        decode = parse_hex_digest if self.encoding == "hex" else parse_b64_digest
        digest = decode(raw, DIGEST_BYTES[self.algorithm])
        return SignedHeaders(None, self.signed_prefix, ((self.algorithm, digest),))

    def verify(self, signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        candidates = [digest for _, digest in signed.signatures]
        index = matching_key(keys, candidates, (signed.prefix, body), algorithm=self.algorithm)
        return Verified(self.scheme, index, signed.timestamp)


@dataclass(frozen=True, slots=True)
class HmacEntries:
    """One header listing ``name=value`` entries: the signatures of ``version``, each a
    lower-case hex HMAC-SHA256 of ``signed_prefix + body``, any of which may match (a
    secret's rotation), and the one ``timestamp`` entry when the scheme has one:
    ``t=…,v1=…,v1=…`` (Stripe), ``ts=…;h1=…`` (Paddle), ``v1=…,v1=…`` (PagerDuty).
    ``signed_prefix`` is formatted with the checked timestamp (``{ts}.``). An entry
    without ``=`` is ``malformed_signature`` when ``strict``, passed over otherwise."""

    scheme: str
    header: str
    separator: str
    version: str
    timestamp: str | None = None
    signed_prefix: str = ""
    strict: bool = True
    parse_secret: Callable[[str], Key] = plain_secret

    def check_headers(self, headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        entries = named_entries(
            one_header(headers, self.header), self.separator, strict=self.strict
        )
        if self.timestamp is None:
            return SignedHeaders(None, b"", hex_signatures(entries, self.version))
        raw_ts = only_timestamp(entries, self.timestamp)
        signatures = hex_signatures(entries, self.version)
        ts = parse_timestamp(raw_ts, now, tolerance_s)
        return SignedHeaders(ts, self.signed_prefix.format(ts=ts).encode(), signatures)

    def verify(self, signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        return match_hmac(self.scheme, signed, body, keys, self.version)


# (scheme, signed, body, keys, version) -> how the request verified: the ``version``
# signatures of ``signed.prefix + body`` matched against the keys of their kind
# (``match_hmac``, ``match_ed25519``), or ``bad_signature``.
Match = Callable[[str, SignedHeaders, bytes, Sequence[Key], str], Verified]


@dataclass(frozen=True, slots=True)
class TimestampedSignature:
    """A timestamp header and a signature header holding ``prefix`` and a signature of
    ``signed_prefix + body``, ``signed_prefix`` formatted with the checked timestamp
    (``{ts}``) or its text as received (``{raw}``, as most sign it): Slack's and Zoom's
    ``v0=<hex HMAC-SHA256>`` over ``v0:{timestamp}:{body}``, Zendesk's base64 HMAC over
    its ISO time and the body, Discord's ed25519 over the timestamp and the body.

    ``read_timestamp`` checks the timestamp's text against the window (whole seconds by
    default), ``decode`` the signature's (lower-case hex SHA-256 by default) and
    ``match`` the signature against the keys (HMAC-SHA256 by default); ``version``
    names the signature among ``SignedHeaders.signatures``."""

    scheme: str
    header: str
    timestamp_header: str
    version: str
    prefix: str = ""
    signed_prefix: str = "{raw}"
    read_timestamp: Callable[[str, float, int], int] = parse_timestamp
    decode: Callable[[str], bytes] = parse_hex_digest
    match: Match = match_hmac
    parse_secret: Callable[[str], Key] = plain_secret

    def check_headers(self, headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        raw_ts = one_header(headers, self.timestamp_header)
        signature = self.decode(after_prefix(one_header(headers, self.header), self.prefix))
        ts = self.read_timestamp(raw_ts, now, tolerance_s)
        signed = self.signed_prefix.format(ts=ts, raw=raw_ts).encode()
        return SignedHeaders(ts, signed, ((self.version, signature),))

    def verify(self, signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        return self.match(self.scheme, signed, body, keys, self.version)


@dataclass(frozen=True, slots=True)
class SharedToken:
    """A shared token sent as it is in ``header``: nothing is signed. Both sides are
    compared as their SHA-256, so that the comparison's time depends on neither the
    token's bytes nor its length (GitLab's ``X-Gitlab-Token``, ``provider = "token"``)."""

    scheme: str
    header: str
    parse_secret: Callable[[str], Key] = plain_secret

    def check_headers(self, headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        presented = one_header(headers, self.header).encode("utf-8", "surrogatepass")
        return SignedHeaders(None, b"", (("token", hashlib.sha256(presented).digest()),))

    def verify(self, signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        for index, key in enumerate(keys):
            if not isinstance(key, HmacKey):
                continue
            expected = hashlib.sha256(key.key).digest()
            for _, presented in signed.signatures:
                if hmac.compare_digest(expected, presented):
                    return Verified(self.scheme, index, None)
        raise SignatureError("bad_signature")
