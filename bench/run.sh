#!/usr/bin/env bash
# Load-tests a running `floodgate serve` on this machine and prints the figures that
# BENCHMARKS.md records. Needs h2load (Debian's nghttp2-client) and wrk.
#   cargo build --release -p floodgate-server --bin floodgate --example rls_load
#   bash bench/run.sh
# Options (environment):
#   RUNS=3            runs of each peak measurement
#   WORKERS="2 1"     the --threads values to measure (default: this machine's cores, then 1)
#   PEER_URL=http://127.0.0.1:PORT   another Envoy RLS server, already running, with domains
#                     `bench` and `bench-deny` limited as in bench/service.yaml: measured with
#                     the same h2load commands, its runs interleaved with Floodgate's
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/floodgate
HTTP=127.0.0.1:19080
GRPC=127.0.0.1:19081
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-"$(nproc) 1"}
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; true' EXIT

start() { # workers
  if ss -ltn | grep -qE ":(19080|19081) "; then echo "port 19080 or 19081 is taken" >&2; exit 1; fi
  $BIN serve --config bench/service.yaml --http $HTTP --grpc $GRPC --threads "$1" 2>/tmp/floodgate-bench.log &
  PID=$!
  for _ in $(seq 50); do curl -sf http://$HTTP/livez >/dev/null && return; sleep 0.1; done
  echo "floodgate did not start; see /tmp/floodgate-bench.log" >&2; exit 1
}
stop() { kill $PID; wait $PID 2>/dev/null || true; PID=; }

peak() { # url body -> decisions/s under the issue's command
  h2load -c 4 -m 32 -D 5 --warm-up-time 1 -d "bench/$2" \
    --header 'content-type: application/grpc' --header 'te: trailers' "$1$METHOD" 2>&1 |
    awk '/finished in/ {print $4}'
}

paced() { # url clients streams total-rate -> achieved rate, p50/p99/p99.9 from h2load's log
  local log; log=$(mktemp)
  local rate; rate=$(h2load -c "$2" -m "$3" -D 5 --warm-up-time 1 --rps $(($4 / $2)) \
    -d bench/rls_body.bin --header 'content-type: application/grpc' --header 'te: trailers' \
    --log-file "$log" "$1$METHOD" 2>&1 | awk '/finished in/ {print $4}')
  python3 - "$log" "$rate" <<'PY'
import sys
d = sorted(int(l.split()[2]) for l in open(sys.argv[1]) if l.strip())
q = lambda p: d[min(len(d) - 1, int(p * len(d)))]
print("%s req/s, p50 %d us, p99 %d us, p99.9 %d us" % (sys.argv[2], q(0.5), q(0.99), q(0.999)))
PY
  rm -f "$log"
}

for workers in $WORKERS; do
  start "$workers"
  echo "== floodgate --threads $workers: gRPC ShouldRateLimit, h2load -c 4 -m 32, 1 key"
  best=0
  for body in rls_body.bin rls_body_deny.bin; do
    for i in $(seq "$RUNS"); do
      r=$(peak "http://$GRPC" $body)
      echo "$body run $i: floodgate $r/s"
      best=$(python3 -c "print(max($best, $r))")
      [ -n "${PEER_URL:-}" ] && echo "$body run $i: peer $(peak "$PEER_URL" $body)/s"
    done
  done
  half=$(python3 -c "print(int($best / 2))")
  echo "== floodgate --threads $workers: latency at half of the best peak ($half/s), paced by h2load --rps"
  for shape in "4 4" "4 8" "16 4" "4 32"; do
    set -- $shape
    echo "-c $1 -m $2: $(paced "http://$GRPC" "$1" "$2" "$half")"
  done
  if [ -n "${PEER_URL:-}" ]; then
    echo "== peer: the same shapes at 40000/s (about half of its peak)"
    for shape in "4 4" "4 32"; do
      set -- $shape
      echo "-c $1 -m $2: $(paced "$PEER_URL" "$1" "$2" 40000)"
    done
  fi
  echo "== floodgate --threads $workers: gRPC over many keys, examples/rls_load -c 4 -m 32 (h2load sends one body)"
  for domain in bench bench-deny; do
    for keys in 1 100000; do
      echo "$domain, $keys keys: $(target/release/examples/rls_load "http://$GRPC" --domain $domain --keys $keys -c 4 -m 32 --duration 5s)"
    done
  done
  echo "== floodgate --threads $workers: HTTP, wrk -t1 -c64 -d5s"
  for script in "check.lua allow" "check.lua deny" "json.lua bench" "json.lua bench-deny"; do
    set -- $script
    for keys in 1 100000; do
      wrk -t1 -c64 -d5s --latency -s "bench/$1" "http://$HTTP" -- "$2" $keys 2>&1 |
        awk -v s="$1 $2" -v k=$keys '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print s ", " k " keys: " rps " req/s, p50 " p50 ", p99 " p99}'
    done
  done
  stop
done
