#!/usr/bin/env bash
# The Redis store's figures for BENCHMARKS.md, all in one run on this machine, against
# redis-servers of its own on free ports (never the machine's Redis on 6379): one Redis, and a
# Redis Cluster of three masters.
#   1. Stripe's classic two-key token bucket script under redis-benchmark -P 16 -c 32: the
#      baseline, with Redis's microseconds per call (one decision per call);
#   2. `floodgate bench --store redis` (token bucket, 100,000 random keys, 64 in flight), with
#      group commit (the default) and without (--batch-max-keys 1): decisions/s, Redis
#      microseconds per decision and the batch sizes, from its JSON line;
#   3. the service's Envoy RLS decisions/s on memory, on Redis with and without group commit,
#      and on the cluster (h2load -c 4 -m 32), then p50/p99 at half of each peak, p50/p99 of
#      one client sending one request at a time, and the batch sizes from /metrics;
#   4. `floodgate bench` on the cluster.
# Needs redis-server, redis-cli, redis-benchmark, h2load, python3 and the release binary:
#   cargo build --release -p floodgate-server --bin floodgate
#   bash bench/redis.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/floodgate
PORT=${PORT:-16500}
N=${N:-2000000}
DURATION=${DURATION:-10s}
DIR=$(mktemp -d)
PORTS=()
SERVE=
cleanup() {
  [ -n "$SERVE" ] && kill "$SERVE" 2>/dev/null
  for p in "${PORTS[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

start_redis() {
  local port=$1
  shift
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --dir "$DIR" --logfile "$DIR/redis-$port.log" "$@"
  PORTS+=("$port")
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis-server on $port did not start" >&2
  exit 1
}

start_redis "$PORT"
CLUSTER=()
for i in 1 2 3; do
  start_redis $((PORT + i)) --cluster-enabled yes --cluster-config-file "$DIR/nodes-$i.conf"
  CLUSTER+=("127.0.0.1:$((PORT + i))")
done
redis-cli --cluster create "${CLUSTER[@]}" --cluster-yes >/dev/null
for _ in $(seq 100); do
  redis-cli -p $((PORT + 1)) cluster info | grep -q 'cluster_state:ok' && break
  sleep 0.1
done
SINGLE_URL="redis://127.0.0.1:$PORT"
CLUSTER_URL="redis-cluster://$(IFS=,; echo "${CLUSTER[*]}")"
redis-server --version
nproc

reset() { for p in "${PORTS[@]}"; do redis-cli -p "$p" CONFIG RESETSTAT >/dev/null; done; }
usec_per_call() {
  redis-cli -p "$PORT" INFO commandstats | tr -d '\r' |
    awk -F'usec_per_call=' '/cmdstat_evalsha/ {split($2, a, ","); print a[1]}'
}
rps() { grep -o '[0-9.]* requests per second' | tail -1 | awk '{print $1}'; }

echo "== 1. Stripe's two-key token bucket script, redis-benchmark -P 16 -c 32, 100000 keys"
STRIPE=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat crates/floodgate/benches/redis/two_key_token_bucket.lua)")
reset
r=$(redis-benchmark -p "$PORT" -n "$N" -c 32 -P 16 -r 100000 -q \
  EVALSHA "$STRIPE" 2 tokens:__rand_int__ ts:__rand_int__ 10 100 1700000000 1 | tr '\r' '\n' | rps)
echo "stripe: $r decisions/s, $(usec_per_call) us of Redis per decision"

TOKEN_BUCKET='{"algorithm":"token_bucket","rate":10,"capacity":100}'
bench() {
  reset
  $BIN bench --store "$1" --limiter "$TOKEN_BUCKET" --keys 100000 --concurrency 64 \
    --duration "$DURATION" "${@:2}" | tail -1
}
echo "== 2. floodgate bench --store redis (token bucket, 100000 keys, 64 in flight, $DURATION)"
echo "group commit (default): $(bench "$SINGLE_URL")"
echo "one call per decision (--batch-max-keys 1): $(bench "$SINGLE_URL" --batch-max-keys 1)"

METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
h2() {
  h2load "$@" -d bench/rls_body.bin --header 'content-type: application/grpc' \
    --header 'te: trailers' "http://127.0.0.1:19181$METHOD"
}
quantiles() {
  python3 - "$1" <<'PY'
import sys
d = sorted(int(l.split()[2]) for l in open(sys.argv[1]) if l.strip())
q = lambda p: d[min(len(d) - 1, int(p * len(d)))] / 1000
print("p50 %.3f ms, p99 %.3f ms (%d requests)" % (q(0.5), q(0.99), len(d)))
PY
}
serve() {
  local name=$1 store=$2 config=$3
  $BIN serve --config "$config" --http 127.0.0.1:19180 --grpc 127.0.0.1:19181 \
    --store "$store" 2>"$DIR/serve.log" &
  SERVE=$!
  for _ in $(seq 50); do curl -sf http://127.0.0.1:19180/livez >/dev/null && break; sleep 0.1; done
  reset
  local r half log
  r=$(h2 -c 4 -m 32 -D 5 --warm-up-time 1 2>&1 | awk '/finished in/ {print $4}')
  echo "$name: peak $r decisions/s (h2load -c 4 -m 32, 1 key)"
  curl -s http://127.0.0.1:19180/metrics | grep '^floodgate_store_batch_decisions' |
    awk '{printf "%s%s", (NR > 1 ? ", " : "  batch sizes: "), $0} END {if (NR) print ""}' |
    sed 's/floodgate_store_batch_decisions_//g; s/{store="[a-z-]*",*/{/g' || true
  half=$(python3 -c "print(int(float('$r') / 2))")
  log="$DIR/h2load.log"
  # h2load appends to its log file: a new one for each run.
  rm -f "$log"
  h2 -c 4 -m 8 -D 5 --warm-up-time 1 --rps $((half / 4)) --log-file "$log" >/dev/null 2>&1
  echo "  at half the peak ($half/s offered): $(quantiles "$log")"
  rm -f "$log"
  h2 -c 1 -m 1 -D 5 --warm-up-time 1 --log-file "$log" >/dev/null 2>&1
  echo "  one client, one request at a time: $(quantiles "$log")"
  kill "$SERVE"
  wait "$SERVE" 2>/dev/null || true
  SERVE=
}
UNBATCHED="$DIR/unbatched.yaml"
{ cat bench/service.yaml; printf 'store:\n  batch_max_keys: 1\n'; } >"$UNBATCHED"
echo "== 3. the service, Envoy RLS ShouldRateLimit"
serve "memory" memory bench/service.yaml
serve "redis, group commit" "$SINGLE_URL" bench/service.yaml
serve "redis, one call per decision" "$SINGLE_URL" "$UNBATCHED"
serve "redis cluster (3 masters), group commit" "$CLUSTER_URL" bench/service.yaml

echo "== 4. floodgate bench on the cluster (3 masters)"
echo "group commit (default): $(bench "$CLUSTER_URL")"
echo "one call per decision (--batch-max-keys 1): $(bench "$CLUSTER_URL" --batch-max-keys 1)"
