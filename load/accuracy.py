"""Accuracy over HTTP against the bare engine in-process, on the devset, per language.

    python load/accuracy.py [--manifest PATH] [--url http://host:8000]

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

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import DEFAULT_MANIFEST, BareEngine, Sample, load_devset, local_service  # noqa: E402
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
    texts = []
    with httpx.Client(base_url=url, timeout=300) as client:
        for sample in samples:
            response = client.post("/v1/ocr", files={"file": (sample.path.name, sample.path.read_bytes(), sample.content_type)})
            response.raise_for_status()
            texts.append(response.json()["text"])
    return texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--url", help="measure a running service instead of starting one")
    parser.add_argument("--tolerance", type=float, default=0.005)
    options = parser.parse_args()
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
    print(f"\n{'lang':6} {'n':>3} {'CER bare':>9} {'CER svc':>9} {'dCER':>8} {'F1 bare':>8} {'F1 svc':>8}")
    worst = 0.0
    for lang in sorted(bare_scores, key=lambda k: (k == "all", k)):
        b, s = bare_scores[lang], service_scores[lang]
        delta = s["cer"] - b["cer"]
        worst = max(worst, abs(delta))
        print(f"{lang:6} {b['n']:>3} {b['cer']:>9.4f} {s['cer']:>9.4f} {delta:>+8.4f} {b['f1']:>8.4f} {s['f1']:>8.4f}")
    verdict = "PASS" if worst <= options.tolerance else "FAIL"
    print(f"\nlargest |dCER| = {worst:.4f} (tolerance {options.tolerance}): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
