#!/usr/bin/env bash
# The stores side by side, in one run on this machine, under the same h2load command: the
# service's Envoy RLS ShouldRateLimit decisions/s (h2load -c 4 -m 32 -D 5, one key, never over
# its limit) on the memory store, the durable file store, one Redis and one memcached, each
# started by this script on free ports (never the machine's Redis on 6379), then p50/p99 of one
# client sending one request at a time. A fixed window only (bench/stores.yaml), the one
# algorithm every store runs.
# With LIMITADOR=/path/to/limitador-server (Kuadrant's, built apart), the same command also
# measures its memory and disk (RocksDB) storages on bench/limitador-limits.yaml, the same limit.
# Needs redis-server, redis-cli, memcached, h2load, python3 and the release binary:
#   cargo build --release -p floodgate-server --bin floodgate
#   bash bench/stores.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/floodgate
REDIS_PORT=${REDIS_PORT:-16600}
MEMCACHED_PORT=${MEMCACHED_PORT:-16611}
DIR=$(mktemp -d)
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
SERVE=
MEMCACHED=
cleanup() {
  [ -n "$SERVE" ] && kill "$SERVE" 2>/dev/null
  [ -n "$MEMCACHED" ] && kill "$MEMCACHED" 2>/dev/null
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
  --dir "$DIR" --logfile "$DIR/redis.log"
# memcached refuses to run as root unless told which user to run as.
as_user=()
[ "$(id -u)" = 0 ] && as_user=(-u nobody)
memcached -l 127.0.0.1 -p "$MEMCACHED_PORT" -U 0 "${as_user[@]}" &
MEMCACHED=$!
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
sleep 0.5

h2() {
  h2load "$@" -d bench/rls_body.bin --header 'content-type: application/grpc' \
    --header 'te: trailers' "http://127.0.0.1:19191$METHOD"
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
  local name=$1 store=$2
  $BIN serve --config bench/stores.yaml --http 127.0.0.1:19190 --grpc 127.0.0.1:19191 \
    --store "$store" 2>"$DIR/serve.log" &
  SERVE=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:19190/readyz >/dev/null && break; sleep 0.1; done
  measure "$name"
}
# limitador-server on the same ports, with `storage` (memory, or disk PATH).
limitador() {
  local name=$1
  shift
  "$LIMITADOR" -b 127.0.0.1 -p 19191 -B 127.0.0.1 -P 19190 bench/limitador-limits.yaml "$@" \
    2>"$DIR/limitador.log" >&2 &
  SERVE=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:19190/status >/dev/null && break; sleep 0.1; done
  measure "$name"
}
measure() {
  local name=$1
  local r log="$DIR/h2load.log"
  r=$(h2 -c 4 -m 32 -D 5 --warm-up-time 1 2>&1 | awk '/finished in/ {print $4}')
  rm -f "$log"
  h2 -c 1 -m 1 -D 5 --warm-up-time 1 --log-file "$log" >/dev/null 2>&1
  echo "$name: peak $r decisions/s; one client, one request at a time: $(quantiles "$log")"
  kill "$SERVE"
  wait "$SERVE" 2>/dev/null || true
  SERVE=
}
for run in 1 2; do
  echo "== run $run"
  serve "memory" memory
  rm -rf "$DIR/file-store"
  serve "file" "file://$DIR/file-store"
  serve "redis" "redis://127.0.0.1:$REDIS_PORT"
  serve "memcached" "memcache://127.0.0.1:$MEMCACHED_PORT"
  if [ -n "${LIMITADOR:-}" ]; then
    limitador "limitador memory" memory
    rm -rf "$DIR/limitador-disk"
    limitador "limitador disk" disk "$DIR/limitador-disk"
  fi
done
