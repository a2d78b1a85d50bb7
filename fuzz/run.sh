#!/usr/bin/env bash
# Runs every fuzz target for a fixed time (default 20 s each) on the stable toolchain
# (`cargo fuzz run -s none`), starting from the seeds kept here plus the repository's own test
# fixtures and examples, copied into a scratch corpus (never committed). A crash stops the run
# with a non-zero status; libFuzzer writes the input to fuzz/artifacts/TARGET/ and prints it.
#
#   fuzz/run.sh [SECONDS]          every target
#   fuzz/run.sh SECONDS TARGET...  the named targets
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-20}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config_native config_envoy http_api rls_proto replay_trace client_headers rlqs_reports)
fi
repo=..
corpus=target/corpus
rm -rf "$corpus"
for t in config_native config_envoy http_api rls_proto replay_trace client_headers rlqs_reports; do
  mkdir -p "$corpus/$t"
  cp seeds/"$t"/* "$corpus/$t/" 2>/dev/null || true
done
# The configs the tests and examples use.
cp "$repo"/examples/config/floodgate.yaml "$corpus/config_native/example.yaml"
cp "$repo"/crates/floodgate-service/tests/fixtures/runtime/floodgate.yaml "$corpus/config_native/runtime.yaml"
i=0
for f in "$repo"/crates/floodgate-service/tests/fixtures/envoy/*.yaml "$repo"/crates/floodgate-service/tests/fixtures/envoy/refused/*.yaml \
         "$repo"/crates/floodgate-service/tests/fixtures/runtime/*.y*ml "$repo"/examples/config/envoy.yaml; do
  cp "$f" "$corpus/config_envoy/fixture-$i.yaml"; i=$((i + 1))
done
# The shipped trace, under a few of the limiters.
for spec in '{"algorithm":"token_bucket","rate":2,"capacity":5}' '{"algorithm":"fixed_window","limit":3,"window":"1s"}' \
            '{"algorithm":"sliding_log","limit":3,"window":2}' '{"algorithm":"leaky_queue","rate":2,"queue":3}'; do
  { echo "$spec"; cat "$repo"/examples/burst.jsonl; } > "$corpus/replay_trace/burst-$i"; i=$((i + 1))
done

cargo fuzz build -s none
mkdir -p target/logs
for t in "${targets[@]}"; do
  echo "== fuzzing $t for ${seconds}s"
  rc=0
  cargo fuzz run -s none "$t" "$corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    > "target/logs/$t.log" 2>&1 || rc=$?
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|Done [0-9]+ runs" "target/logs/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -40 "target/logs/$t.log"
    echo "fuzz target $t failed (exit $rc); the input is in fuzz/artifacts/$t/"
    exit 1
  fi
done
