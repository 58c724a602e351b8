"""``hookd serve`` without Redis runs its processing in separate processor processes
(``HOOKD_PROCESSORS``), supervised: restarted after a ``kill -9``, stopped with serve,
gone by themselves when serve is killed. Real ``hookd serve`` processes, real SQLite and
PostgreSQL, real signals.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.data import engine_of, scalar
from tests.support.deliveries import github_requests, send, wait_processed
from tests.support.handlers import config, prepare
from tests.support.server import ROOT, HookdServer, free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

TOKEN = "processors-admin-token"
LOCAL_MODULE = b"hookd.runtime.local"


def env_for(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        "HOOKD_CONFIG": str(config(tmp_path, "effect_pid")),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_LOG_LEVEL": "INFO",
        # The product's default, which tests/support/server.py sets to 0 for the others.
        "HOOKD_PROCESSORS": "auto",
        **extra,
    }


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that nobody has reaped yet does not)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def processors_of(serve_pid: int) -> dict[int, list[str]]:
    """The running processor processes whose parent is ``serve_pid``: pid → argv."""
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat[0] == "Z" or stat[1] != serve_pid:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if LOCAL_MODULE in argv:
            found[int(entry.name)] = [a.decode() for a in argv if a]
    return found


def environ_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)


def socket_path(argv: list[str]) -> Path:
    return Path(argv[argv.index("--socket") + 1])


async def handler_pids(url: str) -> set[int]:

    async with engine_of(url) as engine, engine.connect() as conn:
        rows = await conn.exec_driver_sql("SELECT DISTINCT handler FROM calls")
        return {int(name.split()[1]) for (name,) in rows}


async def processed_metric(server: HookdServer) -> float:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(
            server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert response.status_code == 200, response.text
    wanted = re.compile(
        r'^hookd_events_processed_total\{outcome="processed",source="github"\} (\S+)$', re.M
    )
    match = wanted.search(response.text)
    assert match is not None, response.text[-2000:]
    return float(match.group(1))


async def test_by_default_events_are_processed_once_in_a_processor_process_and_counted_by_serve(
    tmp_path: Path, db_url: str
) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("HOOKD_PROCESSORS=auto starts processors on 2+ cores only")
    url = db_url
    await prepare(url)
    with HookdServer(env_for(tmp_path, url), tmp_path) as server:
        assert server.proc is not None
        server.wait_for_line(lambda line: "processor started" in line)
        procs = processors_of(server.proc.pid)
        assert len(procs) == 1, (procs, server.log())
        statuses = await send(server.url, github_requests(200, 20), concurrency=16)
        assert sorted(statuses) == [200] * 20 + [202] * 200
        await wait_processed(url, 200)
        assert await handler_pids(url) == set(procs), "processing ran outside the processor"
        assert server.proc.pid not in await handler_pids(url)
        # Counted in the processor process, shown by serve's /metrics.
        assert await processed_metric(server) == 200
        assert "processing=processors" in server.log_path.read_text()
    assert await scalar(url, "SELECT count(*) FROM effects") == 200
    assert await scalar(url, "SELECT count(*) FROM calls") == 200, "a handler ran twice"


async def test_kill_9_of_a_processor_mid_burst_is_restarted_and_every_event_ends_once(
    tmp_path: Path, pg_url: str
) -> None:
    await prepare(pg_url)
    env = env_for(
        tmp_path,
        pg_url,
        HOOKD_PROCESSORS="1",
        HOOKD_LEASE_S="3",
        HOOKD_HANDLER_TIMEOUT_S="2",
        HOOKD_SWEEP_S="1",
        TEST_HANDLER_SLEEP_S="0.05",
    )
    with HookdServer(env, tmp_path) as server:
        assert server.proc is not None
        serve_pid = server.proc.pid
        server.wait_for_line(lambda line: "processor started" in line)
        (first,) = processors_of(serve_pid)
        burst = asyncio.create_task(send(server.url, github_requests(400, 0), concurrency=8))
        await wait_for(
            lambda: scalar(pg_url, "SELECT count(*) FROM calls"),
            timeout_s=30,
            message=server.log,
        )
        os.kill(first, signal.SIGKILL)
        statuses = await burst
        assert statuses.count(202) == 400, "acknowledgements must not depend on a processor"

        async def restarted() -> list[int]:
            return [pid for pid in processors_of(serve_pid) if pid != first]

        (second,) = await wait_for(restarted, timeout_s=30, message=server.log)
        await wait_processed(pg_url, 400, timeout_s=120)
        assert server.alive() and server.proc.pid == serve_pid, "serve itself restarted"
        log = server.log_path.read_text()
        warning = next(line for line in log.splitlines() if "processor process exited" in line)
        assert f"pid={first}" in warning and "exit_code=-9" in warning, warning
        assert second in await handler_pids(pg_url)
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == 400
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM effects") == 400
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'processed'") == 400


async def test_a_processor_stops_by_itself_when_serve_is_killed(
    tmp_path: Path, sqlite_url: str
) -> None:
    await prepare(sqlite_url)
    server = HookdServer(env_for(tmp_path, sqlite_url, HOOKD_PROCESSORS="2"), tmp_path)
    with server:
        assert server.proc is not None
        await wait_for(lambda: len(processors_of(server.proc.pid)) == 2, timeout_s=30)
        procs = processors_of(server.proc.pid)
        left = {socket_path(argv).parent for argv in procs.values()}
        left |= {Path(environ_of(pid)["PROMETHEUS_MULTIPROC_DIR"]) for pid in procs}
        # serve alone, not its process group: nothing tells the processors but their stdin.
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=10)
        started = time.monotonic()
        await wait_for(
            lambda: not any(running(pid) for pid in procs), timeout_s=10, message=server.log
        )
        assert time.monotonic() - started < 10
        # Each processor took its socket away; serve, killed, left its directories.
        assert not any(socket_path(argv).exists() for argv in procs.values())
        for path in left:
            shutil.rmtree(path)


async def test_sigterm_to_serve_stops_its_processors_and_removes_their_directory(
    tmp_path: Path, sqlite_url: str
) -> None:
    await prepare(sqlite_url)
    server = HookdServer(env_for(tmp_path, sqlite_url, HOOKD_PROCESSORS="2"), tmp_path)
    with server:
        assert server.proc is not None
        await wait_for(lambda: len(processors_of(server.proc.pid)) == 2, timeout_s=30)
        procs = processors_of(server.proc.pid)
        statuses = await send(server.url, github_requests(50, 0), concurrency=8)
        assert statuses.count(202) == 50
        await wait_processed(sqlite_url, 50)
        server.proc.send_signal(signal.SIGTERM)  # serve only: it stops the processors itself
        assert server.proc.wait(timeout=30) == 0, server.log()
    assert not any(running(pid) for pid in procs)
    (argv, *_) = procs.values()
    assert not socket_path(argv).parent.exists()
    assert "processor stopped" in server.log_path.read_text()


async def test_processors_0_keeps_processing_in_the_receivers_own_process(
    tmp_path: Path, sqlite_url: str
) -> None:
    await prepare(sqlite_url)
    with HookdServer(env_for(tmp_path, sqlite_url, HOOKD_PROCESSORS="0"), tmp_path) as server:
        assert server.proc is not None
        statuses = await send(server.url, github_requests(100, 0), concurrency=8)
        assert statuses.count(202) == 100
        await wait_processed(sqlite_url, 100)
        assert processors_of(server.proc.pid) == {}
        assert await handler_pids(sqlite_url) == {server.proc.pid}
        assert await processed_metric(server) == 100
        assert "processing=in-process" in server.log_path.read_text()


@pytest.mark.parametrize("value", ["lots", "-1", "1.5", "65"])
def test_a_bad_processors_value_is_one_line_and_exit_2(
    tmp_path: Path, sqlite_url: str, value: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hookd.cli", "serve", "--port", str(free_port())],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HOOKD_CONFIG": str(config(tmp_path, "effect_pid")),
            "HOOKD_DATABASE_URL": sqlite_url,
            "HOOKD_PROCESSORS": value,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hookd: environment: HOOKD_PROCESSORS: "), lines
    assert "auto" in lines[0] and "Traceback" not in result.stderr


def launch_with_sigint(
    port: int, cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """``hookd serve`` in a process group of its own with SIGINT as a terminal leaves it
    (a test runner's process may ignore it, and an ignored signal stays so across exec)."""
    launch = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, '-m', 'hookd.cli', 'serve', "
        f"'--port', '{port}'])"
    )
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-c", launch],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a terminal's job
        )


