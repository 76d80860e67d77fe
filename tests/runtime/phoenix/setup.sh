#!/usr/bin/env bash
# Create the virtualenv the trace test runs Arize Phoenix (an OpenTelemetry receiver and LLM
# trace viewer) from, pinned, in the user's cache directory
# (~/.cache/interlock/phoenix-<version>) so every clone on a machine shares one. Kept apart
# from the project's environment: Phoenix brings its own web stack. Idempotent.
#
# usage: tests/runtime/phoenix/setup.sh
set -euo pipefail

VERSION="20.26.1"  # tests/runtime/test_phoenix.py names the same directory
ENV="${INTERLOCK_PHOENIX_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/interlock/phoenix-$VERSION}"
PYTHON="${PYTHON:-python3}"
PINS="arize-phoenix==$VERSION"

stamp="$ENV/.pins"
if [ -x "$ENV/bin/phoenix" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PINS" ]; then
  echo "[phoenix] up to date in $ENV"
  exit 0
fi
echo "[phoenix] installing into $ENV: $PINS"
mkdir -p "$(dirname "$ENV")"
[ -x "$ENV/bin/python" ] || "$PYTHON" -m venv "$ENV"
"$ENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PINS"
echo "$PINS" > "$stamp"
