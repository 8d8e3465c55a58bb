"""Pages per second through the service with the vlm engine at batch 1 against batch 8.

    python load/vlm_batch_bench.py [--model-dir DIR] [--rounds 3] [--requests 32] [--concurrency 8]
        [--max-new-tokens 32] [--report load/results/vlm_batch_bench.json]
    python load/vlm_batch_bench.py --render load/results/vlm_batch_bench.json

Without --model-dir it builds the tiny random-weight GOT-OCR2 checkpoint in a temporary
directory (CPU, offline). Each arm (max_batch_size 1 or 8) is deployed fresh on a local Ray
instance per round, warmed with the same 4 untimed requests, and sent the same requests at the
same concurrency; the arms alternate their order by round. Failures (any answer but 200) are
counted beside the figures, never retried.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop  # noqa: E402
from load.common import add_report_options, commit, local_service, machine, measure_or_render, percentile, spread_cell, summary  # noqa: E402

BATCHES = (1, 8)
WARM = 4


def measure_arm(url: str, image: bytes, requests: int, concurrency: int) -> dict:
    upload = Upload(image, "image/png", "p.png")
    closed_loop(url, [upload] * WARM, concurrency)  # the same warm-up for every arm
    answers, seconds = closed_loop(url, [upload] * requests, concurrency)
    ok = [answer for answer in answers if answer.ok]
    latencies = sorted(answer.seconds for answer in ok)
    return {
        "pages_per_s": len(ok) / seconds,
        "p50_ms": statistics.median(latencies) * 1000 if ok else None,
        "p95_ms": percentile(latencies, 0.95) * 1000 if ok else None,
        "mean_batch": statistics.mean(answer.body["pages"][0]["batch"]["size"] for answer in ok) if ok else None,
        "failed": len(answers) - len(ok),
    }


def measure(options) -> dict:
    from app.synthetic import png_bytes, render_text_page
    from app.tools.tiny_vlm import build_got_ocr2

    model_dir = options.model_dir or build_got_ocr2(Path(tempfile.mkdtemp()) / "tiny-got")
    image = png_bytes(render_text_page(["Batch benchmark page", "0123456789"]))
    rounds: list[dict] = []
    for index in range(options.rounds):
        order = BATCHES if index % 2 == 0 else tuple(reversed(BATCHES))
        results = {}
        for batch in order:
            args = {
                "engine": "vlm", "model_dir": str(model_dir), "ocr_replicas": 1, "ocr_num_cpus": 1,
                "vlm": {"max_new_tokens": options.max_new_tokens, "verify_weights": "off"},
                "batching": {"max_batch_size": batch, "batch_wait_timeout_s": 0.05},
            }
            with local_service(args) as url:
                results[str(batch)] = measure_arm(url, image, options.requests, options.concurrency)
        rounds.append(results)
        print(f"round {index + 1}: " + ", ".join(f"batch {b} {r['pages_per_s']:.2f} pages/s"
                                                  for b, r in results.items()), flush=True)
    arms = {str(b): {key: summary([r[str(b)][key] for r in rounds if r[str(b)][key] is not None])
                     for key in ("pages_per_s", "p50_ms", "p95_ms", "mean_batch")} for b in BATCHES}
    for b in BATCHES:
        arms[str(b)]["failed"] = sum(r[str(b)]["failed"] for r in rounds)
    return {
        "benchmark": "vlm_batch_bench", "commit": commit(), "machine": machine(),
        "settings": {"rounds": options.rounds, "requests": options.requests, "concurrency": options.concurrency,
                     "max_new_tokens": options.max_new_tokens, "model": str(options.model_dir or "tiny GOT-OCR2"),
                     "warm_requests": WARM},
        "arms": arms,
        "batch8_over_batch1": summary([r["8"]["pages_per_s"] / r["1"]["pages_per_s"] for r in rounds]),
        "rounds": rounds,
    }


def render(report: dict) -> str:
    settings = report["settings"]

    def cell(stats: dict, digits: int = 2) -> str:
        return spread_cell(stats, digits)

    lines = [f"The `vlm` engine ({settings['model']}, CPU) through the service, `{report['commit']}`: "
             f"{settings['requests']} requests at concurrency {settings['concurrency']}, "
             f"{settings['max_new_tokens']} new tokens, {settings['rounds']} interleaved rounds (median, min-max):",
             "", "| max_batch_size | pages/s | p50 ms | p95 ms | mean batch | failed |", "|---|---|---|---|---|---|"]
    for batch, arm in report["arms"].items():
        lines.append(f"| {batch} | {cell(arm['pages_per_s'])} | {cell(arm['p50_ms'], 0)} | {cell(arm['p95_ms'], 0)} "
                     f"| {cell(arm['mean_batch'])} | {arm['failed']} |")
    lines += ["", f"batch 8 / batch 1: **{cell(report['batch8_over_batch1'])}x**."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    add_report_options(parser, "vlm_batch_bench.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, passed=lambda report: True)


if __name__ == "__main__":
    sys.exit(main())
