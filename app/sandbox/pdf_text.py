"""The text a PDF page already has: its words and lines with boxes, and whether to read the page from it.

Runs in the decoder sandbox (app/sandbox/worker.py), under its limits, on the PDFium page being rendered.
A page is read from its layer (`pdf_text=auto`, the default) only where the layer is usable:

- visible text: invisible text (render mode 3) over a page image is an earlier OCR of unknown quality,
  so such a page is OCR'd again;
- mapped text: a layer of mostly unmapped glyphs, private-use or replacement characters (a font without
  a ToUnicode map: the text cannot be searched either) is refused;
- no text in pictures: a page where images cover a large share of the page outside the text (a scan
  beside real text, a pasted screenshot) is OCR'd, since the picture may hold text the layer lacks.

`pdf_text=layer` reads any page that has text from its layer; `ocr` never reads a layer.
"""

from __future__ import annotations

import ctypes
import unicodedata
from dataclasses import dataclass, field
from typing import Optional

MODES = ("auto", "ocr", "layer")
_INVISIBLE = 3  # text render mode 3: neither filled nor stroked
_MAX_BAD = 0.1  # unmapped, private-use or replacement characters: at most this share of the text's characters
_MAX_INVISIBLE = 0.1  # invisible characters: at most this share
_MAX_IMAGE_SHARE = 0.25  # images outside the text's area: at most this share of the page
_MIN_CHARS = 1
_GAP = 1.5  # a gap this many character heights wide ends a line: columns and table cells on one baseline
_MAX_WORDS = 8_000  # a page's layer travels in one frame header: a layer beyond this is OCR'd instead


@dataclass
class LayerWord:
    text: str
    box: list  # [x0, y0, x1, y1], pixels of the page rendered at the page's dpi


@dataclass
class LayerLine:
    words: list = field(default_factory=list)

    @property
    def box(self) -> list:
        return [min(w.box[0] for w in self.words), min(w.box[1] for w in self.words),
                max(w.box[2] for w in self.words), max(w.box[3] for w in self.words)]

    def as_json(self) -> dict:
        return {"box": [round(v, 2) for v in self.box],
                "words": [{"text": w.text, "box": [round(v, 2) for v in w.box]} for w in self.words]}


@dataclass
class LayerVerdict:
    use: bool
    lines: list  # list[LayerLine]
    note: Optional[str] = None  # why a page with text was OCR'd


def parse_pdf_text(value: Optional[str]) -> Optional[str]:
    from app.errors import one_of

    return one_of(value, MODES, "pdf_text")


def read_layer(pdf, page, size: tuple[int, int], mode: str) -> Optional[LayerVerdict]:
    """The page's layer and the verdict; None where the page has no text (or `mode` is ocr). `size` is the
    page rendered at its dpi, the coordinate space of the boxes."""
    if mode == "ocr":
        return None
    import pypdfium2.raw as pdfium_c

    textpage = page.get_textpage()
    try:
        count = pdfium_c.FPDFText_CountChars(textpage)
        if count <= 0:
            return None
        chars = list(_chars(pdfium_c, page, textpage, count, size))
    finally:
        textpage.close()
    visible = [c for c in chars if c[0].strip()]
    if len(visible) < _MIN_CHARS:
        return None
    lines = _lines(chars)
    if sum(len(line.words) for line in lines) > _MAX_WORDS:
        return LayerVerdict(False, [], "the PDF's text layer is too large to carry: read by OCR")
    if mode == "layer":
        return LayerVerdict(True, lines)
    invisible = sum(1 for c in visible if c[2]) / len(visible)
    bad = sum(1 for c in visible if c[3] or _unusable(c[0])) / len(visible)
    if invisible > _MAX_INVISIBLE:
        return LayerVerdict(False, lines, "the PDF's text is invisible (an earlier OCR): read by OCR")
    if bad > _MAX_BAD:
        return LayerVerdict(False, lines, "the PDF's text layer is mostly unmapped glyphs: read by OCR")
    if _image_share(pdfium_c, page, lines, size) > _MAX_IMAGE_SHARE:
        return LayerVerdict(False, lines, "the PDF page has images beside its text: read by OCR")
    return LayerVerdict(True, lines)


def visible_lines(page, size: tuple[int, int]) -> list:
    """The page's visible, mapped text as lines (pixels of the page at `size`): what a reader already finds."""
    import pypdfium2.raw as pdfium_c

    textpage = page.get_textpage()
    try:
        count = pdfium_c.FPDFText_CountChars(textpage)
        chars = list(_chars(pdfium_c, page, textpage, count, size)) if count > 0 else []
    finally:
        textpage.close()
    return _lines([c for c in chars if c[1] is None or not (c[2] or c[3] or _unusable(c[0]))])


def _unusable(char: str) -> bool:
    return char == "\ufffd" or unicodedata.category(char) in ("Co", "Cn", "Cs") or (
        unicodedata.category(char) == "Cc" and char not in "\t\r\n")


