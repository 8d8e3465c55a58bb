"""The `vllm` engine against the `vlm` engine, through the whole service, on this machine's CPU.

    .venv-vllm/bin/python load/vllm_bench.py [--rounds 3] [--pages 24] [--manifest PATH]
        [--report load/results/vllm_bench.json]
    python load/vllm_bench.py --render load/results/vllm_bench.json

One Ray instance in this process (the vLLM environment: it has both engines) serves two
applications of the same tiny random Qwen2.5-VL (app/tools/tiny_vlm.py), `vllm` at /vllm and
`vlm` at /vlm, each one OCR replica with the same CPU threads, fp32. The requests are the
devset's pages through /v1/chat/completions, each forced (`min_tokens` = `max_tokens`,
`ignore_eos`) to write its own page's output length from load/devset_output_lengths.json (an
ESTIMATE from the ground truth's characters): random weights then cost what real pages of those
lengths cost. Four arms, each engine at concurrency 1 and 8 (closed loop). Every arm is warmed
alike (one untimed pass of 8 pages at its concurrency), then the arms take turns, their order
rotating by round. Per round and arm: pages/s, tokens/s, p50 and p95 latency, and the answers
that were not 200 (503s apart). The ratio vllm/vlm is taken within a round.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop, tally  # noqa: E402
from load.common import (DEFAULT_MANIFEST, add_report_options, commit, load_devset, machine,  # noqa: E402
                         measure_or_render, percentile, spread_cell, summary)

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = ROOT / "load" / "devset_output_lengths.json"
ENGINES = ("vllm", "vlm")
CONCURRENCY = (1, 8)
THREADS = 2
CAP = 512  # tokens a page may write: above the devset's longest estimate


def arms() -> list[tuple[str, int]]:
    return [(engine, c) for c in CONCURRENCY for engine in ENGINES]


def app_args(engine: str, model_dir: str) -> dict:
    common = {"engine": engine, "model_dir": model_dir, "engine_threads": THREADS, "ocr_replicas": 1,
              "ocr_num_cpus": 1, "orientation": "off"}
    if engine == "vllm":
        return {**common, "vllm": {"dtype": "float32", "max_tokens": CAP, "max_num_seqs": 8, "max_model_len": 1024,
                                   "enforce_eager": True}}
    return {**common, "vlm": {"dtype": "float32", "max_new_tokens": CAP}}


def requests(manifest: Path, pages: int) -> list[tuple[Upload, int]]:
    """`pages` requests: the devset's pages in turn (it has 9), each with its own estimated length."""
    lengths = {row["image"]: row["tokens_estimate"] for row in json.loads(LENGTHS.read_text())["pages"]}
    chosen = []
    for sample in load_devset(manifest, kind="page"):
        key = str(sample.path.relative_to(manifest.parent))
        if key in lengths and sample.content_type.startswith("image/"):
            chosen.append((sample, min(CAP, lengths[key])))
    made = [(chat_upload(sample.path.read_bytes(), sample.content_type, length), length) for sample, length in chosen]
    return [made[i % len(made)] for i in range(pages)]


def chat_upload(data: bytes, content_type: str, length: int) -> Upload:
    url = f"data:{content_type};base64,{base64.b64encode(data).decode()}"
    body = {"model": "MODEL", "max_tokens": length, "min_tokens": length, "ignore_eos": True,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}
    return Upload(json.dumps(body).encode(), "application/json", multipart=False)


def one_pass(url: str, prefix: str, model: str, work: list[tuple[Upload, int]], concurrency: int) -> dict:
    uploads = [Upload(upload.data.replace(b'"MODEL"', json.dumps(model).encode()), upload.content_type,
                      multipart=False) for upload, _ in work]
    answers, wall = closed_loop(url, uploads, concurrency, path=f"{prefix}/v1/chat/completions")
    ok = [answer for answer in answers if answer.ok]
    tokens = sum(answer.body["usage"]["completion_tokens"] for answer in ok)
    expected = sum(length for (_, length), answer in zip(work, answers) if answer.ok)
    return {"pages": len(answers), "wall_s": round(wall, 3), "pages_per_s": len(ok) / wall,
            "tokens_per_s": tokens / wall, "tokens_as_forced": tokens == expected,
            "p50_s": percentile([a.seconds for a in answers], 0.5), "p95_s": percentile([a.seconds for a in answers], 0.95),
            "errors": sorted({f"{a.status} {a.code}: {a.error[:160]}" for a in answers if not a.ok}), **tally(answers)}


