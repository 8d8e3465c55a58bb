"""Throughput of the bare engine against the service at concurrency 1 and 4, in one run.

    python load/bench.py [--manifest PATH] [--rounds N] [--url http://host:8000]

Same devset pages for all three. The bare engine runs in this process with one
thread per core (its best single-process setting); the service runs with the
default settings (`make run`) unless --url is given. Figures are pages per second
and their ratio to bare; the per-page timings the service reports show where a
replica's time goes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import DEFAULT_MANIFEST, BareEngine, load_devset, local_service  # noqa: E402


def run_bare(pages, rounds: int) -> dict:
    engine = BareEngine()
    started = time.perf_counter()
    latencies = []
    for _ in range(rounds):
        for sample, data in pages:
            t = time.perf_counter()
            engine.read(data, sample.content_type)
            latencies.append(time.perf_counter() - t)
    return {"pages": len(latencies), "seconds": time.perf_counter() - started, "latencies": latencies, "timings": []}


def run_service(url: str, pages, rounds: int, concurrency: int) -> dict:
    jobs = [page for _ in range(rounds * concurrency) for page in pages][: rounds * max(len(pages), concurrency * 2)]
    latencies, timings = [], []

    def send(job):
        sample, data = job
        t = time.perf_counter()
        response = client.post("/v1/ocr", files={"file": (sample.path.name, data, sample.content_type)})
        response.raise_for_status()
        return time.perf_counter() - t, response.json()["pages"]

    with httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(max_connections=concurrency)) as client:
        send(pages[0])  # connection and first-request warm-up, not timed
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            for latency, page_results in pool.map(send, jobs):
                latencies.append(latency)
                timings.extend(page["timings_ms"] | {"batch": page["batch"]["size"]} for page in page_results)
        seconds = time.perf_counter() - started
    return {"pages": len(jobs), "seconds": seconds, "latencies": latencies, "timings": timings}


def describe(name: str, result: dict, bare_rate: float) -> str:
    rate = result["pages"] / result["seconds"]
    p50 = statistics.median(result["latencies"]) * 1000
    return f"{name:16} {result['pages']:>5} {result['seconds']:>8.1f} {rate:>8.3f} {rate / bare_rate:>9.2f} {p50:>9.0f}"


def breakdown(result: dict) -> str:
    timings = result["timings"]
    if not timings:
        return ""
    keys = ("decode", "resize_encode", "ocr_decode", "engine_batch", "postprocess")
    means = {k: statistics.mean(t.get(k, 0.0) for t in timings) for k in keys}
    batch = statistics.mean(t["batch"] for t in timings)
    return "  mean ms/page: " + ", ".join(f"{k}={v:.0f}" for k, v in means.items()) + f", batch size={batch:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--url")
    options = parser.parse_args()
    pages = [(s, s.path.read_bytes()) for s in load_devset(options.manifest, kind="page")]
    print(f"{len(pages)} devset pages", flush=True)

    def measure(url: str) -> int:
        bare = run_bare(pages, options.rounds)
        bare_rate = bare["pages"] / bare["seconds"]
        c1 = run_service(url, pages, options.rounds, concurrency=1)
        c4 = run_service(url, pages, options.rounds, concurrency=4)
        print(f"\n{'run':16} {'pages':>5} {'seconds':>8} {'pages/s':>8} {'x bare':>9} {'p50 ms':>9}")
        print(describe("bare engine", bare, bare_rate))
        print(describe("service c=1", c1, bare_rate))
        print(breakdown(c1))
        print(describe("service c=4", c4, bare_rate))
        print(breakdown(c4))
        ratio = (c4["pages"] / c4["seconds"]) / bare_rate
        print(f"\nservice at c=4 / bare = {ratio:.2f} (target >= 0.85): {'PASS' if ratio >= 0.85 else 'FAIL'}")
        return 0

    if options.url:
        return measure(options.url)
    with local_service() as url:
        return measure(url)


if __name__ == "__main__":
    sys.exit(main())
