"""Turning uploaded bytes into page images: pure functions, no Ray.

Every way an upload can be wrong ends here as a typed 4xx error: empty, of an
unsupported type, undecodable, too many pixels, too many pages, an encrypted or
broken PDF, or a page selection that does not exist (app/sandbox/page_selection.py).
The engine's size for a page is app/page_size.py's.
"""

from __future__ import annotations

import io
import math
from contextlib import contextmanager
from typing import Iterator, Optional

import numpy as np
from PIL import ExifTags, Image, ImageOps

from app.config import DecodeLimits
from app.errors import BadRequest, OCRServiceError, PayloadTooLarge, UnprocessableDocument, UnsupportedMediaType
from app.sandbox.decoded import DecodedPage
from app.sandbox.page_selection import parse_page_spec
from app.page_size import InputBudget

_IMAGE_MAGIC = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",  # JPEG
    b"GIF87a",
    b"GIF89a",
    b"II*\x00",  # TIFF, little-endian
    b"MM\x00*",  # TIFF, big-endian
    b"BM",
)
_ACCEPTED_DECLARED = ("image/", "application/pdf", "application/octet-stream")


def sniff_kind(data: bytes, declared_type: Optional[str]) -> str:
    """'pdf' or 'image', from the bytes themselves; the declared type only decides 415 vs 422."""
    if not data:
        raise BadRequest("The uploaded file is empty.", code="empty_file")
    declared = (declared_type or "").split(";")[0].strip().lower()
    if declared and not declared.startswith(_ACCEPTED_DECLARED):
        raise UnsupportedMediaType(
            f"Content type '{declared}' is not supported; send an image (image/*) or a PDF (application/pdf)."
        )
    head = data[:16]
    if head.startswith(b"%PDF-") or b"%PDF-" in data[:1024]:
        return "pdf"
    if head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return "image"
    if declared == "application/pdf":
        raise UnprocessableDocument("The file is declared as a PDF but has no PDF header.", code="corrupt_pdf")
    if declared.startswith("image/"):
        return "image"  # let the decoder try, and say 422 if it cannot
    raise UnsupportedMediaType("The file is neither a supported image nor a PDF.")


def iter_pages(data: bytes, declared_type: Optional[str], pages: Optional[str], limits: DecodeLimits,
               target: Optional[InputBudget] = None, pdf_text: str = "ocr") -> Iterator[DecodedPage]:
    """Pages in document order, decoded one at a time; every check on the whole document runs first.

    With a `target`, a page larger than it is decoded or rendered at reduced size where that is
    cheaper than decoding it whole and shrinking it (JPEG's DCT scaling, PDFium rendering straight
    at the target's resolution); the page may still need a final resize to fit (fit_to_budget).
    A PDF page's text layer is read as `pdf_text` says (app/sandbox/pdf_text.py): ocr reads none.
    """
    kind = sniff_kind(data, declared_type)
    if kind == "pdf":
        from app.sandbox.pdf_pages import rasterise_pdf

        return rasterise_pdf(data, pages, limits, target, pdf_text)
    return _decode_image(data, pages, limits, target)


def select_pages(data: bytes, declared_type: Optional[str], pages: Optional[str], max_pages: int) -> list[int]:
    """The 1-based page numbers a job will process: the document opened and counted, nothing rendered."""
    kind = sniff_kind(data, declared_type)
    if kind == "image":
        with _pillow_errors_as_4xx():
            with Image.open(io.BytesIO(data)) as img:
                count = getattr(img, "n_frames", 1)
    else:
        from app.sandbox.pdf_pages import count_pdf_pages

        count = count_pdf_pages(data)
    return [index + 1 for index in parse_page_spec(pages, count, max_pages)]


def load_pages(data: bytes, declared_type: Optional[str], pages: Optional[str], limits: DecodeLimits) -> list[DecodedPage]:
    return list(iter_pages(data, declared_type, pages, limits))


def _decode_image(data: bytes, pages: Optional[str], limits: DecodeLimits, target: Optional[InputBudget]) -> Iterator[DecodedPage]:
    with _pillow_errors_as_4xx():
        img = Image.open(io.BytesIO(data))
        frames = getattr(img, "n_frames", 1)  # multi-page TIFF: one page per frame (counting can fail too)
        selected = parse_page_spec(pages, frames, limits.max_pages)
    for frame in selected:
        with _pillow_errors_as_4xx():
            img.seek(frame)
            _check_pixels(img.size, limits.max_image_pixels)
            source = _upright_size(img) if frame == 0 else img.size
            reduced = frame == 0 and _draft(img, target)
            img.load()
            page = ImageOps.exif_transpose(img) if frame == 0 else img.copy()
            page = _to_engine_mode(page)
        yield DecodedPage(page, page_number=frame + 1, source_size=source if reduced else None)


def _upright_size(img: Image.Image) -> tuple[int, int]:
    """The size after exif_transpose: orientations 5-8 turn the image by a quarter."""
    width, height = img.size
    turned = img.getexif().get(ExifTags.Base.Orientation, 1) in (5, 6, 7, 8)
    return (height, width) if turned else (width, height)


def _draft(img: Image.Image, target: Optional[InputBudget]) -> bool:
    """JPEG: let libjpeg decode at 1/2, 1/4 or 1/8 scale (DCT scaling) where the page would be
    shrunk at least that much anyway; the decoded image stays at least the target's size.
    True when the decoder will deliver a smaller image than the file's."""
    if target is None or img.format != "JPEG":
        return False
    width, height = img.size
    scale = target.scale(width, height)
    if scale > 0.5:
        return False
    img.draft(None, (math.ceil(width * scale), math.ceil(height * scale)))
    return img.size != (width, height)


@contextmanager
def _pillow_errors_as_4xx():
    """Whatever Pillow raises on a hostile file is the file's fault: a 4xx, never a 500.

    Our own errors pass through; MemoryError too, so that the sandbox can name its memory limit.
    """
    try:
        yield
    except (OCRServiceError, MemoryError):
        raise
    except Image.DecompressionBombError as exc:
        raise PayloadTooLarge(str(exc), code="image_too_large") from None
    except Exception as exc:
        raise UnprocessableDocument(
            f"The image could not be decoded ({type(exc).__name__})", code="corrupt_image"
        ) from None


def _check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    width, height = size
    if width <= 0 or height <= 0:
        raise UnprocessableDocument("The image has no pixels.", code="corrupt_image")
    if width * height > max_pixels:
        raise PayloadTooLarge(
            f"The image is {width}x{height} = {width * height} pixels; the limit is max_image_pixels={max_pixels}.",
            code="image_too_large",
        )


def _to_engine_mode(img: Image.Image) -> Image.Image:
    """Grey stays grey (smaller payloads), everything else becomes RGB; transparency goes on white."""
    if img.mode in ("L", "RGB"):
        return img
    if img.mode == "1":
        return img.convert("L")
    if img.mode.startswith(("I", "F")):  # 16/32-bit grey scans: stretch into 8 bits
        arr = np.asarray(img, dtype=np.float64)
        span = float(arr.max() - arr.min()) or 1.0
        return Image.fromarray(((arr - arr.min()) * (255.0 / span)).astype(np.uint8), "L")
    if img.mode in ("LA", "La"):
        return _on_white(img.convert("RGBA")).convert("L")
    if "A" in img.mode or "transparency" in img.info:
        return _on_white(img.convert("RGBA"))
    return img.convert("RGB")


def _on_white(rgba: Image.Image) -> Image.Image:
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")
