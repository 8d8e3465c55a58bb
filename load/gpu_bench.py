"""The GPU benchmark: one command, start to finish in under 8 minutes on one GPU.

    python load/gpu_bench.py                # full-size GOT-OCR2 (about 580M parameters), random weights
    python load/gpu_bench.py --tiny         # the tiny checkpoint: a smoke test of this script on any machine
    python load/gpu_bench.py --render load/results/gpu_bench.json

Measures, and writes to --report (default load/results/gpu_bench.json, with the commit, the
machine, the GPU's name and the settings):
  1. engine alone: pages/s, generated tokens/s and latency at batch 1, 4, 8 and 16, in bf16
     and fp32, each cell --repeats times after one warm-up call (median, min-max), with peak
     memory and mean GPU utilisation (NVML) during each cell;
  2. through Serve: 1 OCR replica with the whole GPU against 4 replicas at num_gpus 0.25,
     alternated over --rounds rounds, each arm warmed with the same untimed requests.
Tokens are counted per page, up to its end token (EngineResult.generated_tokens), so a page
that ends early cannot inflate pages/s unseen; through Serve, pages that ended before
--new-tokens are counted beside pages/s. Random weights rarely emit the end token: the figures
measure speed, not reading.
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

from load.common import add_report_options, commit, local_service, machine, measure_or_render, spread_cell, summary  # noqa: E402


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


def engine_cells(model_dir: Path, batches: list[int], dtypes: list[str], new_tokens: int, device: str,
                 repeats: int) -> list[dict]:
    import torch

    from app.config import Settings
    from app.engines import build_engine
    from app.synthetic import render_text_page

    page = np.asarray(render_text_page([f"Benchmark line {i} with some text" for i in range(30)], width=1240, font_size=28))
    cells = []
    for dtype in dtypes:
        settings = Settings(engine="vlm", model_dir=str(model_dir), device=device,
                            ocr_num_gpus=1 if device == "cuda" else 0,
                            vlm={"max_new_tokens": new_tokens, "dtype": dtype, "verify_weights": "off"})
        engine = build_engine(settings, threads=4)
        engine.load()
        engine.infer([page])  # warm-up: kernels, allocator
        for batch in batches:
            engine.infer([page] * batch)  # each cell warmed alike: one untimed call at its batch
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            runs = []
            with UtilisationSampler() as sampler:
                for _ in range(repeats):
                    started = time.perf_counter()
                    results = engine.infer([page] * batch)
                    seconds = time.perf_counter() - started
                    ok = [r for r in results if not isinstance(r, Exception)]
                    runs.append({"seconds": seconds, "pages": len(ok), "failed": len(results) - len(ok),
                                 "tokens": sum(r.generated_tokens or 0 for r in ok),
                                 "ended_early": sum(r.finish_reason == "stop" for r in ok)})
            peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
            cell = {"dtype": dtype, "batch": batch, "runs": runs,
                    "pages_per_s": summary([r["pages"] / r["seconds"] for r in runs]),
                    "tokens_per_s": summary([r["tokens"] / r["seconds"] for r in runs]),
                    "latency_ms": summary([r["seconds"] * 1000 for r in runs]),
                    "tokens_per_page": summary([r["tokens"] / max(1, r["pages"]) for r in runs]),
                    "peak_gib": peak, "gpu_util_pct": sampler.mean,
                    "failed": sum(r["failed"] for r in runs), "ended_early": sum(r["ended_early"] for r in runs)}
            cells.append(cell)
            print(f"{dtype} batch {batch}: {cell['pages_per_s']['median']:.2f} pages/s, "
                  f"{cell['tokens_per_s']['median']:.0f} tokens/s", flush=True)
        del engine
        if device == "cuda":
            torch.cuda.empty_cache()
    return cells


def serve_arms(model_dir: Path, new_tokens: int, requests: int, concurrency: int, gpu: bool, rounds: int) -> dict:
    from app.synthetic import png_bytes, render_text_page

    image = png_bytes(render_text_page([f"Serve benchmark line {i}" for i in range(20)], width=1240, font_size=28))
    arms = {"1 x 1.0": (1, 1.0), "4 x 0.25": (4, 0.25)}
    runs: dict = {name: [] for name in arms}
    for index in range(rounds):
        for name in (list(arms) if index % 2 == 0 else list(reversed(arms))):
            replicas, share = arms[name]
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
                    ok = response.status_code == 200
                    early = ok and response.json()["pages"][0].get("finish_reason") == "stop"
                    return time.perf_counter() - t, ok, early

                with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                    list(pool.map(send, range(concurrency)))  # the same warm-up for both arms
                    started = time.perf_counter()
                    results = list(pool.map(send, range(requests)))
                seconds = time.perf_counter() - started
            ok = [r for r in results if r[1]]
            runs[name].append({"pages_per_s": len(ok) / seconds,
                               "p50_ms": statistics.median(r[0] for r in ok) * 1000 if ok else None,
                               "failed": requests - len(ok), "ended_early": sum(r[2] for r in ok)})
            print(f"round {index + 1} serve {name}: {runs[name][-1]['pages_per_s']:.2f} pages/s", flush=True)
    return {name: {"pages_per_s": summary([r["pages_per_s"] for r in arm]),
                   "p50_ms": summary([r["p50_ms"] for r in arm if r["p50_ms"] is not None]),
                   "failed": sum(r["failed"] for r in arm), "ended_early": sum(r["ended_early"] for r in arm),
                   "runs": arm} for name, arm in runs.items()}


def render(report: dict) -> str:
    settings = report["settings"]

    def cell(stats: dict, digits: int = 2) -> str:
        return spread_cell(stats, digits)

    lines = [f"{report['device']}, {settings['model']} GOT-OCR2 with random weights, {settings['new_tokens']} new "
             f"tokens at most, `{report['commit']}`; engine cells {settings['repeats']} repeats after a warm-up "
             f"call, Serve arms {settings['rounds']} alternated rounds (median, min-max):", "",
             "| dtype | batch | pages/s | tokens/s | tokens/page | latency ms | peak GiB | GPU util % | failed | ended early |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in report["engine"]:
        peak = "n/a" if c["peak_gib"] is None else f"{c['peak_gib']:.2f}"
        util = "n/a" if c["gpu_util_pct"] is None else f"{c['gpu_util_pct']:.0f}"
        lines.append(f"| {c['dtype']} | {c['batch']} | {cell(c['pages_per_s'])} | {cell(c['tokens_per_s'], 0)} "
                     f"| {cell(c['tokens_per_page'], 0)} | {cell(c['latency_ms'], 0)} | {peak} | {util} "
                     f"| {c['failed']} | {c['ended_early']} |")
    lines += ["", f"Through Serve, {settings['requests']} requests at concurrency {settings['concurrency']}:", "",
              "| OCR replicas x GPU share | pages/s | p50 ms | failed | ended early |", "|---|---|---|---|---|"]
    for name, arm in report["serve"].items():
        lines.append(f"| {name} | {cell(arm['pages_per_s'])} | {cell(arm['p50_ms'], 0)} | {arm['failed']} "
                     f"| {arm['ended_early']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny random model: check the script runs")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per engine cell")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds of the two Serve arms")
    add_report_options(parser, "gpu_bench.json")
    options = parser.parse_args()
    if options.tiny and options.report == parser.get_default("report"):
        options.report = str(Path(options.report).parent.parent / "out" / "gpu_bench_tiny.json")  # not a GPU figure

    def measure() -> dict:
        import torch

        from app.tools.tiny_vlm import build_got_ocr2

        device = "cuda" if torch.cuda.is_available() else "cpu"
        started = time.perf_counter()
        model = "tiny" if options.tiny else "full"
        model_dir = build_got_ocr2(Path(tempfile.mkdtemp()) / "got", size=model)
        print(f"device={device} model={model} built in {time.perf_counter() - started:.0f}s", flush=True)
        dtypes = ["bfloat16", "float32"] if device == "cuda" else ["float32"]
        engine = engine_cells(model_dir, [1, 4, 8, 16], dtypes, options.new_tokens, device, options.repeats)
        serve = serve_arms(model_dir, options.new_tokens, options.requests, options.concurrency,
                           gpu=device == "cuda", rounds=options.rounds)
        return {"benchmark": "gpu_bench", "commit": commit(), "machine": machine(),
                "device": torch.cuda.get_device_name(0) if device == "cuda" else "CPU",
                "settings": {"model": model, "new_tokens": options.new_tokens, "requests": options.requests,
                             "concurrency": options.concurrency, "repeats": options.repeats,
                             "rounds": options.rounds},
                "engine": engine, "serve": serve, "seconds": round(time.perf_counter() - started)}

    return measure_or_render(options, measure, render, passed=lambda report: True)


if __name__ == "__main__":
    sys.exit(main())
