"""A private PostgreSQL server (initdb into a scratch directory, own port) that a scenario
may stop, crash and restart without touching the shared server other tests use."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.server import free_port


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    return Path(initdb).parent


class PgCluster:
    """``with PgCluster() as pg: pg.url`` — trust auth, user postgres, database postgres."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="hookd-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        # initdb refuses to run as root: run the server as the postgres user then.
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*self._as, str(self.bindir / tool), *args],
            check=check,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=60,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> PgCluster:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``mode="immediate"`` is a crash: no checkpoint, recovery from WAL at next start."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready = subprocess.run(
                [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                check=False,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"private PostgreSQL did not come up: {self.log.read_text()[-2000:]}")

    def close(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
