"""What a searchable PDF costs beside JSON, on the 20-page A4 PDF of load/cpu_cost.py (32 text lines a page).

    python load/formats_cost.py [--rounds 3] [--step-calls 4]
    python load/formats_cost.py --render load/results/formats_cost.json

One local service (`make run`'s defaults, the ppocr engine). Each round, in alternating order, posts
the PDF with format=json and with format=pdf (both arms warmed alike by one request each first), then
times the format step alone: the Preprocessor's `searchable_pdf` (its decoder sandbox, as serving runs
it) called --step-calls times on the round's page results. The figures: the step's time per page (mean
and p95 over every call), and the two arms' whole-request latency, median (min-max) over rounds; a non-200
answer is counted, never timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from load.common import add_report_options, commit, machine, measure_or_render, percentile, summary  # noqa: E402

PAGES = 20


def a4_pdf() -> bytes:
    from app.synthetic import pdf_bytes, render_text_page

    def page(number: int):
        lines = [f"Page {number} line {row}: invoice 10{number:02d}-{row:02d} total {row * 3.5:.2f}" for row in range(32)]
        return render_text_page(lines, width=1240, font_size=22, margin=60).resize((1240, 1754))

    return pdf_bytes((page(number) for number in range(1, PAGES + 1)), dpi=150)


def post(http: httpx.Client, document: bytes, form: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    answer = http.post("/v1/ocr", content=document, params={"format": form}, headers={"content-type": "application/pdf"})
    return time.perf_counter() - started, answer


def measure(rounds: int, step_calls: int) -> dict:
    from ray import serve

    from app.testkit.service import local_service

    document = a4_pdf()
    latency = {"json": [], "pdf": []}
    step_ms_per_page, failures, sizes = [], {"json": 0, "pdf": 0}, {}
    with local_service() as url, httpx.Client(base_url=url, timeout=600) as http:
        preprocessor = serve.get_deployment_handle("Preprocessor", app_name="ocr")
        for form in ("json", "pdf"):  # warm both arms alike
            post(http, document, form)
        for index in range(rounds):
            order = ("json", "pdf") if index % 2 == 0 else ("pdf", "json")
            pages = None
            for form in order:
                seconds, answer = post(http, document, form)
                if answer.status_code != 200:
                    failures[form] += 1
                    continue
                latency[form].append(seconds)
                sizes[form] = len(answer.content)
                if form == "json":
                    pages = answer.json()["pages"]
            if pages is None:
                continue
            for _ in range(step_calls):
                started = time.perf_counter()
                preprocessor.searchable_pdf.remote("bench", document, "application/pdf", pages).result()
                step_ms_per_page.append((time.perf_counter() - started) * 1000 / PAGES)
            print(f"round {index + 1}: json {latency['json'][-1]:.1f} s, pdf {latency['pdf'][-1]:.1f} s, "
                  f"step {statistics.mean(step_ms_per_page[-step_calls:]):.1f} ms/page", flush=True)
    return {
        "commit": commit(), "machine": machine(),
        "settings": {"rounds": rounds, "step_calls": step_calls, "pages": PAGES, "document_bytes": len(document),
                     "engine": "ppocr", "service": "make run defaults"},
        "step_ms_per_page": {"mean": statistics.mean(step_ms_per_page), "p95": percentile(step_ms_per_page, 0.95),
                             "all": step_ms_per_page},
        "latency_s": {form: summary(values) for form, values in latency.items() if values},
        "failures": failures, "answer_bytes": sizes,
    }


def render(report: dict) -> str:
    step, lat = report["step_ms_per_page"], report["latency_s"]

    def cell(stats: dict) -> str:
        return f"{stats['median']:.1f} ({stats['min']:.1f}-{stats['max']:.1f})"

    extra = [(p - j) * 1000 / report["settings"]["pages"] for j, p in zip(lat["json"]["all"], lat["pdf"]["all"])]
    return "\n".join([
        f"| searchable PDF step, ms per page (mean / p95 over {len(step['all'])} calls) | "
        f"{step['mean']:.1f} / {step['p95']:.1f} |",
        "|---|---|",
        f"| whole request, format=json, s (median, min-max over {report['settings']['rounds']} rounds) | "
        f"{cell(lat['json'])} |",
        f"| whole request, format=pdf, s | {cell(lat['pdf'])} |",
        f"| pdf minus json per page, ms, per round (noisy: OCR dominates) | {', '.join(f'{e:.0f}' for e in extra)} |",
        f"| answers not 200 (json / pdf) | {report['failures']['json']} / {report['failures']['pdf']} |",
        f"| answer size, json / pdf, bytes | {report['answer_bytes'].get('json')} / {report['answer_bytes'].get('pdf')} |",
        "",
        f"commit {report['commit']}, {report['machine']['cpus']} CPUs; {report['settings']['pages']}-page A4 PDF at "
        f"150 dpi, {report['settings']['document_bytes']} bytes.",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step-calls", type=int, default=4)
    add_report_options(parser, "formats_cost.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options.rounds, options.step_calls), render,
                             lambda report: not any(report["failures"].values()))


if __name__ == "__main__":
    sys.exit(main())
