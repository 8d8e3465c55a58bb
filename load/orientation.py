"""Pages that arrive turned, through the service over HTTP, on the devset (issue 14).

    python load/orientation.py [--manifest PATH] [--url URL] [--rounds 3]
    python load/orientation.py --render load/results/orientation.json

1. Reading. Each devset image, decoded with its EXIF turn applied and shrunk to the engine's
   size, is sent as a PNG upright and turned 90, 180 and 270 degrees clockwise, with the
   service's default `orientation: auto`. The original files are also sent as they are, with
   `orientation=auto` and with `orientation=off` (the service as it was before). Every arm reads
   every image, the arms alternating image by image. Reported per language group: CER per arm,
   and how many pages came back with the rotation that makes them upright.
2. Cost. The CPU the orientation step adds to an upright page, measured in this process on the
   Preprocessor's own code (app.orientation.upright.Orienter, the settings' models): the
   devset's upright pages at the engine's size, CPU time of the process per page (every thread),
   over --rounds rounds after one warm-up pass; the mean and p95 of each round, median (min-max)
   over rounds.

Passes when, in every language group, each turned angle's CER is within 0.01 of the upright
PNG's, and the originals with `auto` are no worse than --reference (the service's CER before
this work: load/results/accuracy_e743004.json, load/accuracy.py's report from before issue 14,
kept apart so that a later accuracy run does not move the bar) by more than 0.002.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
import json

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.accuracy import score  # noqa: E402
from load.clients import Upload, closed_loop  # noqa: E402
from load.common import (  # noqa: E402
    DEFAULT_MANIFEST,
    ROOT,
    Sample,
    add_report_options,
    commit,
    load_devset,
    local_service,
    machine,
    measure_or_render,
    percentile,
    spread_cell,
    summary,
)

TURNS = (0, 90, 180, 270)  # clockwise turn given to the upright page before it is sent
ARMS = [f"png_{turn}" for turn in TURNS] + ["original_auto", "original_off"]
TURN_TOLERANCE = 0.01
UPRIGHT_TOLERANCE = 0.002


def engine_side() -> int:
    from app.config import Settings
    from app.engines import input_budget

    return input_budget(Settings()).max_side


def upright_pixels(sample: Sample, side: int) -> np.ndarray:
    """The page as the service's decoder hands it on: EXIF turn applied, shrunk to the engine's
    budget by the service's own resize (the finder sees the same pixels from the file and from
    the PNG made of this)."""
    from app.config import Settings
    from app.engines import input_budget
    from app.page_size import fit_to_budget

    image = ImageOps.exif_transpose(Image.open(sample.path)).convert("RGB")
    return np.asarray(fit_to_budget(image, side, input_budget(Settings()).max_pixels)[0])


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def requests_for(sample: Sample, side: int) -> dict:
    """arm -> (bytes, content type, query): what each arm sends for this image."""
    from app.orientation.geometry import turn

    upright = upright_pixels(sample, side)
    sent = {f"png_{angle}": (png(turn(upright, angle)), "image/png", {}) for angle in TURNS}
    original = sample.path.read_bytes()
    sent["original_auto"] = (original, sample.content_type, {"orientation": "auto"})
    sent["original_off"] = (original, sample.content_type, {"orientation": "off"})
    return sent


def read_all(url: str, samples: list[Sample], side: int) -> dict:
    """arm -> one entry per sample, in order: text, rotation, confidence, the stage's ms, or the error."""
    jobs = [(index, arm, Upload(data, content_type, params=params)) for index, sample in enumerate(samples)
            for arm, (data, content_type, params) in requests_for(sample, side).items()]
    results: dict = {arm: [None] * len(samples) for arm in ARMS}
    answers, _ = closed_loop(url, [upload for _, _, upload in jobs], 2)  # two at a time: the two OCR replicas
    for (index, arm, _), answer in zip(jobs, answers):
        if not answer.ok:
            results[arm][index] = {"status": answer.status, "error": answer.error, "text": ""}
            continue
        [page] = answer.body["pages"]
        results[arm][index] = {"status": 200, "text": page["text"], "rotation": page["rotation"],
                               "confidence": page["rotation_confidence"],
                               "orientation_ms": page["timings_ms"].get("orientation")}
    return results


def accuracy(samples: list[Sample], read: dict) -> dict:
    by_arm = {}
    for arm in ARMS:
        by_arm[arm] = {lang: round(stats["cer"], 5) for lang, stats in
                       score(samples, [entry["text"] for entry in read[arm]]).items()}
    found = {}
    for angle in TURNS:
        want = (360 - angle) % 360
        right = Counter()
        for sample, entry in zip(samples, read[f"png_{angle}"]):
            right[sample.lang] += entry.get("rotation") == want
            right["all"] += entry.get("rotation") == want
        found[f"png_{angle}"] = dict(right)
    return {"cer": by_arm, "found": found,
            "failed": {arm: sum(entry["status"] != 200 for entry in read[arm]) for arm in ARMS}}


