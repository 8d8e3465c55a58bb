"""Test documents whose every page says which page it is."""

from __future__ import annotations

from app.synthetic import pdf_bytes, render_text_page


def serial(number: int) -> str:
    """A page's second line: a number no other page has."""
    return f"Serial {number * 37 + 1000}"


def numbered_pdf(pages: int, tag: str = "Archive", dpi: int = 100) -> bytes:
    """`{tag} page {n}` and its serial on page n; rendered one page at a time (300 pages stay a few MB)."""
    return pdf_bytes((render_text_page([f"{tag} page {n}", serial(n)]) for n in range(1, pages + 1)), dpi)
