#!/usr/bin/env bash
# Run the README's pipelines against a real model server: the research pipeline, the taste
# pipeline's bounded review loop, a batch of the articles and an experiment with its variant,
# over OpenAI's chat completions and, once, over Anthropic's Messages (llama-server speaks
# both). Every command must succeed and every run be delivered. Not part of CI: it needs a
# built llama.cpp and a GGUF model (a 135M instruct model is enough), see docs/local-servers.md.
#
# usage: tests/providers/llamacpp/readme_check.sh MODEL.gguf
#          starts `llama-server` (or $LLAMA_SERVER) on a free port with the model, stops it after
#        INTERLOCK_LLAMA_URL=http://127.0.0.1:8080 tests/providers/llamacpp/readme_check.sh
#          uses a server that is already running (its key, if any, in INTERLOCK_LLAMA_KEY)
# INTERLOCK_LLAMA_MODEL names the model in requests (default: local-model; llama-server takes
# any name). The work is done in a temporary folder, kept when a step fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
MODEL_NAME="${INTERLOCK_LLAMA_MODEL:-local-model}"
if [ -z "${INTERLOCK_LLAMA_URL:-}" ] && [ $# -ne 1 ]; then
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/interlock-readme-check.XXXXXX")"
SERVER_PID=""

stop() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap stop EXIT

if [ -n "${INTERLOCK_LLAMA_URL:-}" ]; then
  URL="${INTERLOCK_LLAMA_URL%/}"
else
  PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  URL="http://127.0.0.1:$PORT"
  # Two slots: a phase's two parallel workers are answered together, not one after the other.
  "${LLAMA_SERVER:-llama-server}" -m "$1" --host 127.0.0.1 --port "$PORT" -np 2 -c 8192 \
    >"$WORK/llama-server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    if curl -fsS "$URL/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "[readme-check] llama-server ended at start: see $WORK/llama-server.log" >&2; exit 1
    fi
    sleep 1
  done
  curl -fsS "$URL/health" >/dev/null || { echo "[readme-check] llama-server not up after 120 s" >&2; exit 1; }
fi

cp -r "$ROOT/examples" "$WORK/examples"
cd "$WORK"
key_line=""
if [ -n "${INTERLOCK_LLAMA_KEY:-}" ]; then key_line='api_key_env = "INTERLOCK_LLAMA_KEY"'; fi
# Every alias the README's examples name, on the local server; prices of 0: the calls are free.
{
  printf '[providers.local]\nkind = "openai"\nbase_url = "%s/v1"\n%s\n\n' "$URL" "$key_line"
  printf '[providers.local-messages]\nkind = "anthropic"\nbase_url = "%s"\n%s\n\n' "$URL" "$key_line"
  for alias in sonnet opus; do
    printf '[models.%s]\nprovider = "local"\nmodel = "%s"\nmax_output_tokens = 1500\n' "$alias" "$MODEL_NAME"
    printf 'input_price_per_mtok = 0\noutput_price_per_mtok = 0\n\n'
  done
} > examples/interlock.toml
sed 's/provider = "local"/provider = "local-messages"/' examples/interlock.toml > messages.toml

export INTERLOCK_HOME="$WORK/home"
step() {
  echo "[readme-check] interlock $*"
  interlock "$@" || { echo "[readme-check] failed: interlock $* (work kept in $WORK)" >&2; exit 1; }
}
step check examples/research.json
step check examples/taste.yaml
step run examples/research.json research --topic "FSA architecture"
step run examples/taste.yaml translate --topic "How bees navigate"
step batch examples/translate.yaml translate --inputs examples/articles.csv \
  --concurrency 2 --max-cost-usd 5 --batch-id articles
step batch status articles
step batch export articles -o results.csv
step experiment examples/translate.yaml translate --inputs examples/articles.csv \
  --variant plain=examples/translate-plain.yaml --batch-id cmp
step compare cmp
step --config messages.toml run examples/research.json research --topic "Tide tables"
delivered="$(interlock runs --json | python3 -c 'import json, sys; runs = json.load(sys.stdin); print(sum(r["status"] == "delivered" for r in runs), len(runs))')"
read -r good all <<<"$delivered"
if [ "$good" != "$all" ]; then
  echo "[readme-check] $good of $all runs delivered (work kept in $WORK)" >&2; exit 1
fi
echo "[readme-check] ok: $all runs delivered against $URL"
rm -rf "$WORK"
