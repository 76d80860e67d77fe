#!/usr/bin/env bash
# Create the virtualenv the LiteLLM proxy tests run the proxy from: tests/.envs/litellm/, with
# a pinned litellm[proxy]. Kept apart from the project's own environment so the proxy's many
# dependencies never decide interlock's. Idempotent: an env whose pins are installed is left
# as it is (the stamp file holds the pins it was built with). 1.106.0: later releases need a
# certifi newer than the package index has.
#
# usage: tests/providers/litellm/setup.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENV="${INTERLOCK_LITELLM_ENV:-$(cd "$HERE/../.." && pwd)/.envs/litellm}"
PYTHON="${PYTHON:-python3}"
PINS="litellm[proxy]==1.106.0"

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
