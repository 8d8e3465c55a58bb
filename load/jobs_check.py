"""A long job against a running service, checked page by page against synchronous requests.

    make run &                                            # in another terminal: the SQLite store
    .venv/bin/python load/jobs_check.py --url http://127.0.0.1:8000 --pages 300

Builds a PDF whose every page has its own text (`Archive page N`, `Register N*37+1000`), submits
it as one job, follows it to the end, then reads each page again through `/v1/ocr?pages=N` and
compares: the job's text for page N must equal the synchronous text, and hold page N's register
number. Writes load/results/jobs_check.json (commit, settings, timings, mismatches) and exits
non-zero unless the job succeeded with every page once and matching. load/jobs_failover.py uses
the same check after its faults.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from app.testkit.documents import numbered_pdf, serial  # noqa: E402
from load.common import add_report_options, commit, measure_or_render  # noqa: E402


def own_text(page: dict) -> bool:
    """The page holds its own two lines; spaces aside (PP-OCR sometimes reads `Serial3257`)."""
    text = "".join((page.get("text") or "").split())
    number = page["page_number"]
    return f"Archivepage{number}" in text and "".join(serial(number).split()) in text


def submit(http: httpx.Client, document: bytes, key: Optional[str] = None) -> dict:
    headers = {"Idempotency-Key": key} if key else {}
    response = http.post("/v1/jobs", files={"file": ("archive.pdf", document, "application/pdf")}, headers=headers)
    if response.status_code not in (200, 202):
        raise RuntimeError(f"submit: {response.status_code} {response.text[:300]}")
    return response.json()


def follow(http: httpx.Client, job_id: str, timeout_s: float,
           on_status: Optional[Callable[[dict], None]] = None) -> dict:
    """Long-poll the job until it is finished; transport errors (a restarting service) are retried."""
    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        try:
            response = http.get(f"/v1/jobs/{job_id}", params={"wait": 10})
        except httpx.HTTPError:
            time.sleep(1)
            continue
        if response.status_code != 200:  # 503 while an application restarts
            time.sleep(1)
            continue
        status = response.json()
        if on_status:
            on_status(status)
        if status["status"] not in ("queued", "running"):
            return status
    raise TimeoutError(f"job {job_id} not finished in {timeout_s} s: {status}")


def compare(http: httpx.Client, document: bytes, result: dict, pages: int, concurrency: int = 4) -> dict:
    """Each page of the job's result against a synchronous request for that page."""
    numbers = [page["page_number"] for page in result["pages"]]

    def sync_text(number: int) -> str:
        for _ in range(5):
            response = http.post("/v1/ocr", params={"pages": str(number)},
                                 files={"file": ("archive.pdf", document, "application/pdf")})
            if response.status_code == 200:
                return response.json()["pages"][0]["text"]
            time.sleep(float(response.headers.get("retry-after", 1)))
        raise RuntimeError(f"page {number}: {response.status_code} {response.text[:200]}")

    with ThreadPoolExecutor(concurrency) as pool:
        sync = dict(zip(range(1, pages + 1), pool.map(sync_text, range(1, pages + 1))))
    mismatched = [page["page_number"] for page in result["pages"]
                  if page.get("text") != sync.get(page["page_number"])]
    wrong_text = [page["page_number"] for page in result["pages"] if not own_text(page)]
    return {
        "pages_in_result": len(numbers),
        "missing": sorted(set(range(1, pages + 1)) - set(numbers)),
        "duplicated": sorted({n for n in numbers if numbers.count(n) > 1}),
        "mismatched_with_sync": mismatched,
        "without_own_register": wrong_text,
        "ok": numbers == list(range(1, pages + 1)) and not mismatched and not wrong_text,
    }



HEADER = "| what | figure | command |\n|---|---|---|\n"  # a rendered block is a whole table


def render(report: dict) -> str:
    """The README's row for a report."""
    return (HEADER + f"| {report['pages']}-page PDF job ({report['pdf_bytes'] / 1e6:.1f} MB), commit {report['commit']} | "
            f"{report['final_status']}, {report['final_pages']['done']}/{report['pages']} pages in "
            f"{report['job_seconds']} s ({report['pages_per_s']} pages/s); {report['pages_in_result']} pages in the "
            f"result, {len(report['missing'])} missing, {len(report['duplicated'])} twice, "
            f"{len(report['mismatched_with_sync'])} differing from /v1/ocr, {len(report['without_own_register'])} "
            f"without their own text | `load/jobs_check.py --pages {report['pages']}` against `make run` |")


def check(options) -> dict:
    headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
    document = numbered_pdf(options.pages)
    with httpx.Client(base_url=options.url, timeout=300, headers=headers) as http:
        started = time.monotonic()
        job = submit(http, document)
        last = [-1]

        def progress(status: dict) -> None:
            if status["pages"]["done"] != last[0]:
                last[0] = status["pages"]["done"]
                print(f"{time.monotonic() - started:7.1f}s  {status['status']:9} {status['pages']}", flush=True)

        final = follow(http, job["id"], options.timeout, progress)
        job_s = time.monotonic() - started
        result = http.get(job["result_url"]).json()
        checked = compare(http, document, result, options.pages)
    return {"commit": commit(), "url": options.url, "pages": options.pages, "pdf_bytes": len(document),
            "job_id": job["id"], "final_status": final["status"], "final_pages": final["pages"],
            "job_seconds": round(job_s, 1), "pages_per_s": round(options.pages / job_s, 2), **checked}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", help="Bearer token, where the service wants one")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=3600)
    add_report_options(parser, "jobs_check.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: check(options), render,
                             lambda report: report["final_status"] == "succeeded" and report["ok"])

if __name__ == "__main__":
    sys.exit(main())
