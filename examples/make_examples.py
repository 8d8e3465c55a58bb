"""Writes the sample inputs the README's first commands use, with known text:

    python examples/make_examples.py      (the files are committed; this remakes them)

  sample-page.png   one page: an invoice of three lines
  sample.pdf        three pages, "Page one of three" ...
  expected.json     the text of each, line by line, for a quick check of any engine
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.synthetic import png_bytes, render_text_page  # noqa: E402

HERE = Path(__file__).resolve().parent
PAGE_LINES = ["INVOICE 4711", "Total amount 57.80 EUR", "Thank you"]
PDF_PAGES = [[f"Page {word} of three", f"Section {word.upper()}"] for word in ("one", "two", "three")]


def main() -> None:
    (HERE / "sample-page.png").write_bytes(png_bytes(render_text_page(PAGE_LINES)))
    images = [render_text_page(lines) for lines in PDF_PAGES]
    images[0].save(HERE / "sample.pdf", format="PDF", save_all=True, append_images=images[1:], resolution=100)
    expected = {"sample-page.png": [PAGE_LINES], "sample.pdf": PDF_PAGES}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main()
