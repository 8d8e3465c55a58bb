"""Which of the Fraktur word vote's rules help and which hurt (issue 40 part 2), in-process.

    python load/fraktur_vote.py [--set-pages]
    python load/fraktur_vote.py --render load/results/fraktur_vote.json

Each Fraktur image of the devset (and, with --set-pages, the pages and lines of app/testkit/fraktur_pages.py)
is read once by PP-OCR and once by Tesseract's Fraktur model, at the size the service hands the engine;
the vote (app/engines/fraktur.py `combine`) is then run on those readings as shipped, and with each of its
rules switched off in turn:
- `no_long_s_fix`: a PP-OCR word that becomes a word with f or j read as s is not settled so first;
- `no_word_list`: no word is taken for a word of the German word list (so the list neither settles a
  pair nor lets Tesseract's extra words in; the long-s fix, which also asks the list, goes with it);
- `no_likeness`: where the list does not settle a pair, PP-OCR's reading stays (likeness all equal);
and `line_fallback`: where the two share fewer than half of a line's words, the whole line of the engine
with more words of the list (then the likelier spelling), instead of word by word.
CER after NFKC, case and whitespace normalisation, pooled over the images and per image; an arm whose
edits are fewer than `shipped`'s means that rule hurts here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import DEFAULT_MANIFEST, add_report_options, commit, load_devset, machine, measure_or_render  # noqa: E402
from load.fraktur import page_text  # noqa: E402
from load.metrics import cer  # noqa: E402

ARMS = ("ppocr", "shipped", "no_long_s_fix", "no_word_list", "no_likeness", "line_fallback")


def variant(words, arm: str):
    """The shipped Spelling (app/engines/fraktur.py) with one rule changed."""
    from app.engines.fraktur import Spelling

    class Variant(Spelling):
        def long_s_fix(self, word):
            return None if arm == "no_long_s_fix" else super().long_s_fix(word)

        def knows(self, word):
            return False if arm == "no_word_list" else super().knows(word)

        def likeness(self, word):
            return 0.0 if arm == "no_likeness" else super().likeness(word)

        def merge(self, ppocr: str, tesseract: str) -> str:
            if arm == "line_fallback":
                a, b = ppocr.split(), tesseract.split()
                if a and b and len(set(a) & set(b)) < len(a) / 2:
                    score = [(sum(map(self.knows, side)), sum(map(self.likeness, side)) / len(side)) for side in (a, b)]
                    return tesseract if score[1] > score[0] else ppocr
            return super().merge(ppocr, tesseract)

    return Variant(words)


def images(options) -> list[tuple[str, np.ndarray, str]]:
    from app.config import Settings
    from app.engines import input_budget
    from app.page_size import fit_to_budget
    from app.sandbox.documents import load_pages

    settings = Settings()
    budget = input_budget(settings)
    found = []
    for sample in load_devset(options.manifest):
        if sample.lang != "de":
            continue
        [page] = list(load_pages(sample.path.read_bytes(), sample.content_type, None, settings.limits))
        rgb = np.asarray(fit_to_budget(page.image.convert("RGB"), budget.max_side, budget.max_pixels)[0])
        found.append((sample.path.name, rgb, sample.text))
    if options.set_pages:
        from app.testkit.fraktur_pages import fraktur_set

        found += [(name, rgb, text) for name, _, rgb, text in fraktur_set()]
    return found


def measure(options) -> dict:
    from app.config import Settings
    from app.engines import build_engine
    from app.engines.fraktur import combine
    from app.engines.tesseract import TesseractReader, WordList, tessdata_dir

    settings = Settings(engine="ppocr")
    engine = build_engine(settings, threads=1)
    engine.load()
    where = tessdata_dir(settings.tesseract.tessdata_dir)
    reader, words = TesseractReader(where, "Fraktur", 1), WordList(where, "deu")
    spellings = {arm: variant(words, arm) for arm in ARMS}
    rows, pooled = [], {arm: [0, 0] for arm in ARMS}
    for name, rgb, text in images(options):
        mine = engine.infer([rgb], langs=["latin"])[0].lines
        theirs = reader.read(rgb)
        row = {"image": name}
        for arm in ARMS:
            lines = mine if arm == "ppocr" else combine(mine, theirs, spellings[arm])
            edits, chars = cer(text, page_text(lines, rgb.shape[1], rgb.shape[0]))
            row[arm] = edits
            pooled[arm][0] += edits
            pooled[arm][1] += chars
        row["chars"] = chars
        rows.append(row)
        print(row, flush=True)
    return {"benchmark": "fraktur_vote", "commit": commit(), "machine": machine(),
            "settings": {"manifest": str(options.manifest), "set_pages": options.set_pages},
            "pooled": {arm: {"edits": e, "chars": c, "cer": e / max(1, c)} for arm, (e, c) in pooled.items()},
            "images": rows}


def render(report: dict) -> str:
    lines = [f"The Fraktur vote's rules, each switched off in turn, `{report['commit']}`, in-process (edits; CER "
             "pooled over the images):", "", "| image | " + " | ".join(ARMS) + " |", "|---|" + "---|" * len(ARMS)]
    for row in report["images"]:
        lines.append(f"| {row['image']} | " + " | ".join(str(row[arm]) for arm in ARMS) + " |")
    lines.append("| pooled CER | " + " | ".join(f"{report['pooled'][arm]['cer']:.4f}" for arm in ARMS) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--set-pages", action="store_true")
    add_report_options(parser, "fraktur_vote.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, lambda report: True)


if __name__ == "__main__":
    sys.exit(main())
