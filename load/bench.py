"""Throughput of the service at concurrency 1 and 4 against the bare engine with the same threads.

    python load/bench.py [--rounds 3] [--manifest PATH] [--url http://host:8000]
        [--report load/results/bench.json]
    python load/bench.py --render load/results/bench.json

Three arms on the same devset pages: the bare engine in this process (same decoding and layout
code, no Serve), with as many threads as the service's OCR replicas have together (replicas x
threads each, from the default settings), and the service (`make run`'s defaults unless --url)
at concurrency 1 and 4. Every arm is warmed the same way before its first round: one untimed
pass over the pages at its own concurrency. Then the arms take turns, their order rotating by
round, each round one timed pass (at concurrency 4, the page list repeated so that four
requests are always in flight). Pages per second per round and arm; the ratios are taken
within a round; failures (any answer but 200, each retried never) are counted beside them.
The service's per-page timings show where its time goes; `engine_per_page` is a batch's engine
time divided by the pages in it (`engine_batch` is the whole batch's).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop  # noqa: E402
from load.common import (  # noqa: E402
    DEFAULT_MANIFEST,
    BareEngine,
    add_report_options,
    commit,
    load_devset,
    local_service,
    machine,
    measure_or_render,
    spread_cell,
    summary,
)

ARMS = ("bare", "service_c1", "service_c4")
TARGET = 1.0  # service at c=4 / bare, issue 13
STAGES = ("decode", "resize_encode", "queue_wait", "ocr_decode", "engine_per_page", "postprocess")


def service_threads() -> tuple[int, int]:
    """(OCR replicas, engine threads each) under the default settings, as OCRModel sizes them."""
    from app.config import Settings

    settings = Settings()
    return settings.ocr_replicas, settings.engine_threads or max(1, math.ceil(settings.ocr_num_cpus))


class Bare:
    def __init__(self, threads: int):
        self.engine = BareEngine(threads=threads)

    def run(self, pages) -> dict:
        started, failed = time.perf_counter(), 0
        for sample, data in pages:
            try:
                self.engine.read(data, sample.content_type)
            except Exception:  # noqa: BLE001 - a failure is counted, not fatal
                failed += 1
        return {"pages": len(pages), "seconds": time.perf_counter() - started, "failed": failed, "timings": []}


class Service:
    def __init__(self, url: str, concurrency: int):
        self.url, self.concurrency = url, concurrency

    def jobs(self, pages) -> list:
        return [page for _ in range(self.concurrency) for page in pages] if self.concurrency > 1 else list(pages)

    def run(self, pages) -> dict:
        jobs = self.jobs(pages)
        uploads = [Upload(data, sample.content_type, sample.path.name) for sample, data in jobs]
        answers, seconds = closed_loop(self.url, uploads, self.concurrency)
        timings = []
        for answer in answers:
            for page in answer.body["pages"] if answer.ok else []:
                stage = dict(page["timings_ms"])
                stage["engine_per_page"] = stage.get("engine_batch", 0.0) / max(1, page["batch"]["size"])
                timings.append(stage | {"batch": page["batch"]["size"]})
        return {"pages": len(jobs), "seconds": seconds, "failed": sum(not a.ok for a in answers), "timings": timings}


def measure(options, url: str) -> dict:
    pages = [(s, s.path.read_bytes()) for s in load_devset(options.manifest, kind="page")]
    replicas, threads_each = service_threads()
    arms = {"bare": Bare(replicas * threads_each), "service_c1": Service(url, 1), "service_c4": Service(url, 4)}
    for name, arm in arms.items():  # the same warm-up for every arm: one untimed pass
        arm.run(pages)
    rounds: list[dict] = []
    for index in range(options.rounds):
        order = ARMS[index % len(ARMS):] + ARMS[:index % len(ARMS)]
        results = {name: arms[name].run(pages) for name in order}
        rates = {name: r["pages"] / r["seconds"] for name, r in results.items()}
        rounds.append({"order": list(order), "results": results, "pages_per_s": rates})
        print(f"round {index + 1}: " + ", ".join(f"{n} {rates[n]:.3f} pages/s" for n in ARMS), flush=True)
    return report_of(rounds, options, replicas, threads_each, len(pages))


def report_of(rounds: list[dict], options, replicas: int, threads_each: int, pages: int) -> dict:
    def stage_means(arm: str) -> dict:
        timings = [t for r in rounds for t in r["results"][arm]["timings"]]
        if not timings:
            return {}
        means = {k: round(statistics.mean(t.get(k, 0.0) for t in timings), 1) for k in STAGES}
        return means | {"batch_size": round(statistics.mean(t["batch"] for t in timings), 2)}

    return {
        "benchmark": "bench", "commit": commit(), "machine": machine(),
        "settings": {"rounds": options.rounds, "devset_pages": pages, "service": options.url or "make run defaults",
                     "ocr_replicas": replicas, "engine_threads_per_replica": threads_each,
                     "bare_threads": replicas * threads_each, "target_c4_over_bare": TARGET},
        "pages_per_s": {arm: summary([r["pages_per_s"][arm] for r in rounds]) for arm in ARMS},
        "over_bare": {arm: summary([r["pages_per_s"][arm] / r["pages_per_s"]["bare"] for r in rounds])
                      for arm in ARMS[1:]},
        "failed": {arm: sum(r["results"][arm]["failed"] for r in rounds) for arm in ARMS},
        "stage_ms_per_page": {arm: stage_means(arm) for arm in ARMS[1:]},
        "rounds": [{"order": r["order"], "pages_per_s": r["pages_per_s"],
                    "results": {a: {k: v for k, v in res.items() if k != "timings"} for a, res in r["results"].items()}}
                   for r in rounds],
    }


def render(report: dict) -> str:
    settings = report["settings"]

    def cell(stats: dict, digits: int = 3) -> str:
        return spread_cell(stats, digits)

    lines = [
        f"Service against the bare engine on {settings['devset_pages']} devset pages, `{report['commit']}`, "
        f"{settings['rounds']} interleaved rounds, {report['machine']['cpus']} CPUs; bare engine with "
        f"{settings['bare_threads']} threads = {settings['ocr_replicas']} OCR replicas x "
        f"{settings['engine_threads_per_replica']} (median, min-max):",
        "",
        "| arm | pages/s | x bare | failed |",
        "|---|---|---|---|",
    ]
    for arm, rate in report["pages_per_s"].items():
        ratio = report["over_bare"].get(arm)
        lines.append(f"| {arm} | {cell(rate)} | {cell(ratio, 2) if ratio else '1'} | {report['failed'][arm]} |")
    lines += ["", "Mean ms per page in the service, by stage (`engine_per_page` = a batch's engine time / its pages):",
              "", "| arm | " + " | ".join(STAGES) + " | pages per batch |", "|---" * (len(STAGES) + 2) + "|"]
    for arm, means in report["stage_ms_per_page"].items():
        if means:
            lines.append(f"| {arm} | " + " | ".join(f"{means[k]:.0f}" for k in STAGES) + f" | {means['batch_size']} |")
    ratio = report["over_bare"]["service_c4"]["median"]
    lines += ["", f"service c=4 / bare: **{ratio:.2f}x** (target >= {settings['target_c4_over_bare']:.1f}x)."]
    return "\n".join(lines)


def passed(report: dict) -> bool:
    return report["over_bare"]["service_c4"]["median"] >= report["settings"]["target_c4_over_bare"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url")
    add_report_options(parser, "bench.json")
    options = parser.parse_args()

    def run() -> dict:
        if options.url:
            return measure(options, options.url)
        with local_service() as url:
            return measure(options, url)

    return measure_or_render(options, run, render, passed)


if __name__ == "__main__":
    sys.exit(main())
