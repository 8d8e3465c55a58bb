"""Synchronous latency while a long job runs: single-page /v1/ocr at a fixed arrival rate, idle vs
with a 200-page job in flight, interleaved over repeats.

    .venv/bin/python load/jobs_fairness.py [--repeats 3] [--rate 1.0] [--seconds 20] [--pages 200]
                                           [--max-inflight-pages 1,2,4]
    .venv/bin/python load/jobs_fairness.py --render load/results/jobs_fairness.json   (the README table)

Both arms are warmed the same way (a few requests first) and alternate within each repeat
(idle first in even repeats, the job first in odd ones). Each request is sent at its scheduled time in its own thread, so a slow
answer never delays the next arrival. Reported: p50/p95 per arm and repeat, the p95 ratio
(job / idle) per repeat with its median and spread, 503s and failures. The issue's bar: the
median p95 ratio within 3x at the shipped default of jobs.max_inflight_pages; the other values
show the trade against the job's own pages per second (one service each). Raw JSON goes to load/results/jobs_fairness.json with the commit
and the settings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from typing import Optional
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, post  # noqa: E402
from load.common import add_report_options, commit, local_service, measure_or_render, percentile  # noqa: E402

import httpx  # noqa: E402

from app.config import Jobs  # noqa: E402
from app.synthetic import pdf_bytes, png_bytes, render_text_page  # noqa: E402


LEASE_S = 3


def settings(max_inflight_pages: int) -> dict:
    store = f"sqlite:///{tempfile.mkdtemp(prefix='ocr-fair-')}/jobs.sqlite3"
    return {"engine": "ppocr", "engine_threads": 1, "ocr_replicas": 2, "ocr_num_cpus": 0.5,
            "jobs": {"store": store, "max_inflight_pages": max_inflight_pages, "lease_s": LEASE_S}}


def long_pdf(pages: int) -> bytes:
    return pdf_bytes(render_text_page([f"Archive page {n}", f"Register {n * 13}", "Lorem ipsum dolor sit amet"])
                     for n in range(1, pages + 1))


def flood(url: str, page: bytes, rate: float, seconds: float) -> dict:
    """Requests at a fixed arrival rate for `seconds`; latencies of the 200s, counts of the rest."""
    latencies, statuses, lock = [], {}, threading.Lock()

    def one():
        with httpx.Client(base_url=url, timeout=120) as client:
            answer = post(client, Upload(page, "image/png", "p.png"))
        with lock:
            statuses[answer.status] = statuses.get(answer.status, 0) + 1
            if answer.ok:
                latencies.append(answer.seconds * 1000)

    threads, start = [], time.monotonic()
    for i in range(int(rate * seconds)):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        thread = threading.Thread(target=one)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    latencies.sort()
    return {"requests": len(threads), "ok": len(latencies), "503": statuses.get(503, 0),
            "failed": len(threads) - len(latencies) - statuses.get(503, 0),
            "p50_ms": _ms(percentile(latencies, 0.50)), "p95_ms": _ms(percentile(latencies, 0.95))}


def _ms(value: Optional[float]) -> float:
    return float("nan") if value is None else round(value, 1)


def start_job(http: httpx.Client, document: bytes) -> dict:
    """Submit the long job and return once its pages are flowing (4 done)."""
    job = http.post("/v1/jobs", files={"file": ("long.pdf", document, "application/pdf")}).json()
    while http.get(job["status_url"]).json()["pages"]["done"] < 4:
        time.sleep(0.2)
    return job


def stop_job(http: httpx.Client, job: dict) -> dict:
    """Cancel the job and wait out the runner's heartbeat, so that no job page leaks into an idle arm."""
    progress = http.get(job["status_url"]).json()
    http.delete(job["status_url"])
    time.sleep(LEASE_S)
    return progress


def with_job_arm(url: str, http: httpx.Client, page: bytes, document: bytes, options) -> dict:
    job = start_job(http, document)
    busy = flood(url, page, options.rate, options.seconds)
    progress = stop_job(http, job)
    busy["job_pages_done_during"] = progress["pages"]["done"]
    busy["job_still_running"] = progress["status"] == "running"
    return busy


