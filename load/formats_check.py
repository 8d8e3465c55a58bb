"""The archive formats over the devset, held to outside references: poppler's pdftotext reads each searchable
PDF back (CER against the JSON text after whitespace normalisation, and every JSON word's box against the
box pdftotext gives it), hocr-spec and app/testkit/hocr_check.py (classes, nesting and boxes, which
hocr-spec lets pass) check each hOCR, and the shipped ALTO 4.4 schema each ALTO.

The CER bound is on `pdftotext -raw`, which reads the text in the order the layer draws it (the JSON's
reading order); pdftotext's default mode orders it by its own layout analysis, and that CER is reported
beside it (a receipt's label and amount columns are read in another order, not other characters).

    python load/formats_check.py [--manifest ../shared/eval/devset/manifest.jsonl]
    python load/formats_check.py --render load/results/formats_check.json

One local service (`make run`'s defaults). Each image is posted four times: json, pdf, hocr, alto.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from load.common import DEFAULT_MANIFEST, add_report_options, commit, load_devset, machine, measure_or_render  # noqa: E402
from load.metrics import cer  # noqa: E402

MAX_CER, MAX_OFFSET = 0.01, 0.02  # issue 28's bounds


def check(http: httpx.Client, sample) -> dict:
    from hocr_spec import HocrValidator

    from app.formats.validate import alto_schema
    from app.testkit.hocr_check import hocr_problems
    from app.testkit.poppler import pdftotext, word_offsets

    data = sample.path.read_bytes()

    def get(form: str) -> httpx.Response:
        return http.post("/v1/ocr", content=data, params={"format": form}, headers={"content-type": sample.content_type})

    answers = {form: get(form) for form in ("json", "pdf", "hocr", "alto")}
    statuses = {form: answer.status_code for form, answer in answers.items()}
    row = {"image": str(sample.path.relative_to(sample.path.parents[1])), "lang": sample.lang, "statuses": statuses}
    if set(statuses.values()) != {200}:
        return row
    body = answers["json"].json()
    edits, length = cer(body["text"], pdftotext(answers["pdf"].content, raw=True))
    poppler_edits, _ = cer(body["text"], pdftotext(answers["pdf"].content))
    offsets = [off for page in body["pages"] for _, off in word_offsets(page, answers["pdf"].content)] \
        if len(body["pages"]) == 1 else []
    hocr = HocrValidator("standard").validate(io.BytesIO(answers["hocr"].content), parse_strict=True)
    structure = hocr_problems(answers["hocr"].content)
    try:
        alto_schema().validate(io.BytesIO(answers["alto"].content))
        alto_error = None
    except Exception as exc:  # noqa: BLE001 - the schema's complaint is the finding
        alto_error = str(exc)[:300]
    found = [off for off in offsets if off is not None]
    row.update({"cer": edits / max(length, 1), "cer_poppler_order": poppler_edits / max(length, 1),
                "chars": length, "words": len(offsets), "words_past_bound": sum(off > MAX_OFFSET for off in found),
                "words_not_found": len(offsets) - len(found), "max_offset": max(found, default=None),
                "hocr_valid": hocr.is_valid() and not structure, "hocr_problems": structure[:5],
                "alto_valid": alto_error is None, "alto_error": alto_error})
    return row


def measure(manifest: Path) -> dict:
    from app.testkit.service import local_service

    samples = load_devset(manifest)
    with local_service() as url, httpx.Client(base_url=url, timeout=600) as http:
        rows = []
        for sample in samples:
            rows.append(check(http, sample))
            print(rows[-1], flush=True)
    return {"commit": commit(), "machine": machine(), "settings": {"manifest": str(manifest), "engine": "ppocr"},
            "rows": rows}


def passed(report: dict) -> bool:
    rows = report["rows"]
    return all(set(r["statuses"].values()) == {200} and r["cer"] <= MAX_CER and r["hocr_valid"] and r["alto_valid"]
               and not r["words_not_found"] for r in rows)


def render(report: dict) -> str:
    lines = ["| image | lang | CER, pdftotext -raw | CER, pdftotext's own order | words | not found | "
             "past 2% | largest word offset | hOCR | ALTO |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "cer" not in r:
            lines.append(f"| {r['image']} | {r['lang']} | answers {r['statuses']} | | | | | | | |")
            continue
        offset = "n/a" if r["max_offset"] is None else f"{r['max_offset'] * 100:.2f}%"
        lines.append(f"| {r['image']} | {r['lang']} | {r['cer']:.4f} | {r['cer_poppler_order']:.4f} | {r['words']} | "
                     f"{r['words_not_found']} | {r['words_past_bound']} | {offset} | "
                     f"{'valid' if r['hocr_valid'] else 'INVALID'} | {'valid' if r['alto_valid'] else 'INVALID'} |")
    rows = [r for r in report["rows"] if "cer" in r]
    worst = max((r["cer"] for r in rows), default=float("nan"))
    words = sum(r["words"] for r in rows)
    past = sum(r["words_past_bound"] for r in rows)
    lines += ["", f"{len(report['rows'])} images, commit {report['commit']}: worst CER (pdftotext -raw, the layer's "
                  f"own order) {worst:.4f} against the bound {MAX_CER}; {past} of {words} words more than 2% of the "
                  f"page off their JSON box; every word found, hOCR and ALTO valid, CER within its bound: "
                  f"{'yes' if passed(report) else 'NO'}."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    add_report_options(parser, "formats_check.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options.manifest), render, passed)


if __name__ == "__main__":
    sys.exit(main())
