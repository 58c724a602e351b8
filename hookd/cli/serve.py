"""The long-running commands: ``hookd serve`` (the receiver, under uvicorn) and ``hookd
worker`` (arq). Each checks what it can before it starts, so that a wrong setting is
one line and not a failure in every process after start-up was announced: sources
and handlers, the encryption keys, the database, the port; an unreachable Redis is a
warning only.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import shutil
import signal
import socket
import time
from types import FrameType

from hookd.cli.context import database_warnings, preflight, warn
from hookd.cli.parser import DEFAULT_HOST, EXIT_OK, listen_port
from hookd.errors import ConfigError
from hookd.logs import say
from hookd.settings import Settings
from hookd.sources import Sources, load_sources

log = logging.getLogger("hookd.serve")


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from ingest.metrics import prepare_multiprocess
    from processing.delivery import import_transform
    from processing.handlers import import_handler
    from store.crypto import BodyCipher

    # The options win; else HOOKD_HOST/HOOKD_PORT, which send-test also follows.
    args.host = args.host or settings.host or DEFAULT_HOST
    args.port = args.port or listen_port(settings, "--port")
    sources = load_sources(settings.config)  # fail here, with one line, not in every worker
    warn_about(sources)
    for source in sources:
        for ref in source.config.handler_refs:
            import_handler(ref)
        for destination in source.config.destinations:
            if destination.transform is not None:
                import_transform(destination.transform)
    # Checked here, before "serving on": otherwise each receiver process fails on
    # its own, after start-up was announced.
    BodyCipher(settings.encryption_keys)
    asyncio.run(preflight(settings))
    check_listen(args.host, args.port)
    warn(asyncio.run(database_warnings(settings)))  # every check passed: once, here
    if settings.redis_url:
        from processing.wakeups import warn_if_redis_unreachable

        asyncio.run(
            warn_if_redis_unreachable(
                settings.redis_url,
                "events are still stored and acknowledged, but their wake-ups are lost and "
                "/readyz answers 503 until it is back; a hookd worker's database sweep "
                "(every HOOKD_SWEEP_S) processes them meanwhile",
                sweep_s=settings.sweep_s,
            )
        )
    processors = settings.processor_processes()
    say(
        f"serving on http://{args.host}:{args.port}  (sources: {settings.config}; "
        f"processing: {processing_mode(settings, processors)})"
    )
    # Several processes (receiver workers, processor processes) share one metrics
    # directory (prometheus-client's multiprocess mode); it must be set before they start.
    metrics_dir = prepare_multiprocess(args.workers, processors)
    # SIGTERM ends serve through the ``finally`` below (processors stopped, directories
    # removed), also when it comes after uvicorn's own shutdown, which raises it again.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        run_with_processors(args, processors, settings)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        _stopped()
    return EXIT_OK


def warn_about(sources: Sources) -> None:
    """The sources file's warnings (URLs that carry a secret to this machine or a
    private network), one line each, as the start-up checks warn."""
    for line in sources.warnings:
        say(line, level=logging.WARNING)


def processing_mode(settings: Settings, processors: int) -> str:
    if settings.redis_url:
        return "arq (hookd worker processes)"
    if processors:
        return f"{processors} processor process{'es' if processors > 1 else ''}"
    return "in-process"


# When serve was asked to stop (``time.monotonic()``), for the "stopped" line.
_stopping_since: dict[str, float] = {}


def _stopping(signum: int) -> None:
    """The first signal to stop: logged, and the time kept for the "stopped" line.

    Called in a signal handler: with uvicorn's event loop running, the line is written
    from the loop, not from the middle of whatever write the signal interrupted."""
    if _stopping_since:
        return
    _stopping_since["at"] = time.monotonic()
    name = signal.Signals(signum).name
    try:
        asyncio.get_running_loop().call_soon_threadsafe(_log_stopping, name)
    except RuntimeError:  # no loop (before uvicorn's, after it, or in the supervisor)
        _log_stopping(name)


def _log_stopping(name: str) -> None:
    log.info("stopping", extra={"signal": name})


def _stopped() -> None:
    """serve's last line: the receiver, its processors and their drains have ended."""
    since = _stopping_since.get("at")
    took = {} if since is None else {"took_s": round(time.monotonic() - since, 3)}
    log.info("stopped", extra=took)


def _exit_on_sigterm(sig: int, _frame: FrameType | None) -> None:
    _stopping(sig)
    raise SystemExit(EXIT_OK)


