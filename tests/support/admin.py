"""The admin UI as a browser session meets it: logging in with a token, and the CSRF
token each page's forms carry."""

from __future__ import annotations

import re

import httpx

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    match = CSRF_RE.search(html)
    assert match
    return match.group(1)


async def login(client: httpx.AsyncClient, token: str) -> str:
    """Log in with ``token``; the CSRF token of the new session."""
    response = await client.post("/admin/login", data={"token": token})
    assert response.status_code == 303, response.text
    page = await client.get("/admin")
    assert page.status_code == 200
    return csrf_of(page.text)
