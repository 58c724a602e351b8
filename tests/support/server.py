"""Real ``hookd serve`` / ``hookd worker`` processes, and a private Redis, for tests
where HTTP, processes and crashes matter."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HookdProcess:
    """``python -m hookd.cli ARGS`` in its own process group, logging to a file."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.args = args
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HOOKD_LOG_LEVEL": "WARNING",
            # Processing inside serve's own process, as the tests written for it expect,
            # and one Python process per server instead of two: hundreds of servers start
            # in a run, on two cores. test_serve_processors.py (and the Quickstart test,
            # which runs the scripts) run the default, separate processor processes.
            "HOOKD_PROCESSORS": "0",
            **env,
        }
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = cwd / f"{args[0]}-{time.monotonic_ns()}.log"

    def launch(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hookd.cli", *self.args],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_for_line(self, wanted: Callable[[str], bool], timeout_s: float = 30.0) -> str:
        """The first complete line of the log that ``wanted`` accepts, as soon as it is
        written; fails when the process exits or ``timeout_s`` passes without one."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            # Only whole lines: another process may be in the middle of writing one.
            for line in text[: text.rfind("\n") + 1].splitlines():
                if wanted(line):
                    return line
            if not self.alive():
                raise AssertionError(f"{self.args[0]} exited without that line: {self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no such line after {timeout_s:g}s: {self.log()}")
            time.sleep(0.05)

    def kill9(self) -> None:
        """SIGKILL the whole process group: no shutdown hook, no flush, nothing."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM the process group; SIGKILL it when it has not exited 15 s later."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Stop; when the block failed, its log goes to stderr, which pytest shows with
        the failure (the process's side of it, e.g. why a connection was dropped)."""
        self.stop()
        if kind is not None:
            print(f"--- {self.args[0]} log ({self.log_path.name}) ---", file=sys.stderr)
            print(self.log(), file=sys.stderr)

    def exited_by_itself(self) -> bool:
        """The process has exited, and not by SIGKILL (``kill9``, or ``stop`` giving up)."""
        return self.proc is not None and self.proc.returncode not in (None, -signal.SIGKILL)


class HookdServer(HookdProcess):
    def __init__(self, env: dict[str, str], cwd: Path, *, workers: int = 1) -> None:
        self.port = free_port()
        super().__init__(["serve", "--port", str(self.port), "--workers", str(workers)], env, cwd)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> HookdServer:
        self.launch()
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hookd serve exited {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"hookd serve did not start: {self.log()}")

    def __enter__(self) -> HookdServer:
        return self.start()


class HookdWorker(HookdProcess):
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.metrics_port = free_port()
        super().__init__(
            ["worker"], {"HOOKD_WORKER_METRICS_PORT": str(self.metrics_port), **env}, cwd
        )

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> HookdWorker:
        self.launch()
        return self

    def wait_started(self, timeout_s: float = 60.0) -> HookdWorker:
        """Return once the worker is past its start-up checks (its metrics port listens
        only after them): a fault a test injects next then meets a running worker, not
        one still starting (which would stop with one line, as designed). It blocks:
        from a coroutine, run it in a thread (``asyncio.to_thread``)."""
        if self.env.get("HOOKD_WORKER_METRICS_PORT", "0") == "0":
            return self
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.metrics_port), timeout=1).close()
                return self
            except OSError:
                pass
            if not self.alive():
                raise AssertionError(f"worker exited while starting: {self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not started after {timeout_s:g}s: {self.log()}")
            time.sleep(0.05)

    def __enter__(self) -> HookdWorker:
        return self.start()


class RedisServer:
    """A private, non-persistent redis-server on a free port, to flush and stop at will."""

    def __init__(self, cwd: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail("redis-server is not installed (CI=true: it must be)")
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.port = free_port()
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.cwd),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def command(self, *words: str) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall((" ".join(words) + "\r\n").encode())
            return sock.recv(1024)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
