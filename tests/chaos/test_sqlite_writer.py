"""SQLite's insert in a writer process of its own: what a dead writer, a dead receiver,
a SQLite error and a close each leave behind.

The other SQLite tests of the receiver run through this writer too (``HOOKD_SQLITE_WRITER``
is ``auto``: process on 2+ cores); ``test_fastpath`` runs both the thread and the process
against the ORM path's answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chaos import harness
from chaos.harness import HookdServer
from hookd.runtime import sqlite_writer
from store.crypto import BodyCipher
from tests.support.data import new_event, scalar

pytestmark = pytest.mark.anyio
PLAIN = BodyCipher("")
KILLS = 8


def writer_pid(inserter: sqlite_writer.SqliteProcessInserter) -> int:
    assert inserter._writer is not None
    return inserter._writer.proc.pid


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stored_ids(url: str) -> set[str]:
    with contextlib.closing(sqlite3.connect(url.split("///", 1)[1])) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM events")}


def at_work(pid: int) -> bool:
    """Whether a writer is running or in an fsync (``R``/``D`` in ``/proc/PID/stat``),
    rather than waiting on its pipe for the next batch."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("R", "D")


def writers_under(root: int) -> list[int]:
    """The SQLite writer processes among ``root``'s descendants."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                commands[int(entry)] = cmd.read().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError):
            continue

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == root:
                return True
        return False

    return [
        pid for pid, cmd in commands.items() if "store.intake.sqlite_write" in cmd and descends(pid)
    ]


async def test_a_killed_writer_fails_only_what_it_had_not_answered(sqlite_url: str) -> None:
    inserter = sqlite_writer.SqliteProcessInserter(sqlite_url.split("///", 1)[1], PLAIN)
    try:
        [first] = await inserter.insert([new_event("before")])
        assert first.created
        pid = writer_pid(inserter)
        # Big batches, so the kill lands while some are still unanswered.
        batches = [[new_event(f"b{b}-{i}") for i in range(3000)] for b in range(6)]
        calls = [asyncio.ensure_future(inserter.insert(batch)) for batch in batches]
        await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        results = await asyncio.gather(*calls, return_exceptions=True)
        gone = [r for r in results if isinstance(r, sqlite_writer.WriterGone)]
        answered = [r for r in results if isinstance(r, list)]
        assert gone, "the kill found every batch answered"
        assert len(gone) + len(answered) == len(batches)
        # An answered batch is committed; the writer's kill cannot take it back.
        committed = await scalar(sqlite_url, "SELECT count(*) FROM events")
        assert committed >= 1 + 3000 * len(answered)
        # The next insert starts another writer, and the provider's retry of each failed
        # batch stores what the dead writer had not committed, and nothing twice.
        for batch, result in zip(batches, results, strict=True):
            if isinstance(result, sqlite_writer.WriterGone):
                again = await inserter.insert(batch)
                assert len(again) == len(batch)
        assert writer_pid(inserter) != pid
        assert not alive(pid)
        assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 1 + 3000 * len(batches)
        assert await scalar(sqlite_url, "SELECT count(*) FROM event_keys") == 1 + 3000 * len(
            batches
        )
    finally:
        await inserter.close()


async def test_a_sqlite_error_fails_the_batch_and_the_writer_stays(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    inserter = sqlite_writer.SqliteProcessInserter(str(path), PLAIN)
    try:
        # No schema: the error the thread would raise, raised here with the same class.
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await inserter.insert([new_event("a")])
        pid = writer_pid(inserter)
        with pytest.raises(sqlite3.OperationalError):
            await inserter.probe()
        assert writer_pid(inserter) == pid
        assert alive(pid)
    finally:
        await inserter.close()


async def test_close_answers_what_is_queued_then_ends_the_writer(sqlite_url: str) -> None:
    inserter = sqlite_writer.SqliteProcessInserter(sqlite_url.split("///", 1)[1], PLAIN)
    await inserter.start()
    pid = writer_pid(inserter)
    calls = [asyncio.ensure_future(inserter.insert([new_event(f"k{i}")])) for i in range(50)]
    await asyncio.sleep(0)  # every request written to the pipe before the close
    await inserter.close()
    assert all(r[0].created for r in await asyncio.gather(*calls))
    assert not alive(pid)
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 50


def test_the_writer_ends_with_its_receiver_killed_9(sqlite_url: str, tmp_path: Path) -> None:
    """No orphan: the pipe closes with the receiver, and the writer ends on its own."""
    script = tmp_path / "receiver.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, time
            from hookd.runtime import sqlite_writer
            from store.crypto import BodyCipher
            from tests.support.data import new_event

            async def main():
                inserter = sqlite_writer.SqliteProcessInserter({sqlite_url.split("///", 1)[1]!r},
                                                               BodyCipher(""))
                await inserter.insert([new_event("a")])
                print(inserter._writer.proc.pid, flush=True)
                await asyncio.sleep(60)

            asyncio.run(main())
            """
        )
    )
    root = str(Path(__file__).parents[2])
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": root},
        cwd=root,
    )
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert alive(pid)
        proc.kill()  # the receiver alone: its writer gets no signal
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "the writer outlived its receiver"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_kill_9_of_the_writer_mid_burst_loses_no_acknowledged_event(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A real `hookd serve` on SQLite: its writer killed mid-burst, the receiver stays up,
    answers 503 for the batches the writer took with it, and starts another writer; every
    acknowledged event is stored, and the retries store the rest once."""
    env = {
        "HOOKD_CONFIG": str(harness.config(tmp_path, handler=None)),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_PROCESSORS": "0",
        "HOOKD_SQLITE_WRITER": "process",
    }
    count = 3000
    items = [harness.deliveries(p, count // 4) for p in harness.PROVIDERS]
    burst = [d for group in zip(*items, strict=True) for d in group]
    with HookdServer(env, tmp_path) as server:
        assert server.proc is not None
        [pid] = writers_under(server.proc.pid)
        sending = asyncio.create_task(harness.send(server.url, burst, concurrency=32))
        await harness.wait_until(sqlite_url, "SELECT count(*) FROM events", 200, poll_s=0.01)
        # A kill between two batches fails nothing: kill each new writer in turn, each
        # when it is seen at work (a quiet machine leaves it idle most of the time), so
        # that kills land mid-commit.
        killed: list[int] = []
        while not sending.done() and len(killed) < KILLS:
            current = writers_under(server.proc.pid)
            if current and current[0] not in killed:
                until = time.monotonic() + 1.0
                while time.monotonic() < until:
                    if at_work(current[0]):
                        break
                    await asyncio.sleep(0.002)
                os.kill(current[0], signal.SIGKILL)
                killed.append(current[0])
            await asyncio.sleep(0.1)
        results = await sending
        assert pid in killed
        assert server.alive()
        acked = {r.event_id for r in results if r.status in (200, 202)}
        refused = [r for r in results if r.status not in (200, 202)]
        assert {r.status for r in refused} <= {503}, {r.status for r in refused}
        assert acked, "nothing was acknowledged"
        assert refused, "the kill found no batch unanswered"
        assert acked <= stored_ids(sqlite_url)
        [again] = writers_under(server.proc.pid)
        assert again not in killed
        # The provider retries what was refused: each is acknowledged, and stored once.
        retried = await harness.send(server.url, [r.delivery for r in refused])
        assert all(r.status in (200, 202) for r in retried)
        assert await scalar(sqlite_url, "SELECT count(*) FROM events") == count
        assert "sqlite writer process exited" in server.log()


async def test_kill_9_of_the_box_writer_while_processors_write_through_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    """`hookd serve` on SQLite with its processor processes: one writer for the box takes
    the receiver's inserts and the processors' outcomes. Killed mid-burst, again and
    again: serve starts another each time, every acknowledged event is stored, and
    every event ends processed once (its effect once, one processed attempt)."""
    await harness.prepare_handlers(sqlite_url)
    env = {
        "HOOKD_CONFIG": str(harness.config(tmp_path, handler="effect_idempotent")),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_PROCESSORS": "1",
        "HOOKD_SQLITE_WRITER": "process",
        "HOOKD_LEASE_S": "5",
        "HOOKD_HANDLER_TIMEOUT_S": "2",
    }
    count = 2000
    items = [harness.deliveries(p, count // 4) for p in harness.PROVIDERS]
    burst = [d for group in zip(*items, strict=True) for d in group]
    with HookdServer(env, tmp_path) as server:
        assert server.proc is not None
        # One writer in the whole box: the receiver and the processor have none of their own.
        [first] = writers_under(server.proc.pid)
        sending = asyncio.create_task(harness.send(server.url, burst, concurrency=32))
        await harness.wait_until(
            sqlite_url, "SELECT count(*) FROM events WHERE status = 'processed'", 100, poll_s=0.01
        )
        killed: list[int] = []
        while not sending.done() and len(killed) < KILLS // 2:
            current = writers_under(server.proc.pid)
            if current and current[0] not in killed:
                until = time.monotonic() + 1.0
                while time.monotonic() < until:
                    if at_work(current[0]):
                        break
                    await asyncio.sleep(0.002)
                os.kill(current[0], signal.SIGKILL)
                killed.append(current[0])
            await asyncio.sleep(0.15)
        results = await sending
        assert first in killed
        acked = {r.event_id for r in results if r.status in (200, 202)}
        refused = [r for r in results if r.status not in (200, 202)]
        assert {r.status for r in refused} <= {503}, {r.status for r in refused}
        assert acked <= stored_ids(sqlite_url)
        retried = await harness.send(server.url, [r.delivery for r in refused])
        assert all(r.status in (200, 202) for r in retried)
        await harness.wait_until(
            sqlite_url,
            "SELECT count(*) FROM events WHERE status = 'processed'",
            count,
            timeout_s=60,
        )
        [again] = writers_under(server.proc.pid)
        assert again not in killed
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == count
    assert await scalar(sqlite_url, "SELECT count(*) FROM effects") == count
    # One processed attempt per event: an outcome window written again after a kill
    # (its answer lost) is recognised by the new writer, not recorded twice.
    assert (
        await scalar(
            sqlite_url,
            "SELECT count(*) FROM event_history WHERE kind = 'attempt' AND outcome = 'processed'",
        )
        == count
    )
