"""The figures serve_config.yaml sizes the fleet from, read off the raw benchmark reports.

    python load/fleet_sizing.py            # print them, with the commands that measured them
    python load/fleet_sizing.py --render   # the README's table

- pages/s per Preprocessor CPU, 150 dpi PDF pages: 1000 / the CPU milliseconds a page costs
  outside the engine (load/results/cpu_cost.json, the working tree's arm with the shipped
  `orientation: auto`, whose finder runs in the Preprocessor; the figure also
  holds the page's hops and the OCR replica's side, so it is a floor on the Preprocessor's rate);
- pages/s per OCR replica on a CPU: the service's pages/s at concurrency 4 divided by its OCR
  replicas, each on one thread (load/results/bench.json, devset pages with PP-OCR);
- pages/s per OCR replica on a GPU: unmeasured until load/results/gpu_bench.json exists.
tests/test_fleet_sizing.py holds serve_config.yaml's comments to these figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "load" / "results"
# An ESTIMATE until load/results/gpu_bench.json exists: the pages/s one GPU OCR replica is assumed to
# read, from which serve_config.yaml's ceilings are sized (960 replicas x 2 = about 2000 pages/s).
ASSUMED_GPU_PAGES_PER_REPLICA = 2.0


def figures() -> dict:
    cpu_cost = json.loads((RESULTS / "cpu_cost.json").read_text())
    bench = json.loads((RESULTS / "bench.json").read_text())
    pdf = cpu_cost["sets"]["pdf_20_pages_150dpi"]
    pdf_ms = pdf.get("after_orientation_ms", pdf["after_ms"])["median"]  # the shipped orientation: auto
    service = bench["pages_per_s"]["service_c4"]["median"]
    replicas = bench["settings"]["ocr_replicas"]
    gpu = RESULTS / "gpu_bench.json"
    return {
        "preprocessor_pages_per_cpu": round(1000.0 / pdf_ms),
        "preprocessor_source": f"load/results/cpu_cost.json ({cpu_cost['commit']}): {pdf_ms:.1f} ms CPU per "
                               "150 dpi PDF page, `orientation: auto`; `python load/cpu_cost.py --before 54acd8c`",
        "ocr_cpu_pages_per_replica": round(service / replicas, 2),
        "ocr_cpu_source": f"load/results/bench.json ({bench['commit']}): {service:.3f} pages/s at concurrency 4 "
                          f"over {replicas} one-thread PP-OCR replicas; `python load/bench.py`",
        "ocr_gpu_pages_per_replica": None if not gpu.exists() else "see load/results/gpu_bench.json",
    }


def render(values: dict) -> str:
    gpu = values["ocr_gpu_pages_per_replica"] or "not run: no GPU available"
    return "\n".join([
        "| figure serve_config.yaml is sized from | value | measured by |",
        "|---|---|---|",
        f"| pages/s per Preprocessor CPU, 150 dpi PDF | {values['preprocessor_pages_per_cpu']} "
        f"| {values['preprocessor_source']} |",
        f"| pages/s per OCR replica, PP-OCR on one CPU thread | {values['ocr_cpu_pages_per_replica']} "
        f"| {values['ocr_cpu_source']} |",
        f"| pages/s per OCR replica on a GPU (the fleet's engine) | {gpu} | `python load/gpu_bench.py --engine-only` (docs/measurements.md, \"The GPU benchmark\") |",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", action="store_true", help="print the README table")
    options = parser.parse_args()
    values = figures()
    print(render(values) if options.render else json.dumps(values, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
