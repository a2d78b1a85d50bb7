#!/usr/bin/env bash
# Cached mode's figures for BENCHMARKS.md, all in one run on this machine, against a
# redis-server of its own on a free port (never the machine's Redis on 6379):
#   1. `floodgate bench` on the same workload with the memory store, exact Redis and cached
#      Redis (decisions/s and latency percentiles of one decision),
#   2. the service's Envoy RLS decisions/s in the same three modes (h2load),
#   3. the overshoot of the three-node tests next to the stated bound.
# Needs redis-server and h2load.
#   cargo build --release -p floodgate-server --bin floodgate
#   bash bench/cached.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/floodgate
PORT=${PORT:-16510}
DURATION=${DURATION:-10s}
KEYS=${KEYS:-10000}
DIR=$(mktemp -d)
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; [ -n "${PID:-}" ] && kill $PID 2>/dev/null; rm -rf "$DIR"' EXIT

redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
  --dir "$DIR" --logfile "$DIR/redis.log"
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-server --version
URL="redis://127.0.0.1:$PORT"
LIMITER='{"algorithm":"token_bucket","rate":10,"capacity":100}'

for run in "memory exact" "$URL exact" "$URL cached"; do
  [ -n "${SKIP_BENCH:-}" ] && break
  set -- $run
  echo "floodgate bench --store ${1%%:*} --mode $2 (token bucket, $KEYS keys, 64 in flight, $DURATION):"
  $BIN bench --store "$1" --mode "$2" --limiter "$LIMITER" \
    --keys "$KEYS" --concurrency 64 --duration "$DURATION" | tail -1
done

METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
for run in "memory exact" "$URL exact" "$URL cached"; do
  set -- $run
  cfg="$DIR/service-$2.yaml"
  { echo "store: {mode: $2}"; cat bench/service.yaml; } >"$cfg"
  $BIN serve --config "$cfg" --http 127.0.0.1:19190 --grpc 127.0.0.1:19191 \
    --store "$1" 2>"$DIR/serve.log" &
  PID=$!
  for _ in $(seq 50); do curl -sf http://127.0.0.1:19190/livez >/dev/null && break; sleep 0.1; done
  r=$(h2load -c 4 -m 32 -D 5 --warm-up-time 1 -d bench/rls_body.bin \
    --header 'content-type: application/grpc' --header 'te: trailers' \
    "http://127.0.0.1:19191$METHOD" 2>&1 | awk '/finished in/ {print $4}')
  echo "serve --store ${1%%:*} --mode $2: RLS ShouldRateLimit (h2load -c 4 -m 32, 1 key): $r decisions/s"
  kill $PID; wait $PID 2>/dev/null || true; PID=
done

echo "three nodes at ten times the limit (the bound tests):"
cargo test -q -p floodgate-core --features redis --test cached -- --nocapture three_nodes 2>&1 | grep -E 'overshoot'
cargo test -q -p floodgate-server --test e2e cached_nodes -- --nocapture 2>&1 | grep -E 'admitted'