def run_with_processors(args: argparse.Namespace, processors: int, settings: Settings) -> None:
    """uvicorn, with ``processors`` processor processes beside it (none: processing in
    the receiver, or by hookd worker with Redis) and, on a SQLite file, the box's one
    writer; stopped when uvicorn returns, the writer last (the others write through it)."""
    from hookd.runtime.app import PROCESSOR_SOCKETS_ENV
    from hookd.runtime.processors import BoxWriter, Children, Processors
    from hookd.runtime.sqlite_writer import WRITER_SOCKET_ENV, box_database

    os.environ.pop(PROCESSOR_SOCKETS_ENV, None)  # not one inherited from elsewhere
    os.environ.pop(WRITER_SOCKET_ENV, None)
    children: list[Children] = []
    database = box_database(settings.database_url, settings.sqlite_writer_process())
    if database is not None:
        children.append(BoxWriter(database))
    if processors:
        children.append(Processors(processors))
    try:
        for group in children:
            group.start()
        run_uvicorn(args)
    finally:
        for group in reversed(children):
            group.stop()


def check_listen(host: str, port: int) -> None:
    """Bind and listen as uvicorn will, then let go, so a taken port is one line.

    uvicorn only finds out after start-up was announced, in the middle of its own
    log, and exits 3. There is a moment between this check and uvicorn's bind;
    losing that race gives uvicorn's error, as before.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            advice = "pick another --port (or HOOKD_PORT), or stop what is listening there"
        elif exc.errno == errno.EACCES:
            advice = "ports below 1024 need privileges: pick another --port (or HOOKD_PORT)"
        else:  # not an address of this machine, or a name that does not resolve
            advice = "pass --host (or HOOKD_HOST) an address of this machine, or 0.0.0.0"
        raise ConfigError(
            f"serve: cannot listen on {host}:{port} ({exc.strerror or exc}); {advice}"
        ) from None


def _one_graceful_stop() -> None:
    """A second Ctrl-C while serve stops does not cut the stop short.

    uvicorn treats it as "force quit": it skips the app's shutdown (the group commit's
    last batch, the processing in hand) and the event loop is torn down under it, with a
    traceback. hookd's stop is bounded (HOOKD_COMMIT_TIMEOUT_S, the processors' own
    SIGTERM), so the second one is answered with a line and the stop goes on; SIGKILL
    still ends it at once."""
    from uvicorn.server import Server
    from uvicorn.supervisors.multiprocess import Multiprocess

    forced = Server.handle_exit

    def handle_exit(server: Server, signum: int, frame: FrameType | None) -> None:
        if server.should_exit and signum == signal.SIGINT:
            say("already stopping: finishing what is in hand (SIGKILL ends it now)")
            return
        _stopping(signum)
        forced(server, signum, frame)

    Server.handle_exit = handle_exit  # type: ignore[method-assign,assignment]
    # ``--workers N``: the parent only supervises, and takes its signals this way.
    term, interrupt = Multiprocess.handle_term, Multiprocess.handle_int

    def handle_term(supervisor: Multiprocess) -> None:
        _stopping(signal.SIGTERM)
        term(supervisor)

    def handle_int(supervisor: Multiprocess) -> None:
        _stopping(signal.SIGINT)
        interrupt(supervisor)

    Multiprocess.handle_term = handle_term  # type: ignore[method-assign,assignment]
    Multiprocess.handle_int = handle_int  # type: ignore[method-assign,assignment]


def run_uvicorn(args: argparse.Namespace) -> None:
    import uvicorn

    _one_graceful_stop()
    uvicorn.run(
        "hookd.runtime.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        # httptools with a deadline and a size limit on request heads (ingest/httpguard.py).
        http="ingest.httpguard:GuardedHttpToolsProtocol",
        access_log=False,
        log_level="warning",
        # Keep the handler hookd.logs put on uvicorn's loggers (in this process and,
        # from the app factory, in each receiver process): same format, JSON or not.
        log_config=None,
        server_header=False,
    )


def cmd_worker(_args: argparse.Namespace, settings: Settings) -> int:
    from hookd.runtime import worker

    if not settings.redis_url:
        raise ConfigError(
            "environment: HOOKD_REDIS_URL: hookd worker needs Redis; without it, "
            "hookd serve processes events itself (HOOKD_PROCESSORS)"
        )
    sources = load_sources(settings.config)
    warn_about(sources)
    asyncio.run(preflight(settings))
    warnings = asyncio.run(database_warnings(settings))
    asyncio.run(worker.run(settings, sources, checked=lambda: warn(warnings)))
    return EXIT_OK
