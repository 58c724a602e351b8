#!/usr/bin/env bash
# A base image for deploy/Dockerfile made from Debian's packages, for a host that can
# install Debian packages but cannot pull from an image registry:
#
#   sudo bash deploy/base-image.sh                 # prints the tag: hookd-base:bookworm
#   docker build --build-arg BASE_IMAGE=hookd-base:bookworm -f deploy/Dockerfile -t hookd .
#
# debootstrap (Debian bookworm, minbase) with python3 (3.11), python3-venv and
# ca-certificates, then `docker import`. The host's CA bundle and its pip settings
# (index URLs, the CA file pip uses; local find-links paths are left out) are copied
# in, so that pip inside a build reaches the same index the host reaches.
#
# Cached by tag: the image carries the hash of its inputs (this script, the package
# list, the CA bundle, the pip settings) as a label, and a run whose inputs hash the
# same exits at once. FORCE=1 rebuilds.
#
# Settings (environment): BASE_TAG (default hookd-base:bookworm), SUITE (bookworm),
# DEBIAN_MIRROR (default: the host's own apt source for Debian, else debootstrap's
# default), DOCKER (default docker). Needs root (debootstrap), debootstrap and a
# running container engine (scripts/container-engine.sh starts one).
set -euo pipefail

BASE_TAG=${BASE_TAG:-hookd-base:bookworm}
SUITE=${SUITE:-bookworm}
DOCKER=${DOCKER:-docker}
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
LABEL=org.hookd.base-inputs

fail() { echo "base-image: $*" >&2; exit 1; }

command -v "$DOCKER" >/dev/null 2>&1 || fail "no '$DOCKER' command; install docker.io (scripts/container-engine.sh does)"
"$DOCKER" info >/dev/null 2>&1 || fail "the container engine does not answer; start it with scripts/container-engine.sh"

# pip's settings on this host, as `pip config list` shows them (global, user, site and
# PIP_* variables), keeping what means the same inside the image: index URLs over
# http(s) and trusted hosts. The CA file becomes the image's bundle.
pip_conf() {
  local py
  py=$(command -v python3 || true)
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n'
  [ -n "$py" ] || return 0
  # Listed environment first (it wins in pip too): the first value of a key is kept.
  "$py" -m pip config list 2>/dev/null | while IFS= read -r line; do
    key=${line%%=*}
    key=${key##*.}
    value=${line#*=}
    value=${value#\'}
    value=${value%\'}
    case "$key" in
      index-url | extra-index-url)
        # shellcheck disable=SC2086  # a list of URLs separated by blanks
        value=$(printf '%s\n' $value | grep -E '^https?://' | tr '\n' ' ' || true)
        ;;
      trusted-host) ;;
      *) continue ;;
    esac
    if [ -n "${value// /}" ]; then printf '%s = %s\n' "$key" "${value% }"; fi
  done | awk -F' = ' '!seen[$1]++'
}

# The Debian mirror the host's apt already uses (deb822 or one-line sources).
host_mirror() {
  local uri
  uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '{print $2}' | grep -E '/debian/?$' | head -n 1 || true)
  if [ -z "$uri" ]; then
    uri=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
      | grep -E '/debian/?$' | head -n 1 || true)
  fi
  printf '%s' "$uri"
}

[ -r "$CA_BUNDLE" ] || fail "no CA bundle at $CA_BUNDLE; set CA_BUNDLE"
PIP_CONF=$(pip_conf)
inputs=$( { cat "$0"; echo "$SUITE $PACKAGES"; cat "$CA_BUNDLE"; echo "$PIP_CONF"; } \
  | sha256sum | cut -c1-16)

have=$("$DOCKER" image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$BASE_TAG" 2>/dev/null || true)
if [ "$have" = "$inputs" ] && [ "${FORCE:-0}" != 1 ]; then
  echo "$BASE_TAG"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || fail "debootstrap needs root; run it as root (or with sudo)"
command -v debootstrap >/dev/null 2>&1 || fail "debootstrap is not installed; apt-get install debootstrap"

work=$(mktemp -d "${TMPDIR:-/tmp}/hookd-base.XXXXXX")
cleanup() {
  # A rootfs may still have /proc etc. mounted if debootstrap stopped halfway.
  for m in proc sys dev/pts dev; do umount -lf "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mirror=${DEBIAN_MIRROR:-$(host_mirror)}
echo "base-image: debootstrap $SUITE (${mirror:-default mirror}); this takes a few minutes" >&2
# shellcheck disable=SC2086  # an empty mirror means debootstrap's default
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/rootfs" $mirror \
  >"$work/debootstrap.log" 2>&1 \
  || { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap of $SUITE failed (log above)"; }

root=$work/rootfs
# The host's local CAs, so that update-ca-certificates inside (a later apt install)
# keeps them; then the host's bundle itself, as pip and Python read it.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
fi
cp "$CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' "$PIP_CONF" >"$root/etc/pip.conf"
# Smaller: no apt lists, caches, docs or man pages.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/var/log/*.log
: >"$root/etc/hostname"

tar -C "$root" --numeric-owner -c . | "$DOCKER" import \
  --change "LABEL $LABEL=$inputs" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$BASE_TAG" >/dev/null
echo "base-image: built $BASE_TAG ($("$DOCKER" image inspect -f '{{ .Size }}' "$BASE_TAG") bytes)" >&2
echo "$BASE_TAG"