def cpu_cost(samples: list[Sample], side: int, rounds: int) -> dict:
    """Per round: mean and p95 CPU ms per upright page of the Preprocessor's orientation step."""
    from app.config import Settings
    from app.orientation.upright import Orienter

    orienter = Orienter(Settings().orientation, Settings().orientation_min_share)
    pages = [upright_pixels(sample, side) for sample in samples]
    looks = Counter(orienter.upright(page, None)[1].look for page in pages)  # warm-up pass
    means, p95s = [], []
    for _ in range(rounds):
        spent = []
        for page in pages:
            started = time.process_time()
            orienter.upright(page, None)
            spent.append(1000 * (time.process_time() - started))
        means.append(statistics.fmean(spent))
        p95s.append(percentile(list(spent), 0.95))
    return {"mean_ms": summary(means), "p95_ms": summary(p95s), "looks": dict(looks)}


def relative(path: str) -> str:
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(resolved)


def verdicts(report: dict, reference: dict) -> dict:
    cer = report["reading"]["cer"]
    turned = {lang: max(abs(cer[f"png_{angle}"][lang] - cer["png_0"][lang]) for angle in TURNS[1:])
              for lang in cer["png_0"]}
    upright = {lang: cer["original_auto"][lang] - reference[lang]["cer"] for lang in reference if lang in cer["original_auto"]}
    return {"turned_max_abs_dcer": turned, "upright_dcer_vs_reference": upright,
            "passed": all(v <= TURN_TOLERANCE for v in turned.values())
            and all(v <= UPRIGHT_TOLERANCE for v in upright.values())
            and not any(report["reading"]["failed"].values())}


def measure(options) -> dict:
    samples = load_devset(options.manifest)
    side = engine_side()
    reference_report = json.loads(Path(options.reference).read_text())
    cost = cpu_cost(samples, side, options.rounds)
    print(f"orientation CPU per upright page: mean {spread_cell(cost['mean_ms'])} ms", flush=True)
    started = time.perf_counter()
    if options.url:
        read = read_all(options.url, samples, side)
    else:
        with local_service() as url:
            read = read_all(url, samples, side)
    report = {
        "benchmark": "orientation", "commit": commit(), "machine": machine(),
        "settings": {"manifest": str(options.manifest), "images": len(samples), "engine_side": side,
                     "rounds": options.rounds, "service": options.url or "make run defaults",
                     "reference": f"{relative(options.reference)} ({reference_report['commit']})",
                     "read_s": round(time.perf_counter() - started, 1)},
        "groups": dict(Counter(sample.lang for sample in samples)),
        "reading": accuracy(samples, read), "cpu": cost, "pages": read,
    }
    report["verdicts"] = verdicts(report, reference_report["service"])
    return report


def render(report: dict) -> str:
    settings, reading, groups = report["settings"], report["reading"], report["groups"]
    langs = sorted(groups) + ["all"]
    cer = reading["cer"]
    lines = [f"Rotated devset pages over HTTP, `{report['commit']}`, {settings['images']} images, "
             f"{report['machine']['cpus']} CPUs: CER per language group (NFKC, case and whitespace "
             "normalised, pooled), and pages whose rotation came back right:", "",
             "| sent | " + " | ".join(f"CER {lang}" for lang in langs) + " | rotation right | failed |",
             "|---|" + "---|" * len(langs) + "---|---|"]
    labels = {f"png_{angle}": f"PNG turned {angle}°" for angle in TURNS}
    labels.update({"original_auto": "original file, auto", "original_off": "original file, `orientation=off`"})
    total = sum(groups.values())
    for arm in ARMS:
        right = f"{reading['found'][arm].get('all', 0)}/{total}" if arm in reading["found"] else "-"
        lines.append(f"| {labels[arm]} | " + " | ".join(f"{cer[arm][lang]:.4f}" for lang in langs)
                     + f" | {right} | {reading['failed'][arm]} |")
    verdict = report["verdicts"]
    cost = report["cpu"]
    lines += ["", "Largest |CER turned - CER upright| per group: "
              + ", ".join(f"{lang} {value:.4f}" for lang, value in sorted(verdict["turned_max_abs_dcer"].items()))
              + f" (limit {TURN_TOLERANCE}). Originals with `auto` against {settings['reference']}: "
              + ", ".join(f"{lang} {value:+.4f}" for lang, value in sorted(verdict["upright_dcer_vs_reference"].items()))
              + f" (limit +{UPRIGHT_TOLERANCE}). " + ("PASS" if verdict["passed"] else "FAIL"), "",
              f"CPU the orientation step adds to an upright page (in process, {settings['rounds']} rounds over the "
              f"{settings['images']} upright pages at {settings['engine_side']} px; median (min-max) over rounds): "
              f"mean **{spread_cell(cost['mean_ms'])} ms**, p95 {spread_cell(cost['p95_ms'])} ms. The look that settled each "
              "upright page: " + ", ".join(f"{look} {count}" for look, count in sorted(cost["looks"].items())) + "."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--url", help="measure a running service instead of starting one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", default=str(ROOT / "load" / "results" / "accuracy_e743004.json"),
                        help="a load/accuracy.py report: its service CER is the upright bar")
    add_report_options(parser, "orientation.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, lambda report: report["verdicts"]["passed"])


if __name__ == "__main__":
    sys.exit(main())
