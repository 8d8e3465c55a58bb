"""Document structure and PDF text: what they cost and what they keep.

    python load/structure.py [--url URL] [--rounds 3] [--report load/results/structure.json]
    python load/structure.py --render load/results/structure.json

- cost: the StructureModel's layout and table milliseconds per page, in this process on one thread
  (as a replica runs them), over the devset's pages and report pages drawn with a table;
- throughput: pages/s over HTTP with structure=auto against structure=off, the same pages (the devset's
  pages and the drawn report pages), two clients, the arms interleaved over rounds after one warm-up
  round each; 503s and failures counted;
- nothing lost: on every devset image read with structure=auto, the lines of the regions are the page's
  lines, each once;
- pdf text: a born-digital PDF (app/testkit/born_digital.py) read from its layer (pdf_text=auto) against
  forced OCR (pdf_text=ocr) of the same pages, pages/s, interleaved likewise, and whether the layer's
  text was exact.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop, tally  # noqa: E402
from load.common import (DEFAULT_MANIFEST, add_report_options, commit, load_devset, local_service,  # noqa: E402
                         machine, measure_or_render, spread_cell, summary)

TABLE_PAGES = 6


def report_pages() -> list[tuple[str, bytes, str]]:
    from app.testkit.tables import table_page

    pages = []
    for seed in range(TABLE_PAGES):
        out = io.BytesIO()
        table_page(seed).image.save(out, format="PNG")
        pages.append((f"report-{seed}.png", out.getvalue(), "image/png"))
    return pages


def devset_pages() -> list[tuple[str, bytes, str]]:
    return [(s.path.name, s.path.read_bytes(), s.content_type) for s in load_devset(DEFAULT_MANIFEST, "page")]


def cost() -> dict:
    import numpy as np
    from PIL import Image

    from app.structure.deployment import StructureReader
    from app.settings.structure import StructureSettings

    reader = StructureReader(StructureSettings(threads=1))
    rows = {"layout": [], "tables": [], "tables_on_table_pages": []}
    for name, data, _ in devset_pages() + report_pages():
        image = Image.open(io.BytesIO(data)).convert("RGB")
        image.thumbnail((2000, 2000))  # the ppocr engine's input size
        rgb = np.asarray(image)
        reader.read(rgb)  # warm
        found = reader.read(rgb)
        rows["layout"].append(found.timings_ms["layout"])
        rows["tables"].append(found.timings_ms["tables"])
        if found.tables:
            rows["tables_on_table_pages"].append(found.timings_ms["tables"])
    return {name: summary(values) for name, values in rows.items() if values}


def throughput(url: str, pages: list, arms: dict, rounds: int, concurrency: int = 2) -> dict:
    """Each arm's pages/s per round (after a warm-up round each), interleaved; 503s and failures summed."""
    results = {arm: {"pages_per_s": [], "answers": Counter()} for arm in arms}
    for warm in (True,) + (False,) * rounds:
        for arm, params in arms.items():
            uploads = [Upload(data, kind, name, params=params) for name, data, kind in pages]
            answers, seconds = closed_loop(url, uploads, concurrency, timeout_s=600)
            if warm:
                continue
            read = sum(len(a.body["pages"]) for a in answers if a.ok)
            results[arm]["pages_per_s"].append(read / seconds)
            results[arm]["answers"].update(tally(answers))
    return {arm: {"pages_per_s": summary(r["pages_per_s"]), **dict(r["answers"])} for arm, r in results.items()}


def nothing_lost(url: str) -> dict:
    samples = load_devset(DEFAULT_MANIFEST)
    uploads = [Upload(s.path.read_bytes(), s.content_type, s.path.name, params={"structure": "auto"}) for s in samples]
    answers, _ = closed_loop(url, uploads, 1, timeout_s=600)
    checked, lost, regions = 0, [], Counter()
    for sample, answer in zip(samples, answers):
        if not answer.ok:
            lost.append(f"{sample.path.name}: HTTP {answer.status}")
            continue
        for page in answer.body["pages"]:
            checked += 1
            regions.update(r["type"] for r in page["regions"])
            by_line: dict = {}
            for block in page["blocks"]:
                by_line.setdefault(block["line"], []).append(block["text"])
            lines = Counter(" ".join(p for p in parts if p) for parts in by_line.values())
            held = Counter(line for r in page["regions"] for line in r["text"].split("\n") if r["text"])
            if lines != held:
                lost.append(sample.path.name)
    return {"pages": checked, "pages_with_a_line_lost_or_doubled": lost, "region_types": dict(regions)}


