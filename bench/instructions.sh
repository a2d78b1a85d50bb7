#!/usr/bin/env bash
# Instructions a `ShouldRateLimit` call costs the server, counted by callgrind: repeatable on a
# noisy VM where throughput moves by 10% between identical runs. Needs valgrind and h2load.
#   cargo build --release -p floodgate-server --bin floodgate
#   bash bench/instructions.sh [BINARY]        # default target/release/floodgate
# Runs the server (one worker, bench/service.yaml) under callgrind twice: 4,000 calls of
# warm-up then 4 calls, and the same warm-up then 20,000 calls; the difference of the two
# totals over 19,996 is the cost of one call, start-up and warm-up excluded. The second run's
# profile is left in /tmp/floodgate-calls.callgrind for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/floodgate}
HTTP=127.0.0.1:19080
GRPC=127.0.0.1:19081
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

total() { # calls out-file -> the run's instruction total
  if ss -ltn | grep -qE ":(19080|19081) "; then echo "port 19080 or 19081 is taken" >&2; exit 1; fi
  valgrind --tool=callgrind --callgrind-out-file="$2" "$BIN" serve --config bench/service.yaml \
    --threads 1 --http $HTTP --grpc $GRPC 2>/tmp/floodgate-callgrind.log &
  local pid=$!
  for _ in $(seq 100); do curl -sf http://$HTTP/livez >/dev/null && break; sleep 0.3; done
  for n in 4000 "$1"; do
    h2load -c 4 -m 32 -n "$n" -d bench/rls_body.bin --header 'content-type: application/grpc' \
      --header 'te: trailers' "http://$GRPC$METHOD" >/dev/null
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  callgrind_annotate --threshold=99 "$2" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

short=$(total 4 /tmp/floodgate-warmup.callgrind)
long=$(total 20000 /tmp/floodgate-calls.callgrind)
echo "instructions per call: $(( (long - short) / 19996 ))"
