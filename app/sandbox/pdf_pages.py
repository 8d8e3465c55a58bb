"""A PDF's pages rendered for the engine, one at a time, and each page's own text layer: pure, no Ray.

Every way a PDF can be broken ends here as a 422 (`corrupt_pdf`, `encrypted_pdf`); a page that would
render past `max_pdf_page_pixels` is rendered at a lower dpi. The text layer is app/sandbox/pdf_text.py's.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import pypdfium2 as pdfium

from app.config import DecodeLimits
from app.errors import OCRServiceError, UnprocessableDocument
from app.sandbox.page_selection import parse_page_spec
from app.page_size import InputBudget
from app.sandbox.decoded import DecodedPage
from app.sandbox.pdf_text import read_layer

# PDFium is not thread-safe, and the preprocessor decodes in worker threads.
_PDFIUM_LOCK = threading.Lock()


def count_pdf_pages(data: bytes) -> int:
    with _PDFIUM_LOCK:
        pdf = _open_pdf(data)
        try:
            with _pdfium_errors_as_4xx("The PDF's pages could not be counted"):
                count = len(pdf)
        finally:
            pdf.close()
    if count <= 0:
        raise UnprocessableDocument("The PDF has no pages.", code="corrupt_pdf")
    return count


def rasterise_pdf(data: bytes, pages: Optional[str], limits: DecodeLimits, target: Optional[InputBudget],
                   pdf_text: str = "ocr") -> Iterator[DecodedPage]:
    with _PDFIUM_LOCK:
        pdf = _open_pdf(data)
    try:
        with _PDFIUM_LOCK, _pdfium_errors_as_4xx("The PDF's pages could not be counted"):
            count = len(pdf)
        if count <= 0:
            raise UnprocessableDocument("The PDF has no pages.", code="corrupt_pdf")
        for index in parse_page_spec(pages, count, limits.max_pages):
            with _PDFIUM_LOCK:
                page = _render_page(pdf, index, limits, target, pdf_text)
            yield page
    finally:
        with _PDFIUM_LOCK:
            pdf.close()


def _open_pdf(data: bytes) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise UnprocessableDocument(
                "The PDF is encrypted with a password; send an unencrypted copy.", code="encrypted_pdf"
            ) from None
        raise UnprocessableDocument(f"The PDF could not be opened ({type(exc).__name__})", code="corrupt_pdf") from None
    except MemoryError:
        raise
    except Exception as exc:
        raise UnprocessableDocument(f"The PDF could not be opened ({type(exc).__name__})", code="corrupt_pdf") from None


@contextmanager
def _pdfium_errors_as_4xx(what: str):
    try:
        yield
    except (OCRServiceError, MemoryError):
        raise
    except Exception as exc:
        raise UnprocessableDocument(f"{what} ({type(exc).__name__})", code="corrupt_pdf") from None


def _render_page(pdf: pdfium.PdfDocument, index: int, limits: DecodeLimits, target: Optional[InputBudget],
                 pdf_text: str = "ocr") -> DecodedPage:
    with _pdfium_errors_as_4xx(f"PDF page {index + 1} could not be rendered"):
        page = pdf[index]
        width_pt, height_pt = page.get_size()
        if not (width_pt > 0 and height_pt > 0):  # also catches NaN
            raise UnprocessableDocument(f"PDF page {index + 1} has no area.", code="corrupt_pdf")
        dpi = _page_dpi(width_pt, height_pt, limits)
        source_scale = dpi / 72.0
        source = (math.ceil(width_pt * source_scale), math.ceil(height_pt * source_scale))  # as pypdfium2 sizes it
        scale = _render_scale(width_pt, height_pt, source_scale, target)
        pixels = page.render(scale=scale, rev_byteorder=True).to_numpy()  # RGB on white, a view of the bitmap
        layer = read_layer(pdf, page, source, pdf_text)
        page.close()
        if pixels.ndim != 3 or pixels.shape[2] != 3:  # not what PDFium gives for an opaque fill
            raise UnprocessableDocument(f"PDF page {index + 1} rendered as {pixels.shape}.", code="corrupt_pdf")
        size = (pixels.shape[1], pixels.shape[0])
        return DecodedPage(pixels, page_number=index + 1, dpi=dpi, source_size=source if size != source else None,
                           text_layer=layer)


def _render_scale(width_pt: float, height_pt: float, scale: float, target: Optional[InputBudget]) -> float:
    """PDFium renders at any resolution for the same cost per output pixel: render straight at
    the target's size rather than at `scale` and shrink. PDFium rounds sizes up, so the scale
    is nudged down until the rendered page is inside the target (no resize left to do)."""
    if target is None:
        return scale
    scale *= target.scale(width_pt * scale, height_pt * scale)
    for _ in range(100):
        width, height = math.ceil(width_pt * scale), math.ceil(height_pt * scale)
        if max(width, height) <= target.max_side and width * height <= target.max_pixels:
            break
        scale *= 0.999
    return scale


def _page_dpi(width_pt: float, height_pt: float, limits: DecodeLimits) -> float:
    """The configured dpi, lowered for oversized pages so a render never exceeds the pixel limit."""
    dpi = float(limits.pdf_dpi)
    pixels = (width_pt * dpi / 72.0) * (height_pt * dpi / 72.0)
    if pixels > limits.max_pdf_page_pixels:
        dpi *= (limits.max_pdf_page_pixels / pixels) ** 0.5
    return dpi
