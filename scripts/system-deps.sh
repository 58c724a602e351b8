#!/usr/bin/env bash
# System tools the tests use, from Debian's packages: Chromium (admin UI browser test),
# promtool (alert rules check and rules unit tests), docker-compose (compose file
# validation; it parses without a Docker engine) and wrk (bench/). Installs only what
# is missing; needs root and apt. Tests that need a missing tool skip, except under CI=true.
set -euo pipefail

declare -A tool_pkg=([chromium]=chromium [promtool]=prometheus [docker-compose]=docker-compose [wrk]=wrk)
missing=()
for tool in "${!tool_pkg[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${tool_pkg[$tool]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: missing ${missing[*]}; install them with your package manager" >&2
  exit 1
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# The prometheus package ships a server too; never let its maintainer scripts start it.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
  || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
