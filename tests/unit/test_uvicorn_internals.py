"""The parts of uvicorn that hookd uses and uvicorn does not promise to keep.

``ingest.httpguard`` subclasses uvicorn's httptools protocol (overriding its parser
callbacks and reading its attributes), ``ingest.direct`` stands in for its
request-response cycle and writes answers with its status lines, and ``hookd serve``
and ``hookd worker`` wrap its server's and supervisor's signal handling. pyproject
pins uvicorn to the minor version these were written against; this file says, by
name, which of them a newer uvicorn moved or changed, before a test of behaviour
fails somewhere downstream of it.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server, ServerState
from uvicorn.supervisors.multiprocess import Multiprocess

from ingest.direct import DirectCycle

# Methods hookd overrides or calls, with their parameters (self included).
METHODS: dict[tuple[type, str], tuple[str, ...]] = {
    (HttpToolsProtocol, "__init__"): ("self", "config", "server_state", "app_state", "_loop"),
    (HttpToolsProtocol, "connection_made"): ("self", "transport"),
    (HttpToolsProtocol, "connection_lost"): ("self", "exc"),
    (HttpToolsProtocol, "data_received"): ("self", "data"),
    (HttpToolsProtocol, "eof_received"): ("self",),
    (HttpToolsProtocol, "on_message_begin"): ("self",),
    (HttpToolsProtocol, "on_url"): ("self", "url"),
    (HttpToolsProtocol, "on_header"): ("self", "name", "value"),
    (HttpToolsProtocol, "on_headers_complete"): ("self",),
    (HttpToolsProtocol, "on_body"): ("self", "body"),
    (HttpToolsProtocol, "on_message_complete"): ("self",),
    (HttpToolsProtocol, "on_response_complete"): ("self",),
    (HttpToolsProtocol, "timeout_keep_alive_handler"): ("self",),
    (HttpToolsProtocol, "_start_asgi_task"): ("self", "cycle", "app"),
    # Overridden to cut an endless response (the event stream) at a graceful stop.
    (HttpToolsProtocol, "shutdown"): ("self",),
    (FlowControl, "pause_reading"): ("self",),
    (FlowControl, "resume_reading"): ("self",),
    (ProxyHeadersMiddleware, "__init__"): ("self", "app", "trusted_hosts"),
    (Server, "handle_exit"): ("self", "sig", "frame"),
    (Server, "capture_signals"): ("self",),
    (Server, "serve"): ("self", "sockets"),
    (Multiprocess, "handle_term"): ("self",),
    (Multiprocess, "handle_int"): ("self",),
}
# What the protocol does with its cycle, which ``DirectCycle`` must offer in its place.
CYCLE_ATTRIBUTES = {
    "body",
    "more_body",
    "message_event",
    "response_complete",
    "keep_alive",
    "disconnected",
}


@pytest.mark.parametrize(
    ("owner", "name"), list(METHODS), ids=[f"{o.__name__}.{n}" for o, n in METHODS]
)
def test_a_method_hookd_uses_keeps_its_parameters(owner: type, name: str) -> None:
    method = getattr(owner, name, None)
    assert callable(method), f"uvicorn's {owner.__qualname__}.{name} is gone"
    parameters = tuple(inspect.signature(method).parameters)
    assert parameters == METHODS[owner, name], (
        f"uvicorn's {owner.__qualname__}.{name} now takes {parameters}, "
        f"hookd was written for {METHODS[owner, name]}"
    )


def test_the_status_lines_and_header_check_direct_answers_use() -> None:
    assert httptools_impl.STATUS_LINE[202].startswith(b"HTTP/1.1 202 "), "STATUS_LINE moved"
    assert set(httptools_impl.STATUS_LINE) >= set(range(100, 600)), "STATUS_LINE shrank"
    pattern = httptools_impl.HEADER_VALUE_RE
    assert pattern.search(b"ok\r\nset-cookie: x"), "HEADER_VALUE_RE no longer finds CR/LF"
    assert not pattern.search(b"a plain value\t"), "HEADER_VALUE_RE refuses a plain value"


def test_the_protocol_uses_of_its_cycle_are_what_direct_cycle_offers() -> None:
    source = inspect.getsource(HttpToolsProtocol)
    used = set(re.findall(r"self\.cycle\.(\w+)", source))
    assert used <= CYCLE_ATTRIBUTES, (
        f"uvicorn's HttpToolsProtocol now uses its cycle's {sorted(used - CYCLE_ATTRIBUTES)}: "
        "ingest.direct.DirectCycle stands in for that cycle and must offer them"
    )
    assert set(re.findall(r"message_event\.(\w+)", source)) == {"set"}, (
        "uvicorn's HttpToolsProtocol uses more of cycle.message_event than set()"
    )
    for name in CYCLE_ATTRIBUTES:
        assert name in DirectCycle.__slots__ or hasattr(DirectCycle, name), name
    # A cycle queued behind another (pipelining) is started through _start_asgi_task,
    # which httpguard overrides to start a DirectCycle in its turn.
    completed = inspect.getsource(HttpToolsProtocol.on_response_complete)
    assert "self.pipeline.pop()" in completed, "uvicorn no longer pops its pipeline there"
    assert "self._start_asgi_task(cycle, app)" in completed, (
        "uvicorn no longer starts a pipelined cycle through _start_asgi_task"
    )


def test_uvicorn_still_does_nothing_at_the_clients_eof() -> None:
    """httpguard's ``eof_received`` replaces uvicorn's without calling it."""
    body = inspect.getsource(HttpToolsProtocol.eof_received).strip().splitlines()[-1]
    assert body.strip() == "pass", "uvicorn's HttpToolsProtocol.eof_received now does something"


class Transport(asyncio.Transport):
    """Enough of a socket transport for the protocol to take a request head."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.2", 40000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope: Any, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    raise AssertionError("not started here")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


