"""Shared by the load scripts: the devset, a local service to measure, and the bare engine."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from app.http.proxy_guard import PROXY_GUARD_ENV
from app.testkit import ports, service

free_port = ports.free_port  # the benchmarks' free ports and local service: app/testkit, shared with the tests
local_service = service.local_service

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault(*PROXY_GUARD_ENV)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = ROOT.parent / "shared" / "eval" / "devset" / "manifest.jsonl"





def commit() -> str:
    """The commit measured, `-dirty` when the code differed from it (reports in load/results/,
    which benchmarks write one after another, are not code)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  ":(exclude)load/results"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if changed else head


def machine() -> dict:
    """What every report records of the machine it ran on."""
    return {"cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version()}


def add_report_options(parser, default_name: str) -> None:
    """--report (where the raw JSON goes) and --render (print a report's README rows and exit)."""
    parser.add_argument("--report", default=str(ROOT / "load" / "results" / default_name))
    parser.add_argument("--render", metavar="JSON", help="print the README rows of a report and exit")


def measure_or_render(options, measure: Callable[[], dict], render: Callable[[dict], str],
                      passed: Callable[[dict], bool]) -> int:
    """Render a stored report, or measure, write the raw JSON and print its rows; 1 if it did not pass."""
    if options.render:
        print(render(json.loads(Path(options.render).read_text())))
        return 0
    report = measure()
    Path(options.report).parent.mkdir(parents=True, exist_ok=True)
    Path(options.report).write_text(json.dumps(report, indent=2) + "\n")
    print(render(report))
    return 0 if passed(report) else 1

def percentile(values: list[float], q: float) -> Optional[float]:
    """The nearest-rank q-quantile (0 < q <= 1): the smallest value with at least a share q of the values at
    or below it; None for no values. Every benchmark's p50, p95 and p99 is this one, so their tables compare."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(values: list[float]) -> dict:
    """A figure over interleaved rounds: its median, its spread, and every round's value."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "all": values}


def spread_cell(stats: Optional[dict], digits: int = 1) -> str:
    """A summary() in a table: `median (min-max)`, or `none` where no round had the figure."""
    if not stats or stats.get("median") is None:
        return "none"
    return f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}-{stats['max']:.{digits}f})"


@dataclass
class Sample:
    path: Path
    text: str
    lang: str
    kind: str

    @property
    def content_type(self) -> str:
        suffix = self.path.suffix.lower().lstrip(".")
        return {"jpg": "image/jpeg", "tif": "image/tiff", "pdf": "application/pdf"}.get(suffix, f"image/{suffix}")


def load_devset(manifest: Path, kind: Optional[str] = None) -> list[Sample]:
    samples = []
    for line in manifest.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if kind is None or row["kind"] == kind:
                samples.append(Sample(manifest.parent / row["image"], row["text"], row["lang"], row["kind"]))
    return samples


class BareEngine:
    """The engine alone in this process: same decoding and layout code, no Serve, no resizing."""

    def __init__(self, threads: Optional[int] = None):
        from app.config import Settings
        from app.engines import build_engine

        self.settings = Settings()
        self.engine = build_engine(self.settings, threads=threads or os.cpu_count() or 1)
        self.engine.load()
        self.engine.warmup()

    def read(self, data: bytes, content_type: str) -> str:
        import numpy as np

        from app.sandbox.documents import load_pages
        from app.pipeline.postprocess import build_page_result
        from app.schemas import PageOCR, PagePayload

        texts = []
        for page in load_pages(data, content_type, None, self.settings.limits):
            image = page.image
            rgb = np.asarray(image.convert("RGB"))
            [result] = self.engine.infer([rgb])
            payload = PagePayload("bare", 0, page.page_number, None, image.width, image.height,
                                  image.width, image.height, 1.0, page.dpi)
            texts.append(build_page_result(PageOCR(payload, result, 1, payload.pixels))["text"])
        return "\n\n".join(texts)
