"""Upright pages stay upright; turned pages are still found (issue 29), in-process.

    python load/orientation_upright.py [--mixed 26] [--forms 4]
    python load/orientation_upright.py --render load/results/orientation_upright.json

The Preprocessor's own orientation step (app.orientation.upright.Orienter, `orientation: auto`,
the settings' `orientation_min_share`) on:
- the upright test set: synthetic product boxes whose text runs several ways (a title and copy
  across, two to four labels and stickers turned 90, 180 or 270) and forms with nothing turned,
  drawn with the bundled font from fixed seeds (app/testkit/upright_pages.py), and the devset's
  pages as they are upright, at the engine's size (as load/orientation.py sends them);
- the devset's pages turned 90, 180 and 270 degrees.
Per set: pages, pages turned (and, for the upright set, pages the looks alone would have turned:
the turn the lines did not back), pages found right, and CPU ms per page (this process, every
thread). Passes when at most --max-turned upright pages are turned and every turned page is found.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import DEFAULT_MANIFEST, add_report_options, commit, load_devset, machine, measure_or_render  # noqa: E402
from load.orientation import engine_side, upright_pixels  # noqa: E402


def pages(options) -> list[tuple[str, str, int, np.ndarray]]:
    """(set, name, the turn that makes it upright, pixels)."""
    from app.orientation.geometry import turn
    from app.page_size import fit_to_budget
    from app.testkit.upright_pages import upright_set

    side = engine_side()
    found = []
    for name, image in upright_set(options.mixed, options.forms):
        kind = "synthetic_mixed" if name.startswith("product_box") else "synthetic_forms"
        found.append((kind, name, 0, np.asarray(fit_to_budget(image, side, side * side)[0])))
    for sample in load_devset(options.manifest):
        upright = upright_pixels(sample, side)
        found.append(("devset_upright", sample.path.name, 0, upright))
        for angle in (90, 180, 270):
            found.append((f"devset_turned_{angle}", sample.path.name, angle, turn(upright, (360 - angle) % 360)))
    return found


def measure(options) -> dict:
    from app.config import Settings
    from app.orientation.upright import Orienter

    settings = Settings()
    orienter = Orienter("auto", settings.orientation_min_share)
    orienter.upright(np.asarray(upright_pixels(load_devset(options.manifest)[0], engine_side())), None)  # warm
    rows = []
    for kind, name, want, pixels in pages(options):
        started = time.process_time()
        _, turned = orienter.upright(pixels, None)
        cpu_ms = 1000 * (time.process_time() - started)
        rows.append({"set": kind, "page": name, "want": want, "rotation": turned.rotation, "look": turned.look,
                     "proposed": turned.proposed, "confidence": turned.confidence, "cpu_ms": round(cpu_ms, 1)})
        print(f"{kind:18s} {name[-32:]:32s} want={want:3d} got={turned.rotation:3d} {turned.look:6s} "
              f"proposed={turned.proposed:3d} {cpu_ms:6.0f} ms", flush=True)
    sets = {}
    for row in rows:
        entry = sets.setdefault(row["set"], {"pages": 0, "turned": 0, "looks_alone_turned": 0, "right": 0, "cpu_ms": []})
        entry["pages"] += 1
        entry["turned"] += row["rotation"] != 0
        entry["looks_alone_turned"] += (row["rotation"] or row["proposed"]) != 0
        entry["right"] += row["rotation"] == row["want"]
        entry["cpu_ms"].append(row["cpu_ms"])
    for entry in sets.values():
        spent = entry.pop("cpu_ms")
        entry["cpu_ms_mean"] = round(sum(spent) / len(spent), 1)
        entry["cpu_ms_max"] = round(max(spent), 1)
    upright = [row for row in rows if row["want"] == 0]
    turned = [row for row in rows if row["want"] != 0]
    return {
        "benchmark": "orientation_upright", "commit": commit(), "machine": machine(),
        "settings": {"mixed": options.mixed, "forms": options.forms, "manifest": str(options.manifest),
                     "orientation_min_share": settings.orientation_min_share, "engine_side": engine_side(),
                     "max_turned": options.max_turned},
        "sets": sets, "pages": rows,
        "upright_pages": len(upright), "upright_mixed": sum(r["set"] == "synthetic_mixed" for r in upright),
        "upright_turned": sum(r["rotation"] != 0 for r in upright),
        "turned_pages": len(turned), "turned_found": sum(r["rotation"] == r["want"] for r in turned),
    }


def passed(report: dict) -> bool:
    return (report["upright_turned"] <= report["settings"]["max_turned"]
            and report["turned_found"] == report["turned_pages"])


def render(report: dict) -> str:
    settings = report["settings"]
    lines = [f"Orientation on upright pages whose text runs several ways, and on turned pages, `{report['commit']}`, "
             f"in-process (the Preprocessor's step, `orientation: auto`, `orientation_min_share` "
             f"{settings['orientation_min_share']}, pages at {settings['engine_side']} px):", "",
             "| set | pages | turned | the looks alone would have turned | found right | CPU ms/page mean | max |",
             "|---|---|---|---|---|---|---|"]
    for name, entry in report["sets"].items():
        lines.append(f"| {name} | {entry['pages']} | {entry['turned']} | {entry['looks_alone_turned']} | "
                     f"{entry['right']} | {entry['cpu_ms_mean']:.0f} | {entry['cpu_ms_max']:.0f} |")
    lines += ["", f"upright pages turned: {report['upright_turned']} of {report['upright_pages']} "
              f"({report['upright_mixed']} with text several ways; at most {settings['max_turned']}); "
              f"turned pages found: {report['turned_found']} of {report['turned_pages']}: "
              f"{'PASS' if passed(report) else 'FAIL'}"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--mixed", type=int, default=26)
    parser.add_argument("--forms", type=int, default=4)
    parser.add_argument("--max-turned", type=int, default=1)
    add_report_options(parser, "orientation_upright.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, passed)


if __name__ == "__main__":
    sys.exit(main())
