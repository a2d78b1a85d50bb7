#!/usr/bin/env bash
# The Redis store's figures for BENCHMARKS.md, all in one run on this machine, against a
# redis-server of its own on a free port (never the machine's Redis on 6379):
#   1. redis-benchmark -P 16 running the classic two-key token bucket script (baseline),
#   2. redis-benchmark -P 16 running Floodgate's own token bucket script,
#   3. `floodgate bench` (the store as the service drives it) on the same workload,
#   4. the service's Envoy RLS decisions/s with --store redis next to --store memory (h2load).
# Every row: 100,000 random keys, 64 in flight. Needs redis-server, redis-benchmark, h2load.
#   cargo build --release -p floodgate-server --bin floodgate --example rls_load
#   cargo build --release -p floodgate --features redis --example redis_script
#   bash bench/redis.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/floodgate
PORT=${PORT:-16500}
N=${N:-1000000}
DURATION=${DURATION:-10s}
DIR=$(mktemp -d)
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; [ -n "${PID:-}" ] && kill $PID 2>/dev/null; rm -rf "$DIR"' EXIT

redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
  --dir "$DIR" --logfile "$DIR/redis.log"
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-server --version

usec() { redis-cli -p "$PORT" INFO commandstats | tr -d '\r' | awk -F'usec_per_call=' '/cmdstat_evalsha/ {split($2, a, ","); print a[1]}'; }
rps() { grep -o '[0-9.]* requests per second' | tail -1 | awk '{print $1}'; }

TWO=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat crates/floodgate/benches/redis/two_key_token_bucket.lua)")
OURS=$(redis-cli -p "$PORT" SCRIPT LOAD "$(target/release/examples/redis_script token_bucket)")

redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
r=$(redis-benchmark -p "$PORT" -n "$N" -c 64 -P 16 -r 100000 -q \
  EVALSHA "$TWO" 2 tokens:__rand_int__ ts:__rand_int__ 10 100 1700000000 1 | tr '\r' '\n' | rps)
echo "two-key token bucket, redis-benchmark -P 16: $r decisions/s, $(usec) us of Redis per call"

redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
r=$(redis-benchmark -p "$PORT" -n "$N" -c 64 -P 16 -r 100000 -q \
  EVALSHA "$OURS" 1 "rate:{__rand_int__}" "" 0 10 100 1 T | tr '\r' '\n' | rps)
echo "floodgate's token bucket script, redis-benchmark -P 16: $r decisions/s, $(usec) us of Redis per call"

redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
echo "floodgate bench --store redis (token bucket, 100000 keys, 64 in flight, $DURATION):"
$BIN bench --store "redis://127.0.0.1:$PORT" --limiter '{"algorithm":"token_bucket","rate":10,"capacity":100}' \
  --keys 100000 --concurrency 64 --duration "$DURATION" | tail -1
echo "  $(usec) us of Redis per call"
echo "floodgate bench --store memory (same workload):"
$BIN bench --store memory --limiter '{"algorithm":"token_bucket","rate":10,"capacity":100}' \
  --keys 100000 --concurrency 64 --duration "$DURATION" | tail -1

METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
for store in memory "redis://127.0.0.1:$PORT"; do
  $BIN serve --config bench/service.yaml --http 127.0.0.1:19180 --grpc 127.0.0.1:19181 \
    --store "$store" 2>"$DIR/serve.log" &
  PID=$!
  for _ in $(seq 50); do curl -sf http://127.0.0.1:19180/livez >/dev/null && break; sleep 0.1; done
  r=$(h2load -c 4 -m 32 -D 5 --warm-up-time 1 -d bench/rls_body.bin \
    --header 'content-type: application/grpc' --header 'te: trailers' \
    "http://127.0.0.1:19181$METHOD" 2>&1 | awk '/finished in/ {print $4}')
  echo "serve --store ${store%%:*}: RLS ShouldRateLimit (h2load -c 4 -m 32, 1 key): $r decisions/s"
  half=$(python3 -c "print(int(float('$r') / 2))")
  log=$(mktemp)
  h2load -c 4 -m 8 -D 5 --warm-up-time 1 --rps $((half / 4)) -d bench/rls_body.bin \
    --header 'content-type: application/grpc' --header 'te: trailers' --log-file "$log" \
    "http://127.0.0.1:19181$METHOD" >/dev/null 2>&1
  python3 - "$log" "$half" <<'PY'
import sys
d = sorted(int(l.split()[2]) for l in open(sys.argv[1]) if l.strip())
q = lambda p: d[min(len(d) - 1, int(p * len(d)))] / 1000
print("  at half the peak (%s/s offered): p50 %.3f ms, p99 %.3f ms" % (sys.argv[2], q(0.5), q(0.99)))
PY
  rm -f "$log"
  kill $PID; wait $PID 2>/dev/null || true; PID=
done
