#!/usr/bin/env bash
# Quickstart command 1: install hookd into .venv and serve the example sources on
# the embedded default (SQLite, no Redis). Secrets not already in the environment
# come from examples/demo.env (throwaway values, for trying hookd out only).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .

while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  name=${line%%=*}
  [ -n "${!name:-}" ] || export "$line"
done < examples/demo.env

export HOOKD_CONFIG=${HOOKD_CONFIG:-examples/hookd.toml}
# examples/hookd.toml runs examples/handlers.py: make the repository importable.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/hookd db upgrade
echo "hookd: try it from another shell: .venv/bin/hookd send-test github && .venv/bin/hookd events list" >&2
exec .venv/bin/hookd serve --host "${HOOKD_HOST:-127.0.0.1}" --port "${HOOKD_PORT:-8000}"
