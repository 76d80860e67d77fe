#!/usr/bin/env bash
# Create the virtualenv the OpenAI Agents SDK test runs its agent from, with a pinned
# openai-agents and interlock's own dependencies (not the server extra), in the user's cache
# directory (~/.cache/interlock/openai-agents-<version>) so every clone on a machine shares
# one. Kept apart from the project's environment: openai-agents pins websockets below 17,
# which interlock's server needs. The test runs interlock from its own checkout's src/ in it
# (PYTHONPATH), so the copy installed here only brings the dependencies. Idempotent: an env
# whose pins and dependency list are installed is left as it is (the stamp file holds them).
#
# usage: tests/providers/openai_agents/setup.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
VERSION="0.24.0"  # tests/providers/test_openai_agents.py names the same directory
ENV="${INTERLOCK_OPENAI_AGENTS_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/interlock/openai-agents-$VERSION}"
PYTHON="${PYTHON:-python3}"
PINS="openai-agents==$VERSION"
# Interlock's own dependencies, as pyproject.toml lists them: a change installs them anew.
DEPS="$(sed -n '/^dependencies = \[/,/^\]/p' "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"

stamp="$ENV/.pins"
if [ -x "$ENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PINS $DEPS" ]; then
  echo "[openai-agents] up to date in $ENV"
  exit 0
fi
echo "[openai-agents] installing into $ENV: $PINS and interlock's dependencies"
mkdir -p "$(dirname "$ENV")"
[ -x "$ENV/bin/python" ] || "$PYTHON" -m venv "$ENV"
"$ENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PINS" "$ROOT"
echo "$PINS $DEPS" > "$stamp"
echo "[openai-agents] openai-agents $("$ENV/bin/python" -m pip show openai-agents 2>/dev/null | awk '/^Version:/{print $2}')"
