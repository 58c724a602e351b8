"""Quickstart command 1, from a fresh copy of the repository, as a new user runs it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.server import free_port
from tests.support.waiting import wait_for_sync

ROOT = Path(__file__).resolve().parents[2]


def fresh_copy(dest: Path) -> Path:
    """The files a clone would have: tracked ones plus new ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    for name in listed:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.timeout(600)
def test_quickstart_serves_and_send_test_reaches_every_source(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the repository's files")
    repo = fresh_copy(tmp_path / "hookd")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKD_", "VIRTUAL_ENV"))}
    env["HOOKD_PORT"] = str(port)
    log = (tmp_path / "quickstart.log").open("wb")
    proc = subprocess.Popen(
        ["bash", "scripts/quickstart.sh"],
        cwd=repo,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "quickstart.log").read_text()[-3000:]
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for_sync(
            healthy,
            timeout_s=500,
            interval_s=0.5,
            message=lambda: (tmp_path / "quickstart.log").read_text()[-3000:],
        )
        cli_env = {**env, "HOOKD_CONFIG": "examples/hookd.toml"}
        for line in (repo / "examples/demo.env").read_text().splitlines():
            if line and not line.startswith("#"):
                name, value = line.split("=", 1)
                cli_env[name] = value

        def hookd(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(repo / ".venv/bin/hookd"), *args],
                cwd=repo,
                env=cli_env,
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )

        for source in ("github", "stripe", "slack", "standard"):
            sent = hookd("send-test", source, "--url", f"http://127.0.0.1:{port}/hooks/{source}")
            assert sent.returncode == 0, sent.stdout + sent.stderr
            assert sent.stdout.startswith("202 "), sent.stdout
        listed = hookd("events", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        events = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted(e["source"] for e in events) == ["github", "slack", "standard", "stripe"]
        # No handlers are configured, so the in-process consumer finishes them at once.
        for event in events:
            waited = hookd("wait", event["id"], "--timeout", "30")
            assert waited.returncode == 0, waited.stdout + waited.stderr
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
