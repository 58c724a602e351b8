"""The processor processes of ``hookd serve`` without Redis, the box's one SQLite
writer, and their supervision (``Children``).

``hookd serve`` starts them before uvicorn (``hookd.runtime.local``, one process each),
in a private directory (mode 0700) that holds their wake-up sockets, and tells every
receiver process where those are (``PROCESSOR_SOCKETS_ENV``). A thread restarts one
that exits while serve runs, with a back-off so a crash loop does not spin; at serve's
exit they get SIGTERM, then SIGKILL after a grace, and the directory is removed.

They stay in serve's process group, as uvicorn's receiver processes do: a signal to
the group (Ctrl-C at a terminal, ``kill -9`` of the group) reaches them too. One that
exits cleanly (it was asked to stop, most likely with serve) is started again only
after ``CLEAN_RESTART_S``, by which time serve has usually stopped; one that crashed,
after a short back-off. Serve holds the write end of a pipe on each one's stdin, so a
processor stops by itself when serve is gone, even by a ``kill -9`` of serve alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hookd.backoff import capped
from hookd.runtime.app import PROCESSOR_SOCKETS_ENV
from hookd.runtime.sqlite_writer import WRITER_SOCKET_ENV

log = logging.getLogger("hookd.serve")

# How long a processor may take to stop after SIGTERM before it gets SIGKILL.
STOP_GRACE_S = 10.0
# The restart back-off after an unexpected exit: doubling from the first, capped.
RESTART_FIRST_S = 0.5
RESTART_CAP_S = 5.0
# A processor that exited cleanly (status 0: SIGTERM, SIGINT) is started again after this.
CLEAN_RESTART_S = 5.0
# A processor that ran this long before exiting starts the back-off again.
STABLE_S = 30.0
# How often the supervisor thread looks at its processes.
POLL_S = 0.2


class Children:
    """``count`` child processes of ``hookd serve``, restarted when they exit, stopped by
    ``stop``; what each runs and how it is asked to stop is the subclass's."""

    role = "child"
    label = "child"  # in log lines
    # The restart back-off after an unexpected exit: doubling from the first, capped.
    restart_first_s = RESTART_FIRST_S
    restart_cap_s = RESTART_CAP_S

    def __init__(self, count: int, prefix: str) -> None:
        self.count = count
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        os.chmod(self.dir, 0o700)
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self._started = [0.0] * count
        self._failures = [0] * count
        self._due = [0.0] * count  # when a dead one may be started again
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def command(self, index: int) -> list[str]:
        raise NotImplementedError

    def ask_to_stop(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)

    def start(self) -> None:
        """Start them, and the thread that keeps them running."""
        with self._lock:
            for index in range(self.count):
                self._spawn(index)
        self._thread = threading.Thread(target=self._watch, name=f"hookd-{self.role}", daemon=True)
        self._thread.start()

    def _spawn(self, index: int) -> None:
        # Started with SIGINT blocked (a signal mask survives exec): a Ctrl-C at the
        # terminal reaches the whole process group, and a child must not stop, or die in
        # its imports, before serve has stopped taking events; serve stops it itself
        # (or it sees serve gone on its stdin).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._procs[index] = subprocess.Popen(  # noqa: S603 - this interpreter, our module
                self.command(index),
                stdin=subprocess.PIPE,  # its end of file tells the child serve is gone
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self._started[index] = time.monotonic()

    def _watch(self) -> None:
        while not self._stopping.wait(POLL_S):
            with self._lock:
                if self._stopping.is_set():
                    return
                for index, proc in enumerate(self._procs):
                    self._look_after(index, proc)

    def _look_after(self, index: int, proc: subprocess.Popen[bytes] | None) -> None:
        now = time.monotonic()
        if proc is not None:
            code = proc.poll()
            if code is None:
                return
            _forget(proc)
            self._procs[index] = None
            fields = {self.role: index, "pid": proc.pid, "exit_code": code}
            if code == 0:  # asked to stop (by a signal to serve's group, most likely)
                self._due[index] = now + CLEAN_RESTART_S
                log.info(
                    f"{self.label} process stopped; starting another unless serve stops",
                    extra={**fields, "restart_in_s": CLEAN_RESTART_S},
                )
                return
            if now - self._started[index] >= STABLE_S:
                self._failures[index] = 0
            self._failures[index] += 1
            delay = capped(self.restart_first_s, self._failures[index] - 1, self.restart_cap_s)
            self._due[index] = now + delay
            log.warning(
                f"{self.label} process exited; restarting it",
                extra={**fields, "restart_in_s": round(delay, 2)},
            )
            return
        if now >= self._due[index]:
            try:
                self._spawn(index)
            except OSError as exc:  # no process could be started (limits): try again later
                self._due[index] = now + self.restart_cap_s
                log.warning(
                    f"{self.label} process not started",
                    extra={self.role: index, "error": type(exc).__name__},
                )

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Each asked to stop (``ask_to_stop``), SIGKILL to those still running after
        ``grace_s``; then their directory goes."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            procs = [p for p in self._procs if p is not None]
            self._procs = [None] * self.count
        for proc in procs:
            self.ask_to_stop(proc)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    f"{self.label} process did not stop in time: killed",
                    extra={"pid": proc.pid, "grace_s": grace_s},
                )
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
            _forget(proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Processors(Children):
    """``count`` processor processes (``hookd.runtime.local``); every receiver is told
    where their sockets are (``PROCESSOR_SOCKETS_ENV``)."""

    role = "processor"
    label = "processor"

    def __init__(self, count: int) -> None:
        super().__init__(count, "hookd-processors-")
        self.paths = [str(self.dir / f"processor-{i}.sock") for i in range(count)]

    def command(self, index: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hookd.runtime.local",
            "--index",
            str(index),
            "--socket",
            self.paths[index],
        ]

    def start(self) -> None:
        os.environ[PROCESSOR_SOCKETS_ENV] = os.pathsep.join(self.paths)
        super().start()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        super().stop(grace_s)
        os.environ.pop(PROCESSOR_SOCKETS_ENV, None)


class BoxWriter(Children):
    """The box's one SQLite writer (``python -m store.intake.sqlite_write --listen``):
    every receiver's inserts and every processor's outcomes go through it, committed
    together one transaction per short window, so no process waits for another to hand
    it SQLite's write lock. Receivers and processors find its socket in
    ``WRITER_SOCKET_ENV``; one that dies is started again at once (its clients' requests
    in flight fail and are asked again: no acknowledgement is lost). It stops when
    serve closes its stdin, after the receivers and processors, answering what it
    holds first."""

    role = "sqlite_writer"
    label = "sqlite writer"
    restart_first_s = 0.05
    restart_cap_s = 1.0

    def __init__(self, database: str) -> None:
        super().__init__(1, "hookd-writer-")
        self.database = database
        self.path = str(self.dir / "writer.sock")

    def command(self, index: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "store.intake.sqlite_write",
            "--listen",
            self.path,
            self.database,
        ]

    def ask_to_stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    def start(self) -> None:
        os.environ[WRITER_SOCKET_ENV] = self.path
        super().start()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        super().stop(grace_s)
        os.environ.pop(WRITER_SOCKET_ENV, None)


def _forget(proc: subprocess.Popen[bytes]) -> None:
    """Close serve's end of its stdin pipe, and drop its metrics' live files (a
    multiprocess gauge of a dead process would otherwise still count)."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        with contextlib.suppress(Exception):
            multiprocess.mark_process_dead(proc.pid)  # type: ignore[no-untyped-call]
