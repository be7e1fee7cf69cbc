#!/usr/bin/env python3
"""Scrape latency and resident memory of a metrics endpoint.

Starts the exporter command (or attaches to a running pid), waits for the endpoint, makes
N sequential scrapes over one keep-alive connection, and prints p50/p99/max latency plus
RSS (VmRSS and its peak VmHWM from /proc) after the run, as a markdown table row.

    python3 scripts/bench/scrape_bench.py --name gantry --url http://127.0.0.1:9400/metrics \
        --spawn "target/release/gantry node exporter --collect-interval 1000"
    python3 scripts/bench/scrape_bench.py --name pynvml --url http://127.0.0.1:9401/metrics \
        --spawn "python3 scripts/bench/pynvml_exporter.py --port 9401"
"""

import argparse
import http.client
import json
import shlex
import statistics
import subprocess
import sys
import time
import urllib.parse


def rss_kib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def connect(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30), u.path or "/"


def wait_ready(url, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            conn, path = connect(url)
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            conn.close()
            if r.status == 200 and body:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{url} did not answer within {deadline_s}s")


def percentile(sorted_values, p):
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def main():
    ap = argparse.ArgumentParser(description="scrape latency and RSS of a metrics endpoint")
    ap.add_argument("--name", required=True)
    ap.add_argument("--url", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--spawn", help="command to start the exporter (killed afterwards)")
    g.add_argument("--pid", type=int, help="pid of an exporter already running")
    ap.add_argument("-n", "--scrapes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--settle", type=float, default=2.0, help="seconds to wait after the first answer")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    proc = None
    started = time.monotonic()
    if args.spawn:
        proc = subprocess.Popen(shlex.split(args.spawn), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        pid = proc.pid
    else:
        pid = args.pid
    try:
        ready_at = wait_ready(args.url, 60)
        startup_s = ready_at - started if proc else None
        time.sleep(args.settle)
        conn, path = connect(args.url)
        times = []
        size = 0
        for i in range(args.warmup + args.scrapes):
            t0 = time.perf_counter()
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            dt = time.perf_counter() - t0
            if r.status != 200:
                raise SystemExit(f"scrape {i}: HTTP {r.status}")
            if i >= args.warmup:
                times.append(dt * 1000.0)
                size = len(body)
        conn.close()
        mem = rss_kib(pid)
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
    times.sort()
    result = {
        "name": args.name,
        "scrapes": len(times),
        "p50_ms": round(percentile(times, 50), 3),
        "p99_ms": round(percentile(times, 99), 3),
        "max_ms": round(times[-1], 3),
        "mean_ms": round(statistics.fmean(times), 3),
        "rss_mib": round(mem.get("VmRSS", 0) / 1024.0, 1),
        "hwm_mib": round(mem.get("VmHWM", 0) / 1024.0, 1),
        "body_bytes": size,
        "startup_s": round(startup_s, 3) if startup_s is not None else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print("| exporter | scrapes | p50 ms | p99 ms | max ms | RSS MiB | peak RSS MiB | body bytes | ready after s |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("| {name} | {scrapes} | {p50_ms} | {p99_ms} | {max_ms} | {rss_mib} | {hwm_mib} | {body_bytes} | {startup_s} |".format(**result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
