#!/bin/sh
set -eu
if [ "$1" = redis-server ]; then
  case "${2:-}" in
    *.conf) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
  exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi
exec "$@"
