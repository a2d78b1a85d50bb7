#!/usr/bin/env python3
"""Instructions redis-server spends per decision, counted by callgrind (repeatable, whatever
else the machine does), for Stripe's two-key token bucket script, Floodgate's token bucket twin
alone, and Floodgate's batch script carrying K decisions per call.

Each script runs in a redis-server of its own under `valgrind --tool=callgrind` on a free
port, driven by redis-benchmark (one connection, no pipelining, keys drawn from 1,000 so that
most calls find their keys), twice: N1 and N2 calls. The difference of the two totals, divided
by (N2 - N1) and by the decisions per call, is the cost of one decision without start-up.

    cargo build --release -p floodgate --features redis --example redis_script
    python3 bench/redis_instructions.py [K]
"""
import os
import re
import subprocess
import sys
import tempfile
import time

K = int(sys.argv[1]) if len(sys.argv) > 1 else 32
N1, N2 = 60, 260
PORT = 16800
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script(name):
    tool = os.path.join(ROOT, "target/release/examples/redis_script")
    return subprocess.run([tool, name], capture_output=True, text=True, check=True).stdout


def total(source, args, calls, out):
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
         "--port", str(PORT), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli = ["redis-cli", "-p", str(PORT)]
    for _ in range(300):
        if subprocess.run(cli + ["ping"], capture_output=True, text=True).stdout.strip() == "PONG":
            break
        time.sleep(0.1)
    sha = subprocess.run(cli + ["SCRIPT", "LOAD", source], capture_output=True,
                         text=True).stdout.strip()
    subprocess.run(f"redis-benchmark -p {PORT} -n {calls} -c 1 -P 1 -r 1000 -q "
                   f"EVALSHA {sha} {args}", shell=True, capture_output=True)
    subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
    server.wait()
    with open(out) as f:
        found = re.search(r"(?:summary|totals): (\d+)", f.read())
    os.remove(out)
    return int(found.group(1))


def per_decision(name, source, args, decisions_per_call):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        first = total(source, args, N1, out)
        second = total(source, args, N2, out)
    n = (second - first) / (N2 - N1) / decisions_per_call
    print(f"{name}: {n:,.0f} instructions per decision")


with open(os.path.join(ROOT, "crates/floodgate/benches/redis/two_key_token_bucket.lua")) as f:
    per_decision("Stripe's two-key token bucket", f.read(),
                 "2 tokens:__rand_int__ ts:__rand_int__ 10 100 1700000000 1", 1)
per_decision("Floodgate's token bucket twin, one call per decision", script("token_bucket"),
             "1 'rate:{__rand_int__}' '' 0 10 100 1 T", 1)
keys = " ".join(f"'b:{{__rand_int__{i}}}'" for i in range(K))
lone = " ".join("1" for _ in range(K))
per_decision(f"Floodgate's batch script, {K} token bucket decisions per call", script("batch"),
             f"{K} {keys} '' 0 1 token_bucket 4 10 100 1 T {lone}", K)
