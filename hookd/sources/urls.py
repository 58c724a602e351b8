"""The URLs a source sends a secret to: https:// unless its table allows plain http://,
and a warning for one naming this machine or a private network."""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from urllib.parse import unquote, urlsplit

from hookd.errors import ConfigError
from hookd.sources.models import SourceConfig

# Addresses a URL may name that reach this machine or a network not on the internet:
# (kind, how a warning says it, networks). Only literal addresses (and localhost) are
# recognised: the configuration is never resolved through DNS.
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


_INTERNAL: tuple[tuple[str, str, tuple[_Network, ...]], ...] = (
    (
        "loopback",
        "a loopback address (this machine)",
        (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")),
    ),
    (
        "unspecified",
        "an unspecified address (this machine)",
        (ipaddress.ip_network("0.0.0.0/8"), ipaddress.ip_network("::/128")),
    ),
    (
        "private",
        "a private address (RFC 1918, fc00::/7)",
        (
            ipaddress.ip_network("10.0.0.0/8"),
            ipaddress.ip_network("172.16.0.0/12"),
            ipaddress.ip_network("192.168.0.0/16"),
            ipaddress.ip_network("fc00::/7"),
        ),
    ),
    (
        "link-local",
        "a link-local address (169.254.0.0/16, fe80::/10: where cloud metadata services are)",
        (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10")),
    ),
)


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address when it is written as one: the usual forms, and the
    short, octal and hex IPv4 forms the system's resolver also reads without DNS
    (``127.1``, ``0x7f.0.0.1``, ``2130706433``)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[0-9a-fx.]+", host):
            return None
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def internal_target(url: str) -> tuple[str, str, str] | None:
    """(host, kind, how a warning says it) when ``url`` names ``localhost`` or a literal
    loopback, unspecified, private or link-local address; None otherwise (a name is
    never resolved)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    host = unquote(host).rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return host, "loopback", "a loopback name (this machine)"
    address = _literal_address(host)
    if address is None:
        return None
    for kind, said, networks in _INTERNAL:
        if any(address in network for network in networks):
            return host, kind, said
    return None


def check_urls(path: Path, label: str, config: SourceConfig) -> list[str]:
    """Every URL that carries a secret (a destination's signed payloads, the reconcile
    API's token) must be https://, unless its table says ``allow_insecure = true``;
    one naming this machine or a private network is a warning (returned)."""
    targets: list[tuple[str, str, bool, str, str]] = []
    if config.forward is not None:
        targets.append(
            (
                "forward.url",
                config.forward.url,
                config.forward.allow_insecure,
                "the signed payloads",
                "[sources.forward]",
            )
        )
    for destination in config.destinations:
        targets.append(
            (
                f"destinations.{destination.name}.url",
                destination.url,
                destination.allow_insecure,
                "the signed payloads",
                "this [[sources.destinations]] table",
            )
        )
    rc = config.reconcile
    if rc is not None and rc.api_url:
        targets.append(
            (
                "reconcile.api_url",
                rc.api_url,
                rc.allow_insecure,
                "the API token",
                "[sources.reconcile]",
            )
        )
    warnings = []
    for key, url, allowed, carried, table in targets:
        warning = checked_url(path, label, key, url, allowed=allowed, carried=carried, table=table)
        if warning is not None:
            warnings.append(warning)
    return warnings


def checked_url(
    path: Path, label: str, key: str, url: str, *, allowed: bool, carried: str, table: str
) -> str | None:
    """One URL that carries a secret (``carried`` says which; a ``[[notify]]`` channel's
    too): refused unless https://, or http:// with ``allow_insecure = true`` in
    ``table``; a warning (returned) when it names this machine or a private network."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme != "https" and not (scheme == "http" and allowed):
        if scheme == "http":
            raise ConfigError(
                f"{path}: {label}: key {key!r}: http:// would send {carried} "
                f"unencrypted; use https://, or set allow_insecure = true in {table} "
                "(a test server, a trusted network)"
            )
        raise ConfigError(f"{path}: {label}: key {key!r}: must be an https:// URL")
    internal = internal_target(url)
    if internal is None:
        return None
    host, _, said = internal
    return (
        f"{path}: {label}: key {key!r}: {host} is {said}: hookd sends {carried} "
        "there; check that it is meant to"
    )
