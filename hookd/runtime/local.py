"""A processor process of ``hookd serve`` without Redis: ``python -m hookd.runtime.local``.

``hookd serve`` starts ``HOOKD_PROCESSORS`` of them (``hookd.runtime.processors``) so
that handlers, claims and ledger writes run beside the receiver, not in its event loop.
Each binds a Unix datagram socket; the receivers' ``LocalWaker`` sends it a datagram
after commits that left events pending, and it drains on every one, as
``InProcessConsumer`` does, with a sweep every ``HOOKD_SWEEP_S`` for a wake-up that was
lost. Beside it, a stream socket takes
the events receivers commit already leased to it, with their rows (insert as claimed,
``processing.handoff``). The reconciliation schedule, the
prune schedule and bulk operations stay in the receiver.

It stops on SIGTERM or SIGINT (the batch in hand finishes, or hands its claims back;
exit status 0), and on its own when ``hookd serve`` is gone: serve holds the other end of a pipe on
its stdin, and end of file there means serve exited, even by ``kill -9``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import sys

from hookd import tracing
from hookd.errors import ConfigError
from hookd.logs import configure as configure_logs
from hookd.logs import say
from hookd.runtime.lifecycle import Adapted, running
from hookd.runtime.worker import Runtime, build_runtime
from hookd.settings import Settings
from hookd.sources import load_sources
from processing.handoff import HandoffServer, handoff_path
from processing.wakeups import InProcessConsumer

log = logging.getLogger("hookd.processor")

# How long the batch in hand may take to finish at shutdown before it is cancelled
# (and hands its claims back): within the grace `hookd serve` gives before SIGKILL.
STOP_GRACE_S = 5.0


def bind(path: str) -> socket.socket:
    """The wake-up socket at ``path`` (a stale one, left by a killed predecessor, is
    replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(path)
    except OSError as exc:  # its directory is gone (serve removed it at exit), too long...
        sock.close()
        raise ConfigError(
            f"cannot bind the wake-up socket {path} ({exc.strerror or exc}); processor "
            "processes are started by hookd serve, in a directory it creates"
        ) from None
    sock.setblocking(False)
    return sock


def _watches_parent() -> bool:
    """Whether stdin is a pipe or socket (from serve): its end of file means serve is gone."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, index: int) -> None:
    def on_signal(sig: signal.Signals) -> None:
        if not stop.is_set():
            log.info("stopping", extra={"processor": index, "signal": sig.name})
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)


def handoff_server(settings: Settings, runtime: Runtime, path: str) -> HandoffServer:
    """Where receivers hand new events over, committed leased to one of this process's
    processors, with their rows (``processing.handoff``)."""
    return HandoffServer(
        handoff_path(path),
        owners=runtime.processor.owners,
        lease_s=settings.lease_s,
        accept=runtime.processor.accept,
        room=runtime.processor.has_room,
    )


async def run(settings: Settings, index: int, path: str) -> None:
    sources = load_sources(settings.config)
    sock = bind(path)
    runtime = build_runtime(settings, sources)
    consumer = InProcessConsumer(runtime.processor, settings.sweep_s)
    handoff = handoff_server(settings, runtime, path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_datagram() -> None:
        # Every datagram queued says the same thing: read them all, drain once.
        while True:
            try:
                sock.recv(64)
            except OSError:  # drained (BlockingIOError), or the socket is gone
                break
        consumer.wake()

    def on_stdin() -> None:
        try:
            data = os.read(sys.stdin.fileno(), 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            log.info("hookd serve is gone: stopping", extra={"processor": index})
            loop.remove_reader(sys.stdin.fileno())
            stop.set()

    watching = _watches_parent()

    def listen() -> None:
        loop.add_reader(sock.fileno(), on_datagram)
        if watching:
            loop.add_reader(sys.stdin.fileno(), on_stdin)

    def deaf() -> None:
        loop.remove_reader(sock.fileno())
        if watching:
            loop.remove_reader(sys.stdin.fileno())

    async def drain() -> None:
        log.info(
            "draining",
            extra={
                "processor": index,
                "events": runtime.processor.in_flight,
                "grace_s": STOP_GRACE_S,
            },
        )
        await consumer.stop(STOP_GRACE_S)

    async def unbind() -> None:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    _stop_on_signals(loop, stop, index)
    # Started in this order, stopped in the reverse one: no more hand-overs, no more
    # wake-ups, the events in hand drained, then the runtime's connections and the socket.
    services = [
        Adapted(unbind),
        Adapted(runtime.close),
        Adapted(drain, consumer.start),
        Adapted(deaf, listen),
        Adapted(handoff.close, handoff.start),
    ]
    async with running(services):
        log.info(
            "processor started",
            extra={
                "processor": index,
                "pid": os.getpid(),
                "owner": runtime.processor.owner,
                "sweep_s": settings.sweep_s,
            },
        )
        await stop.wait()
    log.info("processor stopped", extra={"processor": index})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hookd.runtime.local")
    parser.add_argument("--index", type=int, default=0, help="this processor's number")
    parser.add_argument("--socket", required=True, help="the wake-up socket to bind")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        configure_logs(settings.log_level, settings.log_json)
        tracing.setup("processor")
        asyncio.run(run(settings, args.index, args.socket))
    except ConfigError as exc:
        say(f"processor {args.index}: {exc}", level=logging.ERROR)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
