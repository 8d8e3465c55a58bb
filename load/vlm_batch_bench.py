"""Pages per second through the service with the vlm engine at batch 1 against batch 8, in one run.

    python load/vlm_batch_bench.py [--model-dir DIR] [--requests 32] [--concurrency 8] [--max-new-tokens 32]

Without --model-dir it builds the tiny random-weight GOT-OCR2 checkpoint in a temporary
directory (CPU, offline). Each configuration is deployed fresh on a local Ray instance
and sent the same requests at the same concurrency.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import local_service  # noqa: E402


def measure(url: str, image: bytes, requests: int, concurrency: int) -> dict:
    def send(_):
        started = time.perf_counter()
        response = client.post("/v1/ocr", files={"file": ("p.png", image, "image/png")})
        response.raise_for_status()
        return time.perf_counter() - started, response.json()["pages"][0]["batch"]["size"]

    with httpx.Client(base_url=url, timeout=600) as client:
        send(None)  # warm the path
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(send, range(requests)))
        seconds = time.perf_counter() - started
    return {
        "pages_per_s": requests / seconds,
        "p50_ms": statistics.median(r[0] for r in results) * 1000,
        "mean_batch": statistics.mean(r[1] for r in results),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    options = parser.parse_args()

    from app.synthetic import png_bytes, render_text_page
    from app.tools.tiny_vlm import build_got_ocr2

    model_dir = options.model_dir or build_got_ocr2(Path(tempfile.mkdtemp()) / "tiny-got")
    image = png_bytes(render_text_page(["Batch benchmark page", "0123456789"]))
    rows = {}
    for batch in (1, 8):
        args = {
            "engine": "vlm", "model_dir": str(model_dir), "ocr_replicas": 1, "ocr_num_cpus": 1,
            "vlm": {"max_new_tokens": options.max_new_tokens, "verify_weights": "off"},
            "batching": {"max_batch_size": batch, "batch_wait_timeout_s": 0.05},
        }
        with local_service(args) as url:
            rows[batch] = measure(url, image, options.requests, options.concurrency)
    print(f"\n{'max_batch_size':>14} {'pages/s':>9} {'p50 ms':>8} {'mean batch':>11}")
    for batch, row in rows.items():
        print(f"{batch:>14} {row['pages_per_s']:>9.2f} {row['p50_ms']:>8.0f} {row['mean_batch']:>11.2f}")
    print(f"\nbatch 8 / batch 1 = {rows[8]['pages_per_s'] / rows[1]['pages_per_s']:.2f}x "
          f"({options.requests} requests at concurrency {options.concurrency}, {options.max_new_tokens} new tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
