"""A real ``hookd serve`` process on loopback, for tests where HTTP and crashes matter."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HookdServer:
    def __init__(self, env: dict[str, str], cwd: Path, *, workers: int = 1) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env, "HOOKD_LOG_LEVEL": env.get("HOOKD_LOG_LEVEL", "WARNING")}
        self.cwd = cwd
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = cwd / f"serve-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> HookdServer:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ingest.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(self.workers),
                ],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
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

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def kill9(self) -> None:
        """SIGKILL the whole process group: no shutdown hook, no flush, nothing."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> HookdServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
