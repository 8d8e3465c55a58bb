"""Poppler's reading of a PDF (Debian's poppler-utils): the reference a searchable PDF is held to."""

from __future__ import annotations

import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path


def pdftotext(pdf: bytes) -> str:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "doc.pdf"
        path.write_bytes(pdf)
        return subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, check=True,
                              text=True).stdout


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
