#!/usr/bin/env bash
# The polite client against a server allowing 50 requests/s, offered 400 requests/s, beside
# the naive client, for each dialect (BENCHMARKS.md, "Client side").
# Usage: bench/polite_client.sh [seconds per run, default 30]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
cargo build --release -p floodgate-client --examples
port=$((20000 + RANDOM % 10000))
target/release/examples/limited_server --port "$port" --rate 50 >/dev/null &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 0.5
printf '| server fields | client | sent | refused (429) | refused %% | refused %% after 5 s | goodput/s | goodput ÷ limit | local waits |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for family in ietf x retry-after none; do
  for mode in polite naive; do
    flag=""; [ "$mode" = naive ] && flag="--naive"
    line=$(target/release/examples/polite_client --url "http://127.0.0.1:$port/$family/" \
      --rate 400 --duration "$secs" --concurrency 64 $flag 2>/dev/null | tail -1)
    python3 - "$family" "$mode" "$line" <<'PY'
import json, sys
family, mode, line = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sent, thr = line["sent"], line["throttled"]
sa, ta = line["sent_after_warmup"], line["throttled_after_warmup"]
pct = 100 * thr / sent if sent else 0
pcta = 100 * ta / sa if sa else 0
print(f"| {family} | {mode} | {sent} | {thr} | {pct:.1f} | {pcta:.1f} | {line['goodput_per_second']:.1f} | {line['goodput_per_second']/50:.2f} | {line['local_waits']} |")
PY
  done
done
