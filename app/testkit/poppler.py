"""Poppler's reading of a PDF (Debian's poppler-utils): the reference a searchable PDF is held to."""

from __future__ import annotations

import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path


def pdftotext(pdf: bytes, raw: bool = False) -> str:
    """The text poppler reads: in its own reading order (found from the layout), or with `raw` in the order
    the page draws it (the text layer's order, which is the service's reading order)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "doc.pdf"
        path.write_bytes(pdf)
        return subprocess.run(["pdftotext", "-enc", "UTF-8", *(["-raw"] if raw else []), str(path), "-"],
                              capture_output=True, check=True, text=True).stdout


def pdftotext_words(pdf: bytes) -> list:
    """[(page width, page height, [(text, (x0, y0, x1, y1))])] per page, in points from the top-left."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "doc.pdf"
        path.write_bytes(pdf)
        html = subprocess.run(["pdftotext", "-enc", "UTF-8", "-bbox", str(path), "-"], capture_output=True,
                              check=True).stdout
    root = ET.fromstring(html)
    pages = []
    for page in root.iter("{http://www.w3.org/1999/xhtml}page"):
        words = [(w.text or "", tuple(float(w.get(k)) for k in ("xMin", "yMin", "xMax", "yMax")))
                 for w in page.iter("{http://www.w3.org/1999/xhtml}word")]
        pages.append((float(page.get("width")), float(page.get("height")), words))
    return pages


def word_offsets(page: dict, pdf: bytes) -> list:
    """For each JSON word of `page` (a one-page PDF's page result): (text, the largest offset of any edge of
    the nearest same-text word pdftotext found, as a share of the page's width or height), None where
    pdftotext has no word with that text."""
    import pypdfium2 as pdfium

    ((width_pt, height_pt, words),) = pdftotext_words(pdf)
    if pdfium.PdfDocument(pdf)[0].get_rotation() in (90, 270):
        # pdftotext -bbox gives the page's size before its /Rotate, the words where they are displayed
        width_pt, height_pt = height_pt, width_pt
    sx, sy = width_pt / page["width"], height_pt / page["height"]
    offsets = []
    for block in page["blocks"]:
        for word in block["words"]:
            x0, y0, x1, y1 = word["bbox"]
            expected = (x0 * sx, y0 * sy, x1 * sx, y1 * sy)
            found = [box for text, box in words if text == word["text"]]
            if not found:
                offsets.append((word["text"], None))
                continue
            nearest = min(found, key=lambda box: sum(abs(a - b) for a, b in zip(box, expected)))
            offsets.append((word["text"], max(abs(a - b) / size for a, b, size in
                                              zip(nearest, expected, (width_pt, height_pt) * 2))))
    return offsets