def measure(options) -> dict:
    import httpx
    import ray
    from ray import serve

    from app.ops.weights import write_manifest
    from app.serve.builder import build_app
    from app.serve.deploy import deploy
    from app.testkit.ports import free_port
    from app.tools.tiny_vlm import build_qwen2_5_vl

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model_dir = build_qwen2_5_vl(Path(tempfile.mkdtemp(prefix="vllm-bench-")) / "tiny-qwen")
    write_manifest(model_dir)
    work = requests(Path(options.manifest), options.pages)
    port = free_port()
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="ocr-vb-"))
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        for engine in ENGINES:
            deploy(build_app(app_args(engine, str(model_dir))), name=engine, route_prefix=f"/{engine}", timeout_s=600)
        url = f"http://127.0.0.1:{port}"
        models = {engine: httpx.get(f"{url}/{engine}/v1/models", timeout=60).json()["data"][0]["id"]
                  for engine in ENGINES}
        for engine, c in arms():  # warm every arm alike
            one_pass(url, f"/{engine}", models[engine], work[:8], c)
        rounds = []
        for number in range(options.rounds):
            order = arms()[number % 4:] + arms()[:number % 4]
            figures = {}
            for engine, c in order:
                figures[f"{engine}_c{c}"] = one_pass(url, f"/{engine}", models[engine], work, c)
                print(f"round {number + 1} {engine} c={c}: {figures[f'{engine}_c{c}']}", flush=True)
            rounds.append({"order": [f"{e}_c{c}" for e, c in order], "arms": figures})
    finally:
        serve.shutdown()
        ray.shutdown()
    return report(rounds, options, work)


def report(rounds: list[dict], options, work: list) -> dict:
    names = [f"{engine}_c{c}" for engine, c in arms()]
    stats = {name: {figure: summary([r["arms"][name][figure] for r in rounds])
                    for figure in ("pages_per_s", "tokens_per_s", "p50_s", "p95_s")} for name in names}
    totals = {name: {key: sum(r["arms"][name][key] for r in rounds) for key in ("ok", "503", "failed")}
              for name in names}
    ratios = {f"c{c}": summary([r["arms"][f"vllm_c{c}"]["pages_per_s"] / r["arms"][f"vlm_c{c}"]["pages_per_s"]
                                for r in rounds]) for c in CONCURRENCY}
    lengths = [length for _, length in work]
    return {"benchmark": "vllm_bench", "commit": commit(), "machine": machine(), "when": time.strftime("%Y-%m-%d"),
            "settings": {"rounds": options.rounds, "pages_per_pass": len(work), "threads": THREADS, "cap": CAP,
                         "lengths": {"min": min(lengths), "median": sorted(lengths)[len(lengths) // 2],
                                     "max": max(lengths), "source": "load/devset_output_lengths.json (an estimate)"},
                         "apps": {engine: app_args(engine, "tiny-qwen") for engine in ENGINES}},
            "rounds": rounds, "stats": stats, "totals": totals, "vllm_over_vlm": ratios,
            "all_tokens_as_forced": all(a["tokens_as_forced"] for r in rounds for a in r["arms"].values())}


def render(report: dict) -> str:
    settings = report["settings"]
    lines = [f"Tiny Qwen2.5-VL (random weights, fp32) on this machine's CPU ({report['machine']['cpus']} cores), "
             f"commit {report['commit']}, {settings['rounds']} interleaved rounds of {settings['pages_per_pass']} "
             f"requests per arm (the devset's 9 pages in turn), each forced to its estimated length ({settings['lengths']['min']}-"
             f"{settings['lengths']['max']} tokens, median {settings['lengths']['median']}). Median (min-max) "
             "over rounds.", "",
             "| engine | concurrency | pages/s | tokens/s | p50 s | p95 s | ok | 503 | failed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for engine, c in arms():
        stats, totals = report["stats"][f"{engine}_c{c}"], report["totals"][f"{engine}_c{c}"]
        lines.append(f"| {engine} | {c} | {spread_cell(stats['pages_per_s'], 2)} | {spread_cell(stats['tokens_per_s'], 0)} "
                     f"| {spread_cell(stats['p50_s'], 2)} | {spread_cell(stats['p95_s'], 2)} | {totals['ok']} "
                     f"| {totals['503']} | {totals['failed']} |")
    lines.append("")
    lines.append("vllm / vlm pages/s, within each round: " + ", ".join(
        f"c={c}: {spread_cell(report['vllm_over_vlm'][f'c{c}'], 2)}x" for c in CONCURRENCY) + ".")
    return "\n".join(lines)


def passed(report: dict) -> bool:
    failures = sum(t["503"] + t["failed"] for t in report["totals"].values())
    return failures == 0 and report["all_tokens_as_forced"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pages", type=int, default=24, help="requests per pass (the devset's pages in turn)")
    parser.add_argument("--manifest", default=str(DEFAULT_MANIFEST))
    add_report_options(parser, "vllm_bench.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, passed)


if __name__ == "__main__":
    sys.exit(main())
