"""HTTP/1.1 by hand on a socket: pipelining, bodies in pieces, half-sent requests."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from urllib.parse import urlsplit


def request(
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    *,
    method: str = "POST",
    version: str = "1.1",
) -> bytes:
    """One request's bytes, with a content-length (unless ``headers`` set one)."""
    lines = [f"{method} {path} HTTP/{version}", "Host: hookd"]
    given = {name.lower() for name in (headers or {})}
    lines.extend(f"{name}: {value}" for name, value in (headers or {}).items())
    if method == "POST" and "content-length" not in given and "transfer-encoding" not in given:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def connect(base_url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None
    return await asyncio.open_connection(parts.hostname, parts.port)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response (status, headers by lowercase name, body), by its content-length."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body
