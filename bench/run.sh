#!/usr/bin/env bash
# Load-tests a running `floodgate serve` on this machine and prints the figures that
# BENCHMARKS.md records. Needs h2load (Debian's nghttp2-client) and wrk.
#   cargo build --release -p floodgate-server && bash bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/floodgate
HTTP=127.0.0.1:19080
GRPC=127.0.0.1:19081
URL=http://$GRPC/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
RUNS=${RUNS:-3}

$BIN serve --config bench/service.yaml --http $HTTP --grpc $GRPC 2>/tmp/floodgate-bench.log &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf http://$HTTP/livez >/dev/null && break; sleep 0.1; done

grpc() { # body, extra h2load flags...
  local body=$1; shift
  h2load -c 4 -m 32 -D 5 --warm-up-time 1 -d "bench/$body" \
    --header 'content-type: application/grpc' --header 'te: trailers' "$@" "$URL" 2>&1 |
    awk '/finished in/ {rps=$4} /time for request/ {mean=$6} END {print rps " req/s, mean latency " mean}'
}
echo "== gRPC ShouldRateLimit, h2load -c 4 -m 32, 1 key"
for i in $(seq $RUNS); do echo "allowed run $i: $(grpc rls_body.bin)"; done
for i in $(seq $RUNS); do echo "refused run $i: $(grpc rls_body_deny.bin)"; done
echo "== gRPC latency at fixed rates (h2load -c 16 -m 4 --rps per client; p50/p99 from its log)"
for total in 40000 80000; do
  log=$(mktemp)
  h2load -c 16 -m 4 -D 5 --warm-up-time 1 --rps $((total / 16)) -d bench/rls_body.bin \
    --header 'content-type: application/grpc' --header 'te: trailers' --log-file "$log" "$URL" 2>&1 |
    awk -v t=$total '/finished in/ {printf "target %d/s: %s req/s", t, $4}'
  python3 -c 'import sys; d=sorted(int(l.split()[2]) for l in open(sys.argv[1]) if l.strip()); q=lambda p: d[min(len(d)-1, int(p*len(d)))]; print(", p50 %dus, p99 %dus, %d samples" % (q(0.5), q(0.99), len(d)))' "$log"
  rm -f "$log"
done
echo "== HTTP POST /v1/check, wrk -t1 -c64 -d5s"
for limit in allow deny; do
  for keys in 1 100000; do
    wrk -t1 -c64 -d5s --latency -s bench/check.lua "http://$HTTP" -- $limit $keys 2>&1 |
      awk -v l=$limit -v k=$keys '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print l ", " k " keys: " rps " req/s, p50 " p50 ", p99 " p99}'
  done
done
