"""The GPU benchmark: one command, at most 7 minutes on one H100, engine in process (no Ray).

    python load/gpu_bench.py --engine-only --report $OUT/gpu_bench.json --commit SHA   # the GPU machine
    python load/gpu_bench.py --engine-only --tiny                                     # smoke test, any machine
    python load/gpu_bench.py --engine-only --engines vlm vllm --report R.json         # where vLLM is installed
    python load/gpu_bench.py --render load/results/gpu_bench.json

Builds full-size random checkpoints on the device in bf16 (Qwen2.5-VL-3B from its published
config, GOT-OCR2 at its real size) and, per family, measures the `vlm` engine as serving runs it:
  load      build, load (device_map), first page;
  prefill   ms per page at the family's input budget, batch 1 and 8;
  decode    ms per decoding step at batch 1, 8 and 32 (forced lengths 1 and N: (t_N - t_1) / (N - 1));
  pages     pages/s and tokens/s at batch 8 and 32 with forced output lengths: `fixed` (every page the
            devset's median length) against `devset` (lengths drawn from the devset's pages), so a
            static batch pays for its longest page as in serving; arms interleaved over --repeats,
            each warmed alike, with the share of decoding steps spent on rows already done;
  profile   GPU kernel-busy time over wall time for one `devset` batch (torch.profiler), beside NVML's
            utilisation sampled during `pages`;
  probe     the warm-up probe at a 0.25 GPU share (the fleet's), then a real generate of that batch
            at the served max_new_tokens, as confirmation;
  vllm      with `--engines vlm vllm`, Qwen2.5-VL only, once the `vlm` model is freed: the `vllm`
            engine (AsyncLLM, continuous batching) on the same pages and the same forced lengths as
            `pages`, every page of a batch sent at once, so its pages/s sits beside the static batch's.
            It needs vLLM installed (the official vllm==0.32.0 wheel on a GPU node,
            cluster/requirements-gpu.txt); the lent GPU machine of the platform notes cannot take it.
The JSON report is rewritten after every step, so a run cut short keeps what it measured; a step
that would not fit in --budget-s is recorded as skipped. Random weights: the figures are speed,
never reading. Output lengths come from load/devset_output_lengths.json (an estimate of
tokens from the devset's ground-truth characters; see that file).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import add_report_options, commit, machine, spread_cell, summary  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = ROOT / "load" / "devset_output_lengths.json"
FAMILIES = ("qwen2_5_vl", "got_ocr2")


class Run:
    """The report, written after each step; the time budget every step checks first."""

    def __init__(self, path: Path, budget_s: float, header: dict):
        self.path, self.budget_s, self.started = path, budget_s, time.perf_counter()
        self.report = {**header, "families": {}, "skipped": []}

    def left_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def step(self, family: str, name: str, estimate_s: float, measure) -> None:
        if self.left_s() < estimate_s:
            self.report["skipped"].append(f"{family} {name}: {self.left_s():.0f}s left, needs ~{estimate_s:.0f}s")
            print(f"skip {family} {name}", flush=True)
        else:
            began = time.perf_counter()
            try:
                result = measure()
            except Exception as exc:  # one shot on a lent GPU: a failed step must not lose the others
                result = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            result["seconds"] = round(time.perf_counter() - began, 1)
            self.report["families"].setdefault(family, {})[name] = result
            print(f"{family} {name}: {json.dumps(result)[:300]}", flush=True)
        self.save()

    def save(self) -> None:
        self.report["seconds"] = round(time.perf_counter() - self.started, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.report, indent=2) + "\n")


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed(device: str, call) -> float:
    synchronize(device)
    started = time.perf_counter()
    call()
    synchronize(device)
    return time.perf_counter() - started


class Utilisation:
    """NVML's GPU utilisation sampled every 50 ms during a block (None without NVML)."""

    def __enter__(self):
        self.samples, self._stop = [], threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._read = lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        except Exception:
            self._read = None
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while self._read and not self._stop.wait(0.05):
            self.samples.append(self._read())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.mean_pct = statistics.mean(self.samples) if self.samples else None