def pdf_text(url: str, rounds: int) -> dict:
    from app.testkit.born_digital import born_digital_pdf

    document, truth = born_digital_pdf(6)
    pages = [("statement.pdf", document, "application/pdf")]
    speed = throughput(url, pages, {"layer (pdf_text=auto)": {"pdf_text": "auto"},
                                    "forced OCR (pdf_text=ocr)": {"pdf_text": "ocr"}}, rounds, concurrency=1)
    [answer], _ = closed_loop(url, [Upload(document, "application/pdf", "statement.pdf")], 1)
    exact = answer.ok and all(
        [line for line in page["text"].split("\n") if line.strip()] == _expected(drawn) and
        page["text_source"] == "pdf_text" for page, drawn in zip(answer.body["pages"], truth))
    return {"pages": len(truth), "arms": speed, "layer_text_exact": exact}


def _expected(page: dict) -> list[str]:
    return ([page["title"]] + page["columns"][0] + page["columns"][1] + [" ".join(r) for r in page["table"]]
            + [page["footer"]])


def measure(options) -> dict:
    started = time.time()
    report = {"benchmark": "structure", "commit": commit(), "machine": machine(),
              "settings": {"rounds": options.rounds, "concurrency": 2, "table_pages": TABLE_PAGES,
                           "service": options.url or "local, defaults (2 ppocr replicas)"},
              "cost_ms": cost()}

    def over(url: str) -> None:
        pages = devset_pages() + report_pages()
        report["throughput"] = throughput(url, pages, {"structure=auto": {"structure": "auto"},
                                                       "structure=off": {"structure": "off"}}, options.rounds)
        report["nothing_lost"] = nothing_lost(url)
        report["pdf_text"] = pdf_text(url, options.rounds)

    if options.url:
        over(options.url)
    else:
        with local_service({}) as url:
            over(url)
    report["seconds"] = round(time.time() - started)
    return report


def render(report: dict) -> str:
    cost_ms, speed, lost, layer = report["cost_ms"], report["throughput"], report["nothing_lost"], report["pdf_text"]
    lines = [f"Structure and PDF text, commit {report['commit']}, {report['machine']['cpus']} CPUs "
             f"(median, min-max over {report['settings']['rounds']} interleaved rounds).", "",
             "| what | figure |", "|---|---|",
             f"| layout, ms per page (in process, 1 thread) | {spread_cell(cost_ms['layout'])} |",
             f"| tables, ms per page with a table (SLANet on each table region) | "
             f"{spread_cell(cost_ms.get('tables_on_table_pages'))} |",
             f"| tables, ms per page over all pages | {spread_cell(cost_ms['tables'])} |"]
    for arm, row in speed.items():
        lines.append(f"| pages/s, {arm} (HTTP, 2 clients) | {spread_cell(row['pages_per_s'], 3)}; "
                     f"{row.get('503', 0)} x 503, {row.get('failed', 0)} failed |")
    for arm, row in layer["arms"].items():
        lines.append(f"| born-digital PDF ({layer['pages']} pages), pages/s, {arm} | "
                     f"{spread_cell(row['pages_per_s'], 2)}; {row.get('503', 0)} x 503, {row.get('failed', 0)} failed |")
    lines.append(f"| born-digital PDF read from its layer exactly | {'yes' if layer['layer_text_exact'] else 'NO'} |")
    lines.append(f"| devset pages with a line lost or doubled, structure=auto | "
                 f"{len(lost['pages_with_a_line_lost_or_doubled'])} of {lost['pages']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running service (default: start one here, as make run does)")
    parser.add_argument("--rounds", type=int, default=3)
    add_report_options(parser, "structure.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render,
                             lambda r: not r["nothing_lost"]["pages_with_a_line_lost_or_doubled"]
                             and r["pdf_text"]["layer_text_exact"])


if __name__ == "__main__":
    sys.exit(main())
