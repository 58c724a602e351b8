"""Docker for the container tests (tests/container): the engine, the images (built
from Debian's packages where no registry can be reached, cached between runs), and
containers that are removed, with their logs kept, when a test is done.

The Docker CLI's legacy builder is used (``DOCKER_BUILDKIT=0``): it works with every
client and engine version Debian ships, with or without buildx. It ignores
``deploy/Dockerfile.dockerignore``, so the build context is staged: only the files
that allow-list lets through are copied to a temporary directory and sent.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import in_ci

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
STANDINS = ROOT / "tests" / "container" / "standins"
DOCKER = os.environ.get("DOCKER", "docker")
BUILD_ENV = {**os.environ, "DOCKER_BUILDKIT": "0"}
# Everything this module creates carries this label, so that a cleanup can find it.
LABEL = "org.hookd.test"
BUILD_CACHE_TAG = "hookd-build-cache:test"


def unavailable(reason: str) -> None:
    """Skip on a laptop without Docker; under CI=true fail, saying why."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: the container tests must run)", pytrace=False)
    pytest.skip(reason)


def require_engine() -> None:
    """A Docker engine that answers, started by scripts/container-engine.sh if need be."""
    if shutil.which(DOCKER) is None and shutil.which("dockerd") is None and not in_ci():
        pytest.skip("no docker command (install Debian's docker.io)")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "container-engine.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        unavailable(lines[-1] if lines else "scripts/container-engine.sh failed")


def docker(
    *args: str, timeout_s: float = 120, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [DOCKER, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"docker {' '.join(args[:3])} … exited {done.returncode}: {done.stderr[-3000:]}"
        )
    return done


def inspect(name: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(docker("inspect", name).stdout)
    return data[0]


@contextlib.contextmanager
def building() -> Iterator[None]:
    """One image build at a time on this machine: test processes run side by side
    (pytest-xdist) share Docker's images and debootstrap's directory."""
    path = Path(tempfile.gettempdir()) / "hookd-container-build.lock"
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def image_size(tag: str) -> int:
    return int(docker("image", "inspect", "-f", "{{ .Size }}", tag).stdout.strip())


def base_image() -> str:
    """deploy/base-image.sh: debootstrap + docker import, or at once when cached."""
    with building():
        done = subprocess.run(
            ["bash", str(DEPLOY / "base-image.sh")],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        unavailable(lines[-1] if lines else "deploy/base-image.sh failed")
    return done.stdout.strip().splitlines()[-1]


def allowed_paths() -> list[str]:
    """What deploy/Dockerfile.dockerignore lets into the build context."""
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    return [line[1:] for line in lines if line.startswith("!")]


def stage_context(dest: Path) -> str:
    """Copy the allow-listed files (no bytecode caches) to ``dest``, with the
    Dockerfile; return a hash of everything copied."""
    digest = hashlib.sha256()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
    for name in allowed_paths():
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    shutil.copy2(DEPLOY / "Dockerfile", dest / "Dockerfile")
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(dest)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def build_hookd_image(base: str, workdir: Path) -> str:
    """deploy/Dockerfile on ``base``, tagged by the hash of what went in: a second run
    on the same sources builds nothing. Older test tags are removed."""
    with building():
        return _build_hookd_image(base, workdir)


def _build_hookd_image(base: str, workdir: Path) -> str:
    context = workdir / "context"
    context.mkdir()
    base_id = docker("image", "inspect", "-f", "{{ .Id }}", base).stdout.strip()
    inputs = hashlib.sha256(f"{stage_context(context)} {base_id}".encode()).hexdigest()
    tag = f"hookd:test-{inputs[:12]}"
    if docker("image", "inspect", tag, check=False).returncode == 0:
        return tag
    common = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}"]
    common += ["--label", f"{LABEL}=hookd"]
    # The builder stage gets a tag of its own, so that its layers (the locked
    # dependencies) stay cached and are not left behind as dangling images.
    docker(*common, "--target", "builder", "-t", BUILD_CACHE_TAG, str(context),
           timeout_s=900, env=BUILD_ENV)  # fmt: skip
    docker(*common, "-t", tag, str(context), timeout_s=900, env=BUILD_ENV)
    listed = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "hookd").stdout
    for old in listed.split():
        if old.startswith("hookd:test-") and old != tag:
            docker("rmi", old, check=False)
    docker("image", "prune", "-f", "--filter", f"label={LABEL}", check=False)
    return tag


def build_standin(name: str, base: str) -> str:
    """A stand-in image from tests/container/standins/NAME (layer-cached by Docker)."""
    tag = f"hookd-standin-{name}:bookworm"
    with building():
        docker(
            "build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}",
            "--label", f"{LABEL}=standin", "-t", tag, str(STANDINS / name),
            timeout_s=900, env=BUILD_ENV,
        )  # fmt: skip
    return tag


class Container:
    """``docker run -d`` on the host's network; ``remove`` keeps its log first."""

    def __init__(
        self,
        image: str,
        args: Sequence[str],
        *,
        env: dict[str, str],
        volumes: Sequence[str] = (),
        options: Sequence[str] = (),
        logs_dir: Path,
    ) -> None:
        self.name = f"hookd-test-{args[0] if args else 'run'}-{uuid.uuid4().hex[:8]}"
        self.logs_dir = logs_dir
        run = ["run", "-d", "--name", self.name, "--network", "host", "--label", f"{LABEL}=run"]
        for key, value in env.items():
            run += ["-e", f"{key}={value}"]
        for volume in volumes:
            run += ["-v", volume]
        docker(*run, *options, image, *args)

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return (done.stdout + done.stderr)[-4000:]

    def health(self) -> str:
        state = inspect(self.name)["State"]
        return str((state.get("Health") or {}).get("Status", "none"))

    def exec(self, *args: str) -> str:
        return docker("exec", self.name, *args).stdout

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (status := self.health()) != "healthy":
            if time.monotonic() > deadline or status == "unhealthy":
                raise AssertionError(f"{self.name} is {status}: {self.logs()}")
            time.sleep(0.5)

    def remove(self) -> None:
        (self.logs_dir / f"{self.name}.log").write_text(self.logs())
        docker("rm", "-f", self.name, check=False)