def budget_page(engine):
    """The largest A4-shaped page the family takes: what serving sends it at most."""
    import numpy as np
    from PIL import Image

    from app.engines.warmup_probe import budget_page_size
    from app.synthetic import render_text_page

    width, height = budget_page_size(engine.input_budget.max_side, engine.input_budget.max_pixels)
    page = Image.new("RGB", (width, height), "white")
    page.paste(render_text_page([f"Benchmark line {i} with some words" for i in range(40)], width=width,
                                font_size=max(12, width // 45)), (0, 0))
    return np.asarray(page)


def build(family: str, tiny: bool, root: Path) -> Path:
    from app.tools.tiny_vlm import BUILDERS

    return BUILDERS[family](root / family, size="tiny" if tiny else "full")


def engine_for(model_dir: Path, device: str, max_new_tokens: int, warmup_max_batch: int):
    from app.config import Settings
    from app.engines import build_engine

    settings = Settings(engine="vlm", model_dir=str(model_dir), device=device,
                        ocr_num_gpus=1 if device == "cuda" else 0,
                        vlm={"max_new_tokens": max_new_tokens, "verify_weights": "off",
                             "warmup_max_batch": warmup_max_batch},
                        batching={"max_concurrent_batches": 1})
    engine = build_engine(settings, threads=4)
    engine.load()
    return engine


def prefill(engine, page, device: str, repeats: int) -> dict:
    import torch
    from PIL import Image

    cells = {}
    for batch in (1, 8):
        images = [Image.fromarray(page)] * batch

        def forward():
            inputs = engine.model_inputs(images)
            with torch.inference_mode():
                engine._model(**inputs, use_cache=True, logits_to_keep=1)

        forward()
        cells[str(batch)] = summary([timed(device, forward) * 1000 / batch for _ in range(repeats)])
    prompt_tokens = engine.model_inputs([Image.fromarray(page)])["input_ids"].shape[1]
    return {"ms_per_page": cells, "prompt_tokens": prompt_tokens, "page": list(page.shape[:2])}


def decode(engine, page, device: str, steps: int, repeats: int, batches: tuple) -> dict:
    cells = {}
    for batch in batches:
        pages = [page] * batch
        engine.infer(pages, output_lengths=[steps] * batch)  # warm this batch size
        per_step = []
        for _ in range(repeats):
            short = timed(device, lambda: engine.infer(pages, output_lengths=[1] * batch))
            long = timed(device, lambda: engine.infer(pages, output_lengths=[steps] * batch))
            per_step.append((long - short) * 1000 / (steps - 1))
        cells[str(batch)] = summary(per_step)
    return {"ms_per_step": cells, "steps": steps}


def length_sets(batch: int, seed: int, cap: int) -> dict:
    lengths = json.loads(LENGTHS.read_text())["pages"]
    tokens = [row["tokens_estimate"] for row in lengths]
    if max(tokens) > cap:  # the smoke test: the same spread of lengths, shrunk to at most `cap`
        tokens = [max(1, round(t * cap / max(tokens))) for t in tokens]
    drawn = random.Random(seed).choices(tokens, k=batch)
    return {"fixed": [int(statistics.median(tokens))] * batch, "devset": drawn}


def pages_per_s(engine, page, device: str, repeats: int, batches: tuple, cap: int) -> dict:
    arms: dict = {}
    with Utilisation() as nvml:
        for batch in batches:
            sets = length_sets(batch, seed=batch, cap=cap)
            for lengths in sets.values():  # every arm warmed alike: its batch and shapes, a few steps each
                engine.infer([page] * batch, output_lengths=[min(8, n) for n in lengths])
            for index in range(repeats):
                for name in (list(sets) if index % 2 == 0 else list(reversed(sets))):
                    lengths, results = sets[name], []
                    seconds = timed(device, lambda: results.extend(engine.infer([page] * batch, output_lengths=lengths)))
                    # Tokens as the engine counted them, each page's end token left out.
                    tokens = sum(r.generated_tokens - 1 for r in results if not isinstance(r, Exception))
                    arm = arms.setdefault(f"{name} x{batch}", {"lengths": lengths, "runs": []})
                    arm["runs"].append({"seconds": seconds, "pages_per_s": batch / seconds, "tokens": tokens,
                                        "tokens_per_s": tokens / seconds,
                                        "failed": sum(isinstance(r, Exception) for r in results)})
    for arm in arms.values():
        lengths = arm["lengths"]
        arm["pages_per_s"] = summary([run["pages_per_s"] for run in arm["runs"]])
        arm["tokens_per_s"] = summary([run["tokens_per_s"] for run in arm["runs"]])
        arm["idle_row_steps"] = round(1 - sum(lengths) / (len(lengths) * max(lengths)), 3)  # rows already done
    return {"arms": arms, "nvml_util_pct": nvml.mean_pct}


def kernel_busy(engine, page, device: str, cap: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    lengths = length_sets(8, seed=8, cap=cap)["devset"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        wall = timed(device, lambda: engine.infer([page] * 8, output_lengths=lengths))
    kernel_us = sum(event.self_device_time_total for event in prof.key_averages()
                    if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA)
    return {"wall_s": wall, "kernel_s": kernel_us / 1e6 if device == "cuda" else None,
            "busy_fraction": kernel_us / 1e6 / wall if device == "cuda" else None}


def probe(engine, page, device: str, share: float, served_tokens: int) -> dict:
    """The warm-up probe at `share`, then a real generate at that batch and served length."""
    import torch

    from app.engines.vlm_device import cap_gpu_memory

    capped = cap_gpu_memory(share, engine._options.gpu_memory_margin_mib) if device == "cuda" else {}
    try:
        pages, _ = engine._probe_batch()
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        results = engine.infer([page] * pages, output_lengths=[served_tokens - 1] * pages)
        seconds = time.perf_counter() - started
        failed = [type(r).__name__ for r in results if isinstance(r, Exception)]
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
        return {"share": share, **capped, "probed_batch": pages, "served_max_new_tokens": served_tokens,
                "confirm": {"pages": len(results), "failed": failed, "seconds": seconds, "peak_gib": peak}}
    finally:
        if device == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0)


def vllm_pages(model_dir: Path, device: str, repeats: int, batches: tuple, cap: int, tiny: bool) -> dict:
    """The `vllm` engine on `pages`' lengths: each batch's pages sent together, vLLM batching them."""
    import asyncio

    from app.config import Settings
    from app.engines import build_engine
    from app.schemas import Generation

    options = {"verify_weights": "off", "max_tokens": 4096, "max_num_seqs": max(batches), "max_model_len": 4096,
               "dtype": "float32" if tiny else "auto", "enforce_eager": tiny}
    engine = build_engine(Settings(engine="vllm", model_dir=str(model_dir), vllm=options), threads=4)
    began = time.perf_counter()
    engine.load()
    engine.warmup()
    load_s = time.perf_counter() - began
    page = budget_page(engine)

    def run(lengths: list[int]) -> list:
        async def together():  # made on the engine's loop, as the replica's pages are
            return await asyncio.gather(*(engine._read(page, Generation.exactly(n)) for n in lengths))

        return engine._loop.call(together())

    arms: dict = {}
    try:
        for batch in batches:
            sets = length_sets(batch, seed=batch, cap=cap)
            for lengths in sets.values():  # warmed as the vlm arms are
                run([min(8, n) for n in lengths])
            for index in range(repeats):
                for name in (list(sets) if index % 2 == 0 else list(reversed(sets))):
                    lengths, results = sets[name], []
                    seconds = timed(device, lambda: results.extend(run(lengths)))
                    tokens = sum(r.generated_tokens for r in results)  # exactly n each: no end token
                    arm = arms.setdefault(f"{name} x{batch}", {"lengths": lengths, "runs": []})
                    arm["runs"].append({"seconds": seconds, "pages_per_s": batch / seconds, "tokens": tokens,
                                        "tokens_per_s": tokens / seconds})
    finally:
        engine.shutdown()
    for arm in arms.values():
        arm["pages_per_s"] = summary([run["pages_per_s"] for run in arm["runs"]])
        arm["tokens_per_s"] = summary([run["tokens_per_s"] for run in arm["runs"]])
    return {"arms": arms, "load_s": load_s, "device": engine.info.device,
            "gpu_memory_utilization": engine.info.details.get("gpu_memory_utilization")}


def measure(options) -> dict:
    import torch
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tiny = options.tiny
    served = 24 if tiny else options.served_max_new_tokens
    steps, repeats = (8, 2) if tiny else (64, options.repeats)
    # The smoke test's shapes: the same steps on small batches and lengths (a CPU runs them in seconds).
    decode_batches, page_batches, cap = ((1, 4, 8), (4, 8), 16) if tiny else ((1, 8, 32), (8, 32), 32768)
    header = {"benchmark": "gpu_bench", "commit": options.commit or commit(), "machine": machine(),
              "device": torch.cuda.get_device_name(0) if device == "cuda" else "CPU",
              "capability": list(torch.cuda.get_device_capability(0)) if device == "cuda" else None,
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "python": sys.version.split()[0]},
              "settings": {"model": "tiny" if tiny else "full", "families": options.families, "repeats": repeats,
                           "decode_steps": steps, "decode_batches": decode_batches, "page_batches": page_batches,
                           "length_cap": cap, "served_max_new_tokens": served, "probe_share": 0.25,
                           "budget_s": options.budget_s, "lengths": str(LENGTHS.relative_to(ROOT)),
                           "engines": options.engines}}
    run = Run(Path(options.report), options.budget_s, header)
    run.save()
    root = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    scale = 0.05 if tiny else 1.0  # step estimates (s) on an H100, full size
    for family in options.families:
        state: dict = {}

        def load():
            began = time.perf_counter()
            model_dir = build(family, tiny, root)
            built = time.perf_counter() - began
            engine = engine_for(model_dir, device, served, 4 if tiny else 32)
            page = budget_page(engine)
            first = timed(device, lambda: engine.infer([page], output_lengths=[8]))
            state.update(engine=engine, page=page)
            return {"build_s": built, "load_s": time.perf_counter() - began - built - first, "first_page_s": first,
                    "dtype": engine.info.details["dtype"], "attention": engine.info.details.get("attention"),
                    "parameters": sum(p.numel() for p in engine._model.parameters()),
                    "budget": {"max_side": engine.input_budget.max_side, "max_pixels": engine.input_budget.max_pixels}}

        run.step(family, "load", 60 * scale, load)
        if "engine" not in state:
            continue
        engine, page = state["engine"], state["page"]
        run.step(family, "prefill", 5 * scale, lambda: prefill(engine, page, device, repeats))
        run.step(family, "decode", 25 * scale, lambda: decode(engine, page, device, steps, repeats, decode_batches))
        run.step(family, "pages", 90 * scale, lambda: pages_per_s(engine, page, device, repeats, page_batches, cap))
        run.step(family, "profile", 10 * scale, lambda: kernel_busy(engine, page, device, cap))
        run.step(family, "probe", 90 * scale, lambda: probe(engine, page, device, 0.25, served))
        state.clear()
        engine = page = None  # the model goes before the next family's is built
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        if "vllm" in options.engines and family == "qwen2_5_vl":
            model_dir = root / family
            run.step(family, "vllm", 120 * scale,
                     lambda: vllm_pages(model_dir, device, repeats, page_batches, cap, tiny))
    return run.report


def render(report: dict) -> str:
    s = report["settings"]
    lines = [f"{report['device']} (torch {report['versions']['torch']}, transformers "
             f"{report['versions']['transformers']}), random `{s['model']}` weights, `{report['commit']}`, "
             f"{s['repeats']} interleaved repeats (median, min-max):", ""]
    batches = [str(b) for b in s["decode_batches"]]
    lines += ["| family | dtype | prefill ms/page b1 | b8 | " + " | ".join(f"decode ms/step b{b}" for b in batches) +
              " | kernel-busy | 0.25-share probe batch | confirmed at max_new_tokens |",
              "|---|---|---|---|" + "---|" * len(batches) + "---|---|---|"]
    for family, steps in report["families"].items():
        pre = steps.get("prefill", {}).get("ms_per_page", {})
        dec = steps.get("decode", {}).get("ms_per_step", {})
        decode_cells = " | ".join(spread_cell(dec.get(b), 2) for b in batches)
        busy = steps.get("profile", {}).get("busy_fraction")
        prb = steps.get("probe")
        confirm = "n/a" if not prb else (f"{prb['confirm']['pages']} pages, {len(prb['confirm']['failed'])} failed, "
                                         f"{prb['confirm']['seconds']:.0f} s")
        lines.append(f"| {family} | {steps.get('load', {}).get('dtype', 'n/a')} | {spread_cell(pre.get('1'))} "
                     f"| {spread_cell(pre.get('8'))} | {decode_cells} | {'n/a' if busy is None else f'{busy:.0%}'} "
                     f"| {prb['probed_batch'] if prb else 'n/a'} | {confirm} |")
    lines += ["", "| family | lengths x batch | pages/s | tokens/s | steps on rows already done |", "|---|---|---|---|---|"]
    for family, steps in report["families"].items():
        for name, arm in steps.get("pages", {}).get("arms", {}).items():
            lines.append(f"| {family} | {name} | {spread_cell(arm['pages_per_s'], 2)} | "
                         f"{spread_cell(arm['tokens_per_s'], 0)} | {arm['idle_row_steps']:.0%} |")
    vllm_rows = [(family, name, arm, steps.get("pages", {}).get("arms", {}).get(name))
                 for family, steps in report["families"].items()
                 for name, arm in steps.get("vllm", {}).get("arms", {}).items()]
    if vllm_rows:
        lines += ["", "The `vllm` engine on the same pages and lengths, each batch's pages sent at once:", "",
                  "| family | lengths x pages | vllm pages/s | tokens/s | vlm pages/s (above) | vllm / vlm |",
                  "|---|---|---|---|---|---|"]
        for family, name, arm, static in vllm_rows:
            ratio = (f"{arm['pages_per_s']['median'] / static['pages_per_s']['median']:.2f}x"
                     if static else "n/a")
            lines.append(f"| {family} | {name} | {spread_cell(arm['pages_per_s'], 2)} | "
                         f"{spread_cell(arm['tokens_per_s'], 0)} | "
                         f"{spread_cell(static['pages_per_s'], 2) if static else 'n/a'} | {ratio} |")
    errors = [f"{family} {name}: {step['error']}" for family, steps in report["families"].items()
              for name, step in steps.items() if isinstance(step, dict) and "error" in step]
    if errors:
        lines += ["", "Failed steps: " + "; ".join(error[:300] for error in errors)]
    if report.get("skipped"):
        lines += ["", "Skipped for time: " + "; ".join(report["skipped"])]
    return "\n".join(lines)


# Characters per token of a Qwen2-style byte-level BPE: an estimate (no real tokenizer is to be had
# offline here): about 3.2 for Latin text with digits (Qwen splits digits one by one), 1.4 for CJK.
CHARS_PER_TOKEN = {"latin": 3.2, "cjk": 1.4}


def write_lengths(manifest: Path) -> None:
    """load/devset_output_lengths.json from the devset's ground truth (its pages, not its lines)."""
    import math

    pages = []
    for line in manifest.read_text().splitlines():
        row = json.loads(line) if line.strip() else None
        if row and row["kind"] == "page":
            cjk = sum(1 for c in row["text"] if "\u3000" <= c <= "\u9fff" or "\uff00" <= c <= "\uffef")
            other = len(row["text"]) - cjk
            tokens = math.ceil(cjk / CHARS_PER_TOKEN["cjk"] + other / CHARS_PER_TOKEN["latin"])
            pages.append({"image": row["image"], "lang": row["lang"], "chars": len(row["text"]),
                          "tokens_estimate": tokens})
    LENGTHS.parent.mkdir(parents=True, exist_ok=True)
    LENGTHS.write_text(json.dumps({
        "what": "output lengths of the devset's pages, in tokens: an ESTIMATE from ground-truth characters",
        "chars_per_token": CHARS_PER_TOKEN, "made_by": "python load/gpu_bench.py --write-lengths "
        "../shared/eval/devset/manifest.jsonl", "pages": pages}, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine-only", action="store_true", required=False,
                        help="the engine in this process, no Ray (the only mode: the GPU machine has no Ray)")
    parser.add_argument("--tiny", action="store_true", help="tiny random models: check the script runs")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats of each timed cell")
    parser.add_argument("--engines", nargs="+", choices=("vlm", "vllm"), default=["vlm"],
                        help="vllm: also the vllm engine's step (needs vLLM installed)")
    parser.add_argument("--served-max-new-tokens", type=int, default=2048, help="serve_config.yaml's vlm.max_new_tokens")
    parser.add_argument("--budget-s", type=float, default=390, help="steps that would end past this are skipped")
    parser.add_argument("--commit", help="the commit measured (the GPU machine's copy of the tree has no .git)")
    parser.add_argument("--write-lengths", metavar="MANIFEST", type=Path, help="write " + str(LENGTHS.name) +
                        " from a devset manifest and exit")
    add_report_options(parser, "gpu_bench.json")
    options = parser.parse_args()
    if options.write_lengths:
        write_lengths(options.write_lengths)
        return 0
    if options.render:
        print(render(json.loads(Path(options.render).read_text())))
        return 0
    if not options.engine_only:
        parser.error("--engine-only is required: the benchmark runs the engine in process, without Ray")
    if options.tiny and options.report == parser.get_default("report"):
        options.report = str(ROOT / "load" / "out" / "gpu_bench_tiny.json")  # not a GPU figure
    print(render(measure(options)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