def measure(options, inflight: int, page: bytes, document: bytes) -> dict:
    """One service at max_inflight_pages=inflight: both arms, interleaved over the repeats."""
    repeats = []
    with local_service(settings(inflight), num_cpus=4) as url:
        with httpx.Client(base_url=url, timeout=120) as http:
            for _ in range(4):  # warm the synchronous path
                http.post("/v1/ocr", files={"file": ("p.png", page, "image/png")})
            stop_job(http, start_job(http, document))  # and the job path, before either arm is measured
            for repeat in range(options.repeats):
                # Alternate which arm goes first, so that neither always runs on a warmer machine.
                if repeat % 2 == 0:
                    idle = flood(url, page, options.rate, options.seconds)
                    busy = with_job_arm(url, http, page, document, options)
                else:
                    busy = with_job_arm(url, http, page, document, options)
                    idle = flood(url, page, options.rate, options.seconds)
                repeats.append({"repeat": repeat, "idle": idle, "with_job": busy,
                                "p95_ratio": round(busy["p95_ms"] / idle["p95_ms"], 2)})
                print(json.dumps({"max_inflight_pages": inflight, **repeats[-1]}), flush=True)
    ratios = [r["p95_ratio"] for r in repeats]
    job_rates = [r["with_job"]["job_pages_done_during"] / options.seconds for r in repeats]
    return {"max_inflight_pages": inflight, "repeats": repeats,
            "p95_ratio_median": statistics.median(ratios), "p95_ratio_spread": [min(ratios), max(ratios)],
            "job_pages_per_s_median": round(statistics.median(job_rates), 2),
            "job_ran_throughout": all(r["with_job"]["job_still_running"] for r in repeats)}


def run(options) -> dict:
    page = png_bytes(render_text_page(["Invoice 4711", "Total amount 57.80 EUR"]))
    document = long_pdf(options.pages)
    arms = [measure(options, inflight, page, document) for inflight in options.max_inflight_pages]
    default = Jobs().max_inflight_pages
    at_default = [arm for arm in arms if arm["max_inflight_pages"] == default]
    return {
        "commit": commit(),
        "settings": {"repeats": options.repeats, "rate": options.rate, "seconds": options.seconds,
                     "pages": options.pages, "default_max_inflight_pages": default,
                     "service": "ppocr, 2 OCR replicas x 0.5 CPU, 1 thread each, SQLite job store, Ray num_cpus 4"},
        "by_max_inflight_pages": arms,
        # The bar, at the shipped default: the median p95 ratio within 3x, the job running all along.
        "within_3x_at_default": bool(at_default) and all(
            arm["p95_ratio_median"] <= 3.0 and arm["job_ran_throughout"] for arm in at_default),
    }


def render(report: dict) -> str:
    rows = ["| max_inflight_pages | repeat | idle p50 / p95 ms | with job p50 / p95 ms | p95 ratio | 503s | failed "
            "| job pages/s meanwhile |", "|---|---|---|---|---|---|---|---|"]
    seconds = report["settings"]["seconds"]
    for arm in report["by_max_inflight_pages"]:
        for r in arm["repeats"]:
            i, b = r["idle"], r["with_job"]
            rows.append(f"| {arm['max_inflight_pages']} | {r['repeat']} | {i['p50_ms']} / {i['p95_ms']} | "
                        f"{b['p50_ms']} / {b['p95_ms']} | {r['p95_ratio']} | {i['503'] + b['503']} | "
                        f"{i['failed'] + b['failed']} | {b['job_pages_done_during'] / seconds:.2f} |")
    rows.append("")
    for arm in report["by_max_inflight_pages"]:
        low, high = arm["p95_ratio_spread"]
        rows.append(f"- max_inflight_pages {arm['max_inflight_pages']}: median p95 ratio {arm['p95_ratio_median']} "
                    f"(spread {low}-{high}), the job at {arm['job_pages_per_s_median']} pages/s")
    settings = report["settings"]
    rows.append(f"\nCommit {report['commit']}; {settings['rate']} single-page requests/s for {seconds:g} s per arm, "
                f"{settings['repeats']} repeats, a {settings['pages']}-page job; {settings['service']}. "
                f"Within 3x at the default ({settings['default_max_inflight_pages']}): "
                f"{'yes' if report['within_3x_at_default'] else 'no'}.")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1.0, help="single-page requests per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each arm's flood")
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--max-inflight-pages", type=lambda text: [int(v) for v in text.split(",")],
                        default=[1, 2, 4], help="values to measure, one service each (default 1,2,4)")
    add_report_options(parser, "jobs_fairness.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: run(options), render, lambda report: report["within_3x_at_default"])


if __name__ == "__main__":
    sys.exit(main())
