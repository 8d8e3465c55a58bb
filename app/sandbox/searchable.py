"""The searchable PDF, written in a decoder process, since it opens the client's file again.

The writer (app/formats/searchable_pdf.py) is handed what the decoder reads of that file: its kind,
its pages as decoded images and its own visible text, so that the formats never import the sandbox.
"""

from __future__ import annotations

from app.formats.searchable_pdf import SourceDocument, searchable_pdf
from app.sandbox.documents import iter_pages, sniff_kind
from app.sandbox.pdf_text import visible_lines


def write_searchable_pdf(data: bytes, declared_type: str | None, pages: list, limits) -> bytes:
    """`pages`: the JSON page results, ascending page numbers; `limits`: the decoder's DecodeLimits."""
    def decoded_images(spec: str):
        return (page.image for page in iter_pages(data, declared_type, spec, limits))

    source = SourceDocument(data, declared_type, sniff_kind(data, declared_type) == "pdf", decoded_images,
                            visible_lines)
    return searchable_pdf(source, pages)
