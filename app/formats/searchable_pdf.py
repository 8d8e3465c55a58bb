"""A searchable PDF: the document's own pages, each with an invisible text layer (app/formats/text_layer.py).

Runs inside a decoder process (app/sandbox/searchable.py), since it opens the client's file; the decoder
hands it what it reads of that file (`SourceDocument`), so that this module never imports the sandbox.
- A PDF keeps its pages as they are (pikepdf, qpdf underneath): the old content is wrapped in q/Q and the
  layer drawn after it, so the page renders exactly as before. Its own text is never doubled
  (app/formats/existing_text.py): an earlier invisible OCR layer is replaced by ours, and no word of
  ours is drawn where the page already has visible text.
- An image becomes a page through img2pdf, which embeds JPEG, PNG and CCITT TIFF data without
  recompressing it and turns the page by the EXIF orientation with /Rotate. What img2pdf cannot take
  as it is (WebP, mirrored EXIF, modes PDF has no colour space for) is decoded here and embedded as
  lossless PNG.
A failed page of a partial job keeps its image with no text layer; the document info lists it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from io import BytesIO
from typing import Callable, Iterable

import pikepdf

from app import __version__
from app.errors import UnprocessableDocument
from app.formats.active_content import strip_active_content
from app.formats.existing_text import strip_invisible_text, uncovered, visible_text_boxes
from app.formats.pages import PageLayout, TextLine, page_layouts
from app.formats.text_layer import display_matrix, glyphless_font, layer_content

FONT_RESOURCE = "/FOCR"
ASPECT_TOLERANCE = 0.01  # a page img2pdf made must have the decoded image's shape


@dataclass(frozen=True)
class SourceDocument:
    """The client's file, as the decoder process reads it."""

    data: bytes
    declared_type: str | None
    is_pdf: bool
    # The pages of a page selection ("1,3") as the decoder sees them (EXIF turn applied), as PIL images.
    decoded_images: Callable[[str], Iterable]
    # A PDFium page's visible, mapped text lines (each with .box), in pixels of the page at a size.
    visible_lines: Callable[[object, tuple], list]


def searchable_pdf(source: SourceDocument, pages: list) -> bytes:
    """`pages`: the JSON page results, ascending page numbers, as the response has them."""
    layouts = page_layouts(pages)
    try:
        is_pdf = source.is_pdf
        pdf = _from_pdf(source.data, layouts) if is_pdf else _from_image(source, layouts)
        font = glyphless_font(pdf)
        own_text = _opened(source.data) if is_pdf else None  # PDFium reads the document's own text, once
        try:
            for page, layout in zip(pdf.pages, layouts):
                if own_text is not None:
                    strip_invisible_text(pdf, page)
                    if not layout.failed:
                        layout = _without_visible_text(own_text, layout, source.visible_lines)
                if not layout.failed and (layout.lines or layout.text.strip()):
                    _add_layer(pdf, page, layout, font)
        finally:
            if own_text is not None:
                own_text.close()
        _describe(pdf, layouts)
        strip_active_content(pdf)  # scripts, launch actions and embedded files of a hostile PDF stay behind
        out = BytesIO()
        # A PDF locked by its owner (no user password, restricted permissions) stays locked the same way
        pdf.save(out, compress_streams=True, object_stream_mode=pikepdf.ObjectStreamMode.generate,
                 encryption=bool(pdf.is_encrypted))
        return out.getvalue()
    except pikepdf.PdfError as exc:
        raise UnprocessableDocument(f"The searchable PDF could not be written ({type(exc).__name__}).",
                                    code="unprocessable_document") from None


def _from_pdf(data: bytes, layouts: list) -> pikepdf.Pdf:
    return _keep_pages(pikepdf.open(BytesIO(data)), layouts)


def _opened(data: bytes):
    import pypdfium2 as pdfium

    return pdfium.PdfDocument(data)


def _without_visible_text(document, layout: PageLayout, visible_lines) -> PageLayout:
    """The page's words that its own visible text does not already hold."""
    boxes = visible_text_boxes(document, layout.page_number, (layout.width, layout.height), visible_lines)
    if not boxes:
        return layout
    if not layout.boxed:  # text without positions would lie over the page's own text: leave the page be
        return dataclasses.replace(layout, text="")
    lines = [TextLine(words) for words in (uncovered(line.words, boxes) for line in layout.lines) if words]
    return dataclasses.replace(layout, lines=lines, text=layout.text if lines else "")


