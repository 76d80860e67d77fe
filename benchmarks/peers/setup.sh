#!/usr/bin/env bash
# Create one virtualenv per peer under benchmarks/.envs/<peer>/ and install
# pinned versions of that peer. Idempotent: an env whose pins are already
# installed is left as it is.
#
# usage: benchmarks/peers/setup.sh [peer...]      (default: all peers)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENVS="$(cd "$HERE/.." && pwd)/.envs"
PYTHON="${PYTHON:-python3}"

# peer -> pinned requirements (space separated). Prefect 3.9 needs a certifi
# release newer than the index has; Prefect 3.8.8 breaks with FastAPI >= 0.156
# (its API server passes min_items to Body), hence the FastAPI pin.
declare -A PINS=(
  [dbos]="dbos==3.4.0 psycopg[binary]==3.3.9"
  [prefect]="prefect==3.8.8 fastapi==0.154.0"
  [langgraph]="langgraph==1.2.22 langgraph-checkpoint-sqlite==3.1.2"
  [celery]="celery[redis]==5.7.0"
)
ALL=(dbos prefect langgraph celery)

peers=("$@")
if [ ${#peers[@]} -eq 0 ]; then peers=("${ALL[@]}"); fi

mkdir -p "$ENVS"
status=0
for peer in "${peers[@]}"; do
  pins="${PINS[$peer]:-}"
  if [ -z "$pins" ]; then
    echo "unknown peer: $peer (known: ${ALL[*]})" >&2
    status=1
    continue
  fi
  env="$ENVS/$peer"
  stamp="$env/.pins"
  if [ -x "$env/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins" ]; then
    echo "[$peer] up to date in $env"
  else
    echo "[$peer] installing into $env: $pins"
    [ -x "$env/bin/python" ] || "$PYTHON" -m venv "$env"
    # shellcheck disable=SC2086
    if "$env/bin/python" -m pip install --quiet --disable-pip-version-check $pins; then
      echo "$pins" > "$stamp"
    else
      echo "[$peer] install FAILED" >&2
      status=1
      continue
    fi
  fi
  for req in $pins; do
    name="${req%%==*}"; name="${name%%[*}"
    echo "[$peer]   $name $("$env/bin/python" -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')"
  done
done
exit $status
