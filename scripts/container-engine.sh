#!/usr/bin/env bash
# Make sure a Docker engine answers, for the container tests (tests/container):
# nothing to do when `docker info` works; otherwise install Debian's docker.io,
# docker-compose and debootstrap where they are missing (root with apt), start
# dockerd in the background and wait for it. Idempotent. When no engine can run,
# one line says why and the exit status is 1.
#
# Settings (environment): DOCKERD_LOG (default /var/log/hookd-dockerd.log),
# DOCKER_WAIT_S (default 60).
set -euo pipefail

log=${DOCKERD_LOG:-/var/log/hookd-dockerd.log}
wait_s=${DOCKER_WAIT_S:-60}

fail() { echo "container-engine: $*" >&2; exit 1; }
answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

answers && exit 0

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
    fail "no Docker engine and ${missing[*]} not installed; install them (Debian: apt-get install ${missing[*]})"
  fi
  echo "container-engine: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Never let a maintainer script start a daemon: this script starts dockerd itself.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
  fi
  trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 \
      && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
    || fail "apt-get could not install ${missing[*]}"
fi

[ "$(id -u)" -eq 0 ] || fail "the Docker engine is not running and only root can start it (dockerd)"

# A dockerd already started (by an earlier run) may still be coming up: wait for it
# rather than start a second one.
if ! pgrep -x dockerd >/dev/null 2>&1; then
  # containerd comes with docker.io; dockerd starts its own when none is running.
  nohup dockerd >>"$log" 2>&1 </dev/null &
fi
for _ in $(seq 1 "$wait_s"); do
  answers && exit 0
  sleep 1
done
last=$(grep -E 'level=(error|fatal)' "$log" 2>/dev/null | tail -n 1 || true)
fail "dockerd did not answer within ${wait_s}s (log: $log)${last:+: $last}"
