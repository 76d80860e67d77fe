#!/usr/bin/env bash
# Build the two base images from Debian's packages with debootstrap, so that no image
# registry is needed: only a Debian mirror (the one this machine's apt uses, or
# $DEBIAN_MIRROR).
#
#   localhost/interlock-base:bookworm      python3 (3.11), python3-venv, ca-certificates
#   localhost/interlock-postgres-base:15   postgresql-15
#
# An image already built from the same inputs (this script, the suite, the packages) is
# kept: its label org.interlock.inputs says which. --force builds both again.
# Needs root (debootstrap), debootstrap and podman (or CONTAINER_ENGINE=docker).
set -euo pipefail

engine=${CONTAINER_ENGINE:-podman}
suite=${DEBIAN_SUITE:-bookworm}
force=no
[ "${1:-}" = "--force" ] && force=yes

for tool in debootstrap "$engine"; do
  if ! command -v "$tool" >/dev/null; then
    echo "base-images.sh: $tool is not installed (apt-get install debootstrap podman runc)" >&2
    exit 69
  fi
done

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # The mirror apt uses: the first debian URI of sources.list(.d), deb822 or one-line style.
  mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | sed -n -E 's#^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?(https?://[^[:space:]]*/debian)/?([[:space:]].*)?$#\3#p' \
    | head -n 1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

build() (  # build IMAGE PACKAGES, in a subshell of its own
  local image=$1 packages=$2 key rootfs
  key=$( (cat "$0"; echo "$suite $packages") | sha256sum | cut -c1-16)
  if [ $force = no ] && [ "$("$engine" image inspect --format '{{ index .Labels "org.interlock.inputs" }}' "$image" 2>/dev/null)" = "$key" ]; then
    echo "$image: up to date ($key)"
    exit 0
  fi
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  echo "$image: debootstrap $suite from $mirror ($packages)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; echo "base-images.sh: debootstrap failed (log: $rootfs.log)" >&2; exit 1; }
  rm -f "$rootfs.log"
  # What a container never reads: downloaded packages, package lists (apt-get update brings
  # them back), documentation, man pages, translations.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
  tar -C "$rootfs" -c . | "$engine" import -q \
    --change "LABEL org.interlock.inputs=$key" --change "ENV LANG=C.UTF-8" \
    --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
  echo "$image: built ($key)"
)

# Both at once: each spends most of its time waiting on the mirror.
build localhost/interlock-base:"$suite" python3,python3-venv,ca-certificates &
base=$!
build localhost/interlock-postgres-base:15 postgresql-15 &
postgres=$!
wait $base && wait $postgres
