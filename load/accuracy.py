"""Accuracy over HTTP against the bare engine in-process, on the devset, per language.

    python load/accuracy.py [--manifest PATH] [--url http://host:8000] [--report load/results/accuracy.json]
    python load/accuracy.py --render load/results/accuracy.json

Without --url it starts the service locally with the default settings (what `make run`
serves). Prints CER (NFKC, case- and whitespace-normalised, pooled over each language)
and an order-tolerant character F1 for both, and exits 1 if the service's CER differs
from the bare engine's by more than --tolerance on any language.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop  # noqa: E402
from load.common import (  # noqa: E402
    DEFAULT_MANIFEST,
    BareEngine,
    Sample,
    add_report_options,
    commit,
    load_devset,
    local_service,
    machine,
    measure_or_render,
)
from load.metrics import cer, char_f1  # noqa: E402


def score(samples: list[Sample], texts: list[str]) -> dict:
    by_lang: dict = defaultdict(lambda: {"edits": 0, "chars": 0, "f1": [], "n": 0})
    for sample, text in zip(samples, texts):
        edits, chars = cer(sample.text, text)
        for key in (sample.lang, "all"):
            entry = by_lang[key]
            entry["edits"] += edits
            entry["chars"] += chars
            entry["f1"].append(char_f1(sample.text, text))
            entry["n"] += 1
    return {
        lang: {"n": e["n"], "cer": e["edits"] / max(1, e["chars"]), "f1": sum(e["f1"]) / len(e["f1"])}
        for lang, e in by_lang.items()
    }


def read_over_http(url: str, samples: list[Sample]) -> list[str]:
    uploads = [Upload(s.path.read_bytes(), s.content_type, s.path.name) for s in samples]
    answers, _ = closed_loop(url, uploads, 1, timeout_s=300)  # one at a time, as the figures were made
    for sample, answer in zip(samples, answers):
        if not answer.ok:
            raise RuntimeError(f"{sample.path.name}: HTTP {answer.status} {answer.error}")
    return [answer.body["text"] for answer in answers]


def measure(options) -> dict:
    samples = load_devset(options.manifest)
    started = time.perf_counter()
    bare = BareEngine()
    bare_texts = [bare.read(s.path.read_bytes(), s.content_type) for s in samples]
    print(f"bare engine: {len(samples)} images in {time.perf_counter() - started:.1f}s", flush=True)
    if options.url:
        service_texts = read_over_http(options.url, samples)
    else:
        with local_service() as url:
            service_texts = read_over_http(url, samples)
    bare_scores, service_scores = score(samples, bare_texts), score(samples, service_texts)
    return {
        "benchmark": "accuracy", "commit": commit(), "machine": machine(),
        "settings": {"manifest": str(options.manifest), "images": len(samples), "tolerance": options.tolerance,
                     "service": options.url or "make run defaults"},
        "bare": bare_scores, "service": service_scores,
        "largest_abs_dcer": max(abs(service_scores[k]["cer"] - bare_scores[k]["cer"]) for k in bare_scores),
    }


def render(report: dict) -> str:
    settings = report["settings"]
    lines = [f"Accuracy on the {settings['images']} devset images, `{report['commit']}`: CER after NFKC, case and "
             "whitespace normalisation (pooled per language) and order-tolerant character F1:", "",
             "| lang | images | CER bare | CER service | dCER | F1 bare | F1 service |", "|---|---|---|---|---|---|---|"]
    bare, service = report["bare"], report["service"]
    for lang in sorted(bare, key=lambda k: (k == "all", k)):
        b, s = bare[lang], service[lang]
        lines.append(f"| {lang} | {b['n']} | {b['cer']:.4f} | {s['cer']:.4f} | {s['cer'] - b['cer']:+.4f} "
                     f"| {b['f1']:.4f} | {s['f1']:.4f} |")
    verdict = "PASS" if passed(report) else "FAIL"
    lines += ["", f"largest |dCER| = {report['largest_abs_dcer']:.4f} (tolerance {settings['tolerance']}): {verdict}"]
    return "\n".join(lines)


def passed(report: dict) -> bool:
    return report["largest_abs_dcer"] <= report["settings"]["tolerance"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--url", help="measure a running service instead of starting one")
    parser.add_argument("--tolerance", type=float, default=0.005)
    add_report_options(parser, "accuracy.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, passed)


if __name__ == "__main__":
    sys.exit(main())