async def test_a_second_ctrl_c_lets_serve_stop_gracefully_without_a_traceback(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Ctrl-C twice at a terminal (SIGINT to the whole process group, the second while
    serve stops): uvicorn would force-quit, skipping the app's shutdown with a traceback,
    and the processors, hit too, would die and be restarted. Now: one line, a graceful
    stop, the processors stopped by serve, nothing restarted."""
    await prepare(sqlite_url)
    port = free_port()
    env = {**os.environ, **env_for(tmp_path, sqlite_url, HOOKD_PROCESSORS="1")}
    log_path = tmp_path / "serve.log"
    proc = launch_with_sigint(port, ROOT, env, log_path)
    try:
        url = f"http://127.0.0.1:{port}"

        async def ready() -> bool:
            try:
                async with httpx.AsyncClient() as client:
                    healthy = (await client.get(f"{url}/healthz", timeout=1)).status_code == 200
            except httpx.HTTPError:
                return False
            return healthy and len(processors_of(proc.pid)) == 1

        await wait_for(ready, timeout_s=30, message=log_path.read_text)
        processors = list(processors_of(proc.pid))
        statuses = await send(url, github_requests(20, 0), concurrency=4)
        assert statuses.count(202) == 20
        await wait_processed(sqlite_url, 20)
        os.killpg(proc.pid, signal.SIGINT)
        await asyncio.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        await asyncio.to_thread(proc.wait, timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = log_path.read_text()
    assert proc.returncode in (0, 130), log
    assert "Traceback" not in log, log
    assert "already stopping" in log, log
    assert "restarting" not in log, log
    assert "processor stopped" in log, log
    assert not any(running(pid) for pid in processors)
