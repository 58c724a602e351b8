#!/usr/bin/env bash
# Quickstart command 2: install hookd with its test dependencies into .venv, then
# lint, type-check, check the import layers and run the whole test suite. Tests that need PostgreSQL
# (127.0.0.1:5432, or HOOKD_TEST_PG_DSN) skip without it, except under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.lock
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .

.venv/bin/ruff check .
.venv/bin/mypy
# The layers (hookd.cli → runtime → web → metrics → ops → ingest | processing | reconcile → …
# → store → errors) are kept by import-linter; its contracts are in pyproject.toml.
.venv/bin/lint-imports --no-cache
# Test files run in parallel (pytest-xdist), a file at a time per process: most tests wait
# on servers, subprocesses and the databases rather than on the CPU.
# HOOKD_TEST_PROCESSES=0 runs them in this one process.
# What tests keep (the browser tests' screenshots) goes to test-artifacts/ in the
# checkout unless HOOKD_TEST_ARTIFACTS says where; the run lists the files at its end.
export HOOKD_TEST_ARTIFACTS=${HOOKD_TEST_ARTIFACTS:-$PWD/test-artifacts}
mkdir -p "$HOOKD_TEST_ARTIFACTS"
echo "test artifacts: $HOOKD_TEST_ARTIFACTS" >&2
exec .venv/bin/pytest -n "${HOOKD_TEST_PROCESSES:-3}" --dist loadfile "$@"
