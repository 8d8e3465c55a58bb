"""The GPU benchmark: one command, start to finish in under 8 minutes on one GPU.

    python load/gpu_bench.py                # full-size GOT-OCR2 (about 580M parameters), random weights
    python load/gpu_bench.py --tiny         # the tiny checkpoint: a smoke test of this script on any machine

Prints:
  1. engine alone: pages/s and latency at batch 1, 4, 8 and 16, in bf16 and fp32, with peak
     memory and mean GPU utilisation (NVML) during each run;
  2. through Serve: 1 OCR replica with the whole GPU against 4 replicas at num_gpus 0.25.
Random weights never emit the end token, so every page generates exactly --new-tokens
tokens: the figures measure speed, not reading.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import local_service  # noqa: E402


class UtilisationSampler:
    """Mean GPU utilisation over a block, sampled through NVML every 50 ms (None without NVML)."""

    def __enter__(self):
        from app.telemetry import gpu_snapshot

        self._snapshot, self._samples, self._stop = gpu_snapshot, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.05):
            snapshot = self._snapshot("0")  # the bench process drives physical GPU 0
            if snapshot:
                self._samples.append(snapshot["utilisation_pct"])

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.mean = statistics.mean(self._samples) if self._samples else None


def engine_table(model_dir: Path, batches: list[int], dtypes: list[str], new_tokens: int, device: str) -> list[str]:
    import torch

    from app.config import Settings
    from app.engines import build_engine
    from app.synthetic import render_text_page

    page = np.asarray(render_text_page([f"Benchmark line {i} with some text" for i in range(30)], width=1240, font_size=28))
    rows = []
    for dtype in dtypes:
        settings = Settings(engine="vlm", model_dir=str(model_dir), device=device,
                            ocr_num_gpus=1 if device == "cuda" else 0,
                            vlm={"max_new_tokens": new_tokens, "dtype": dtype, "verify_weights": "off"})
        engine = build_engine(settings, threads=4)
        engine.load()
        engine.infer([page])  # warm-up: kernels, allocator
        for batch in batches:
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            with UtilisationSampler() as sampler:
                started = time.perf_counter()
                results = engine.infer([page] * batch)
                seconds = time.perf_counter() - started
            failed = sum(isinstance(r, Exception) for r in results)
            peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
            util = f"{sampler.mean:.0f}" if sampler.mean is not None else "n/a"
            rows.append(f"{dtype:>9} {batch:>6} {batch / seconds:>9.2f} {seconds * 1000:>11.0f} {peak:>9.2f} {util:>6} {failed:>7}")
            print(rows[-1], flush=True)
        del engine
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def serve_rows(model_dir: Path, new_tokens: int, requests: int, concurrency: int, gpu: bool) -> list[str]:
    from app.synthetic import png_bytes, render_text_page

    image = png_bytes(render_text_page([f"Serve benchmark line {i}" for i in range(20)], width=1240, font_size=28))
    rows = []
    for replicas, share in ((1, 1.0), (4, 0.25)):
        args = {
            "engine": "vlm", "model_dir": str(model_dir), "ocr_replicas": replicas, "ocr_num_cpus": 1,
            "ocr_num_gpus": share if gpu else 0,
            "vlm": {"max_new_tokens": new_tokens, "verify_weights": "off", "warmup_max_batch": 16},
            "batching": {"max_batch_size": 16, "batch_wait_timeout_s": 0.02},
        }
        with local_service(args, num_cpus=8) as url, httpx.Client(base_url=url, timeout=600) as client:
            def send(_):
                t = time.perf_counter()
                response = client.post("/v1/ocr", files={"file": ("p.png", image, "image/png")})
                return time.perf_counter() - t, response.status_code

            send(None)
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                results = list(pool.map(send, range(requests)))
            seconds = time.perf_counter() - started
        ok = sum(1 for _, status in results if status == 200)
        p50 = statistics.median(latency for latency, _ in results) * 1000
        rows.append(f"{replicas:>8} {share if gpu else 0:>9} {ok / seconds:>9.2f} {p50:>9.0f} {requests - ok:>7}")
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny random model: check the script runs")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    options = parser.parse_args()

    import torch

    from app.tools.tiny_vlm import build_got_ocr2

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    model_dir = build_got_ocr2(Path(tempfile.mkdtemp()) / "got", size="tiny" if options.tiny else "full")
    print(f"device={device} model={'tiny' if options.tiny else 'full'} built in {time.perf_counter() - started:.0f}s")
    dtypes = ["bfloat16", "float32"] if device == "cuda" else ["float32"]
    print(f"\n{'dtype':>9} {'batch':>6} {'pages/s':>9} {'latency ms':>11} {'peak GiB':>9} {'util%':>6} {'failed':>7}")
    engine_table(model_dir, [1, 4, 8, 16], dtypes, options.new_tokens, device)
    print(f"\n{'replicas':>8} {'num_gpus':>9} {'pages/s':>9} {'p50 ms':>9} {'failed':>7}")
    serve_rows(model_dir, options.new_tokens, options.requests, options.concurrency, gpu=device == "cuda")
    print(f"\ntotal {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