def _chars(pdfium_c, page, textpage, count: int, size: tuple[int, int]):
    """(char, box in pixels or None, invisible, unmapped) for each character, generated spaces included."""
    rect = pdfium_c.FS_RECTF()
    modes: dict = {}
    for index in range(count):
        code = pdfium_c.FPDFText_GetUnicode(textpage, index)
        char = chr(code) if 0 < code < 0x110000 else "\ufffd"
        if pdfium_c.FPDFText_IsGenerated(textpage, index) == 1 or char in " \t\r\n\x02\xa0":
            yield (" " if char not in "\r\n" else "\n", None, False, False)
            continue
        text_object = pdfium_c.FPDFText_GetTextObject(textpage, index)
        key = ctypes.cast(text_object, ctypes.c_void_p).value
        if key not in modes:
            modes[key] = pdfium_c.FPDFTextObj_GetTextRenderMode(text_object) if text_object else 0
        # The loose box: the font's ascent to descent, as a typeset line (and an OCR engine's box) has it
        pdfium_c.FPDFText_GetLooseCharBox(textpage, index, rect)
        box = _to_pixels(pdfium_c, page, size, (rect.left, rect.bottom, rect.right, rect.top))
        unmapped = pdfium_c.FPDFText_HasUnicodeMapError(textpage, index) == 1
        yield (char, box, modes[key] == _INVISIBLE, unmapped)


def _to_pixels(pdfium_c, page, size: tuple[int, int], box: tuple) -> list:
    """A box in PDF user space to pixels of the page as rendered (its /Rotate and crop box applied)."""
    xs, ys = [], []
    for x, y in ((box[0], box[1]), (box[2], box[3])):
        dx, dy = ctypes.c_int(), ctypes.c_int()
        pdfium_c.FPDF_PageToDevice(page.raw, 0, 0, size[0], size[1], 0, x, y, dx, dy)
        xs.append(dx.value)
        ys.append(dy.value)
    return [float(min(xs)), float(min(ys)), float(max(xs)), float(max(ys))]


def _lines(chars: list) -> list:
    """Words split at spaces (PDFium writes a space where the layout leaves a gap), lines at line ends,
    wherever a character leaves the current line's band, and at gaps wider than a column gutter (two
    columns or a table's cells on one baseline are separate lines, as an OCR engine boxes them)."""
    lines: list = []
    line: Optional[LayerLine] = None
    word_chars: list = []

    def end_word():
        nonlocal line
        if word_chars:
            text = "".join(c for c, _ in word_chars)
            boxes = [b for _, b in word_chars]
            if line is None:
                line = LayerLine()
                lines.append(line)
            line.words.append(LayerWord(text, [min(b[0] for b in boxes), min(b[1] for b in boxes),
                                               max(b[2] for b in boxes), max(b[3] for b in boxes)]))
            word_chars.clear()

    for char, box, _, _ in chars:
        if box is None:
            end_word()
            if char == "\n":
                line = None
            continue
        if line is not None and line.words and (_leaves_band(line, box) or _far_from(line, word_chars, box)):
            end_word()
            line = None
        if word_chars and _leaves_band_of(word_chars, box):
            end_word()
            line = None
        word_chars.append((char, box))
    end_word()
    return [ln for ln in lines if ln.words]


def _leaves_band(line: LayerLine, box: list) -> bool:
    top, bottom = min(w.box[1] for w in line.words), max(w.box[3] for w in line.words)
    centre = (box[1] + box[3]) / 2
    return not top <= centre <= bottom and box[3] > box[1]


def _far_from(line: LayerLine, word_chars: list, box: list) -> bool:
    """The character starts a word far to the right of the line's end (or anywhere to its left)."""
    if word_chars:
        return False
    last = line.words[-1].box
    height = max(last[3] - last[1], box[3] - box[1], 1.0)
    return box[0] - last[2] > _GAP * height or box[2] < last[0]


def _leaves_band_of(word_chars: list, box: list) -> bool:
    top, bottom = min(b[1] for _, b in word_chars), max(b[3] for _, b in word_chars)
    centre = (box[1] + box[3]) / 2
    return not top - 1 <= centre <= bottom + 1 and box[3] > box[1] and bottom > top


def _image_share(pdfium_c, page, lines: list, size: tuple[int, int]) -> float:
    """The share of the page covered by images, less where the text lies over them."""
    area = float(size[0] * size[1]) or 1.0
    text_boxes = [line.box for line in lines]
    covered = 0.0
    for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=3):
        left, bottom, right, top = obj.get_bounds()
        box = _to_pixels(pdfium_c, page, size, (left, bottom, right, top))
        image_area = max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])
        under_text = sum(max(0.0, min(box[2], t[2]) - max(box[0], t[0])) * max(0.0, min(box[3], t[3]) - max(box[1], t[1]))
                         for t in text_boxes)
        covered += max(0.0, image_area - under_text)
    return covered / area