def _keep_pages(pdf: pikepdf.Pdf, layouts: list) -> pikepdf.Pdf:
    """Only the pages the results are for (a `pages` selection), in their order."""
    keep = {layout.page_number for layout in layouts}
    for index in reversed(range(len(pdf.pages))):
        if index + 1 not in keep:
            del pdf.pages[index]
    return pdf


def _from_image(source: SourceDocument, layouts: list) -> pikepdf.Pdf:
    import img2pdf

    try:
        pdf = _keep_pages(pikepdf.open(BytesIO(img2pdf.convert(source.data))), layouts)
        if len(pdf.pages) == len(layouts) and all(_same_shape(p, l) for p, l in zip(pdf.pages, layouts)):
            return pdf
    except Exception:  # noqa: BLE001 - whatever img2pdf refuses is embedded losslessly below
        pass
    return _reencoded(source, layouts)


def _reencoded(source: SourceDocument, layouts: list) -> pikepdf.Pdf:
    """The pages as the decoder sees them (EXIF turn applied), each embedded as lossless PNG."""
    import img2pdf

    spec = ",".join(str(layout.page_number) for layout in layouts)
    images = []
    for image, layout in zip(source.decoded_images(spec), layouts):
        if image.mode not in ("1", "L", "RGB"):
            image = image.convert("RGB")
        png = BytesIO()
        image.save(png, format="PNG")
        images.append(png.getvalue())
    return pikepdf.open(BytesIO(img2pdf.convert(images, rotation=img2pdf.Rotation.none)))


def _same_shape(page: pikepdf.Page, layout: PageLayout) -> bool:
    if layout.failed:  # a failed page's size is not known: nothing of it to place
        return True
    width, height = _displayed_size(page)
    return abs(width / height - layout.width / max(layout.height, 1)) <= ASPECT_TOLERANCE * width / height


def _rotate(page: pikepdf.Page) -> int:
    node = page.obj
    while node is not None:  # /Rotate is inheritable from the page tree
        if "/Rotate" in node:
            return int(node.Rotate) % 360
        node = node.get("/Parent")
    return 0


def _crop_box(page: pikepdf.Page) -> tuple:
    box = [float(v) for v in page.cropbox]
    return min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])


def _displayed_size(page: pikepdf.Page) -> tuple:
    x0, y0, x1, y1 = _crop_box(page)
    return (y1 - y0, x1 - x0) if _rotate(page) in (90, 270) else (x1 - x0, y1 - y0)


def _add_layer(pdf: pikepdf.Pdf, page: pikepdf.Page, layout: PageLayout, font: pikepdf.Dictionary) -> None:
    width, height = _displayed_size(page)
    name = _free_font_name(page)
    matrix = " ".join(f"{v:g}" for v in display_matrix(_crop_box(page), _rotate(page)))
    layer = b"Q\nq\n" + matrix.encode() + b" cm\n" + layer_content(layout, width, height, name) + b"Q\n"
    page.contents_add(pikepdf.Stream(pdf, b"q\n"), prepend=True)
    page.contents_add(pikepdf.Stream(pdf, layer), prepend=False)
    resources = page.obj.get("/Resources")
    if resources is None:
        page.obj.Resources = resources = pikepdf.Dictionary()
    if "/Font" not in resources:
        resources.Font = pikepdf.Dictionary()
    resources.Font[name] = font


def _free_font_name(page: pikepdf.Page) -> str:
    fonts = page.obj.get("/Resources", {}).get("/Font", {})
    name, suffix = FONT_RESOURCE, 0
    while name in fonts:
        suffix += 1
        name = f"{FONT_RESOURCE}{suffix}"
    return name


def _describe(pdf: pikepdf.Pdf, layouts: list) -> None:
    """The document info names the pages without a text layer, and those whose text has no positions."""
    info = pdf.docinfo
    info["/Producer"] = f"offline-ocr-serve {__version__} (pikepdf {pikepdf.__version__})"
    failed = [str(layout.page_number) for layout in layouts if layout.failed]
    text_only = [str(layout.page_number) for layout in layouts if not layout.failed and not layout.boxed]
    if failed:
        info["/OCRFailedPages"] = " ".join(failed)
    if text_only:
        info["/OCRTextOnlyPages"] = " ".join(text_only)
