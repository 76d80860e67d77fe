#!/usr/bin/env bash
# Build the stack's images without an image registry:
#
#   1. the base images from Debian's packages (deploy/base-images.sh);
#   2. interlock's wheel (python -m build) and the wheels of its dependencies with the
#      postgres and server extras (pip download, through this machine's pip configuration)
#      into deploy/dist/;
#   3. localhost/interlock:VERSION (deploy/Containerfile) and
#      localhost/interlock-postgres:15 (deploy/postgres/Containerfile).
#
# An image whose inputs have not changed since it was built (its label org.interlock.inputs)
# is kept; --force builds everything again. PYTHON (python3) must have `build` installed;
# CONTAINER_ENGINE (podman) may be docker.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
engine=${CONTAINER_ENGINE:-podman}
python=${PYTHON:-python3}
force=()
[ "${1:-}" = "--force" ] && force=(--force)

"$here/base-images.sh" "${force[@]}"

version=$(sed -n -E 's/^version = "([^"]+)"$/\1/p' "$root/pyproject.toml" | head -n 1)
inputs() {  # the label an image built from these files carries
  (cd "$root" && find "$@" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
current() {  # IMAGE KEY: is IMAGE built from these inputs?
  [ ${#force[@]} -eq 0 ] && [ "$("$engine" image inspect --format '{{ index .Config.Labels "org.interlock.inputs" }}' "$1" 2>/dev/null)" = "$2" ]
}

image=localhost/interlock:$version
key=$(inputs pyproject.toml README.md src deploy/Containerfile deploy/entrypoint.py)
if current "$image" "$key"; then
  echo "$image: up to date ($key)"
else
  rm -rf "$here/dist"
  # The sdist first, then the wheel from it (what `python -m build` does without options): the
  # wheel holds what a release would, nothing left in the source tree by an earlier build.
  "$python" -m build --outdir "$here/dist" "$root" >"$here/dist.log" 2>&1 \
    || { tail -n 20 "$here/dist.log" >&2; echo "build.sh: python -m build failed (log: $here/dist.log)" >&2; exit 1; }
  # Wheels for the image's Python (Debian bookworm: CPython 3.11, glibc 2.36), found through
  # the indexes this machine's pip is configured with. pip takes --platform tags literally:
  # every manylinux tag bookworm's glibc runs is listed.
  arch=$(uname -m)
  platforms=(--platform "manylinux1_$arch" --platform "manylinux2010_$arch" --platform "manylinux2014_$arch")
  for minor in $(seq 5 36); do platforms+=(--platform "manylinux_2_${minor}_$arch"); done
  "$python" -m pip download -q --disable-pip-version-check -d "$here/dist" \
    --only-binary=:all: --implementation cp --python-version 3.11 \
    "${platforms[@]}" \
    "$(ls "$here"/dist/interlock-"$version"-*.whl)[postgres,server]" >>"$here/dist.log" 2>&1 \
    || { tail -n 20 "$here/dist.log" >&2; echo "build.sh: pip download failed (log: $here/dist.log)" >&2; exit 1; }
  rm -f "$here/dist.log" "$here"/dist/interlock-"$version".tar.gz
  "$engine" build -q --label "org.interlock.inputs=$key" -t "$image" -f "$here/Containerfile" "$here" >/dev/null
  echo "$image: built ($key)"
fi

image=localhost/interlock-postgres:15
key=$(inputs deploy/postgres)
if current "$image" "$key"; then
  echo "$image: up to date ($key)"
else
  "$engine" build -q --label "org.interlock.inputs=$key" -t "$image" "$here/postgres" >/dev/null
  echo "$image: built ($key)"
fi
