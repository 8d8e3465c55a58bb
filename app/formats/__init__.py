"""What archives file away: the page results rendered as hOCR, ALTO or a searchable PDF.

`pages.py` reads the JSON page results into lines and words (the one place that knows their shape);
`hocr.py` and `alto.py` write XML from them; `text_layer.py` draws them as an invisible PDF text layer,
and `searchable_pdf.py` puts that layer on the document's own pages (inside a decoder process, since it
opens the client's file: app/sandbox). `schemas/` holds the ALTO schema for offline validation.
"""

from __future__ import annotations

from app.errors import BadRequest

FORMATS = ("json", "markdown", "pdf", "hocr", "alto")
MEDIA_TYPES = {
    "json": "application/json",
    "markdown": "text/markdown; charset=utf-8",
    "pdf": "application/pdf",
    "hocr": "application/xhtml+xml; charset=utf-8",
    "alto": "application/alto+xml; charset=utf-8",
}


def parse_format(value: str | None) -> str:
    """The `format` query parameter: one of FORMATS (json when absent)."""
    if value is None or value == "":
        return "json"
    if value not in FORMATS:
        raise BadRequest(f"format must be one of {', '.join(FORMATS)}, not {value[:40]!r}.", code="invalid_format")
    return value