def test_the_protocols_attributes_hookd_reads(loop: asyncio.AbstractEventLoop) -> None:
    started: list[tuple[Any, Any]] = []

    class Recording(HttpToolsProtocol):
        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            started.append((cycle, app))

    config = uvicorn.Config(app, lifespan="off", log_config=None, timeout_keep_alive=7)
    protocol = Recording(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    protocol.connection_made(Transport())
    protocol.data_received(
        b"POST /hooks/github?x=1 HTTP/1.1\r\nHost: hookd\r\nExpect: 100-continue\r\n"
        b"Content-Length: 2\r\n\r\n"
    )
    missing = [
        name
        for name in (
            "app",
            "loop",
            "parser",
            "url",
            "headers",
            "expect_100_continue",
            "limit_concurrency",
            "pipeline",
            "cycle",
            "flow",
            "transport",
            "client",
            "server_state",
            "timeout_keep_alive_task",
        )
        if not hasattr(protocol, name)
    ]
    assert not missing, f"uvicorn's HttpToolsProtocol no longer has {missing}"
    assert protocol.app is config.loaded_app
    assert protocol.url == b"/hooks/github?x=1"
    assert (b"host", b"hookd") in protocol.headers, "headers are no longer (lowered name, value)"
    assert protocol.expect_100_continue is True
    assert protocol.limit_concurrency is None
    assert isinstance(protocol.pipeline, collections.deque)
    assert isinstance(protocol.flow, FlowControl)
    assert protocol.client == ("127.0.0.2", 40000)
    assert protocol.server_state.default_headers == []
    parser = protocol.parser
    assert parser.get_method() == b"POST"
    assert parser.get_http_version() == "1.1"
    assert parser.should_keep_alive() is True
    assert parser.should_upgrade() is False
    # The head complete: a cycle, started through _start_asgi_task.
    assert started == [(protocol.cycle, protocol.app)]
    for name in CYCLE_ATTRIBUTES:
        assert hasattr(protocol.cycle, name), f"uvicorn's cycle no longer has {name}"


def test_the_proxy_headers_trust_hookd_reads() -> None:
    middleware = ProxyHeadersMiddleware(app, trusted_hosts="127.0.0.1")
    assert middleware.app is app
    trusted = middleware.trusted_hosts
    assert "127.0.0.1" in trusted
    assert "10.0.0.9" not in trusted
    assert trusted.get_trusted_client_address("203.0.113.5, 127.0.0.1") == ("203.0.113.5", 0)


def test_the_server_hookd_worker_embeds() -> None:
    server = Server(uvicorn.Config(app, lifespan="off", log_config=None))
    assert server.should_exit is False, "uvicorn's Server no longer has should_exit"
    assert inspect.isasyncgenfunction(Server.serve) or inspect.iscoroutinefunction(Server.serve)
