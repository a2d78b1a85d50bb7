#!/usr/bin/env python3
"""Figures for RELIABILITY.md, measured against a real `floodgate serve` (standard library only).

    cargo build --release -p floodgate-server
    python3 bench/reliability.py target/release/floodgate

1. slow connections: the latency of a well-behaved client's `POST /v1/check` (one keep-alive
   connection, 2,000 requests in a row) alone, then beside 1,000 half-open connections that
   sent half a request head and nothing more.
2. fail-open: the latency of `POST /v1/check` on a Redis store (a redis-server of its own on a
   free port, never the machine's) while that Redis is paused with SIGSTOP: first through the
   store's timeout (50 ms by default), then with the circuit breaker open.

Prints one JSON object per figure.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(binary, config_text, store=None):
    directory = tempfile.mkdtemp(prefix="floodgate-reliability-")
    path = os.path.join(directory, "floodgate.yaml")
    with open(path, "w") as f:
        f.write(config_text)
    args = [binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--config", path]
    if store:
        args += ["--store", store]
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in child.stderr:
        if line.startswith("floodgate listening "):
            http_addr = line.split()[2].split("=", 1)[1]
            host, port = http_addr.rsplit(":", 1)
            # Keep draining stderr so the service never blocks on a full pipe.
            subprocess.Popen(["cat"], stdin=child.stderr, stdout=subprocess.DEVNULL)
            return child, (host, int(port))
    raise SystemExit("floodgate serve did not start")


def timed_checks(addr, count, key="k"):
    conn = http.client.HTTPConnection(*addr)
    body = json.dumps({"limiter": "login", "key": key})
    times = []
    for _ in range(count):
        start = time.perf_counter()
        conn.request("POST", "/v1/check", body, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        times.append(time.perf_counter() - start)
        assert response.status == 200, response.status
    conn.close()
    times.sort()
    ms = lambda q: round(times[min(len(times) - 1, int(q * len(times)))] * 1000, 3)
    return {"p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": round(times[-1] * 1000, 3)}


CONFIG = "limits:\n  login: {algorithm: token_bucket, rate: 1000000, capacity: 1000000}\n"


def slow_connections(binary):
    child, addr = serve(binary, CONFIG)
    try:
        timed_checks(addr, 200)  # warm up
        alone = timed_checks(addr, 2000)
        slow = []
        for _ in range(1000):
            s = socket.create_connection(addr)
            s.sendall(b"GET /livez HTTP/1.1\r\nHost: floodgate\r\n")
            slow.append(s)
        beside = timed_checks(addr, 2000)
        for s in slow:
            s.close()
        return {"figure": "check latency beside 1,000 half-open connections",
                "alone": alone, "beside_1000_half_open": beside}
    finally:
        child.terminate()
        child.wait()


def fail_open(binary):
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    child, addr = serve(binary, CONFIG, store=f"redis://127.0.0.1:{port}")
    try:
        healthy = timed_checks(addr, 500)
        redis.send_signal(signal.SIGSTOP)
        # The first calls wait for the store's timeout, then the breaker opens (3 in a row)
        # and calls fail open at once until a probe finds Redis back.
        through_timeout = timed_checks(addr, 3)
        breaker_open = timed_checks(addr, 500)
        redis.send_signal(signal.SIGCONT)
        return {"figure": "check latency with Redis paused (store timeout 50 ms, breaker after 3)",
                "healthy": healthy, "first_calls_through_the_timeout": through_timeout,
                "breaker_open": breaker_open}
    finally:
        child.terminate()
        child.wait()
        redis.send_signal(signal.SIGCONT)
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/floodgate"
    print(json.dumps(slow_connections(binary)))
    print(json.dumps(fail_open(binary)))
