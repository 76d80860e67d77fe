#!/usr/bin/env bash
# Create the virtualenv the LiteLLM proxy tests run the proxy from, with a pinned
# litellm[proxy], in the user's cache directory (~/.cache/interlock/litellm-<version>) so every
# clone on a machine shares one: it takes minutes to install. Kept apart from the project's own environment so the proxy's many
# dependencies never decide interlock's. Idempotent: an env whose pins are installed is left
# as it is (the stamp file holds the pins it was built with). 1.106.0: later releases need a
# certifi newer than the package index has.
#
# usage: tests/providers/litellm/setup.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="1.106.0"  # test_litellm_proxy.py names the same directory
ENV="${INTERLOCK_LITELLM_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/interlock/litellm-$VERSION}"
PYTHON="${PYTHON:-python3}"
PINS="litellm[proxy]==$VERSION"

stamp="$ENV/.pins"
if [ -x "$ENV/bin/litellm" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PINS" ]; then
  echo "[litellm] up to date in $ENV"
  exit 0
fi
echo "[litellm] installing into $ENV: $PINS"
mkdir -p "$(dirname "$ENV")"
[ -x "$ENV/bin/python" ] || "$PYTHON" -m venv "$ENV"
# shellcheck disable=SC2086
"$ENV/bin/python" -m pip install --quiet --disable-pip-version-check $PINS
echo "$PINS" > "$stamp"
echo "[litellm] litellm $("$ENV/bin/python" -m pip show litellm 2>/dev/null | awk '/^Version:/{print $2}')"
