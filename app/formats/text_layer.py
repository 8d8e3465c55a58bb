"""An invisible text layer (render mode 3) for one PDF page, word by word, with pikepdf.

The font is a glyphless TrueType (every character one empty glyph half an em wide), as Tesseract's PDF
renderer does it: a Type0 font with Identity-H, each character written as its UTF-16 code unit, and a
ToUnicode map that reads the code back as itself, so a PDF reader extracts exactly the text drawn. Each
word is stretched (Tz) to its box's length and set on a baseline a fifth of its height above the box's
foot, which is where the font's 0.2 em descent puts the box pdftotext reports back on the word's box.

Coordinates come in pixels of the page as displayed (the page as uploaded: a PDF page after its /Rotate,
an image after its EXIF turn); `display_matrix` maps the displayed page onto the PDF's user space.
Words on a page the orientation step turned are written along their own direction on the page, so a
reader selects them where the glyphs are.
"""

from __future__ import annotations

import math
import zlib
from functools import lru_cache
from io import BytesIO

import pikepdf

from app.formats.pages import PageLayout

FONT_NAME = "/OCRGlyphLess"
ADVANCE = 0.5  # every glyph's width, in ems (the font's DW 500)
DESCENT = 0.2  # below the baseline, in ems; 0.8 above
WORD_GAP = 0.25  # in word heights: the least gap between two words, so that a reader sees a space
TEXT_ONLY_MARGIN = 0.05  # a page without boxes: its lines spread over the page within this margin


@lru_cache(maxsize=1)
def glyphless_ttf() -> bytes:
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder([".notdef", "blank"])
    builder.setupCharacterMap({0x20: "blank"})
    empty = TTGlyphPen(None).glyph()
    builder.setupGlyf({".notdef": empty, "blank": empty})
    builder.setupHorizontalMetrics({".notdef": (500, 0), "blank": (500, 0)})
    builder.setupHorizontalHeader(ascent=800, descent=-200)
    builder.setupNameTable({"familyName": "OCRGlyphLess", "styleName": "Regular"})
    builder.setupOS2(sTypoAscender=800, sTypoDescender=-200, usWinAscent=800, usWinDescent=200)
    builder.setupPost()
    out = BytesIO()
    builder.save(out)
    return out.getvalue()


TO_UNICODE = b"""/CIDInit /ProcSet findresource begin
12 dict begin
begincmap
/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def
/CMapName /Adobe-Identity-UCS def
/CMapType 2 def
1 begincodespacerange
<0000> <FFFF>
endcodespacerange
1 beginbfrange
<0000> <FFFF> <0000>
endbfrange
endcmap
CMapName currentdict /CMap defineresource pop
end
end
"""


def glyphless_font(pdf: pikepdf.Pdf) -> pikepdf.Dictionary:
    """The font's objects, made once per document."""
    every_code_to_glyph_1 = pikepdf.Stream(pdf, zlib.compress(b"\x00\x01" * 65536))
    every_code_to_glyph_1.Filter = pikepdf.Name.FlateDecode
    descriptor = pikepdf.Dictionary(
        Type=pikepdf.Name.FontDescriptor, FontName=pikepdf.Name(FONT_NAME), Flags=5, ItalicAngle=0,
        FontBBox=[0, -200, 500, 800], Ascent=800, Descent=-200, CapHeight=800, StemV=80,
        FontFile2=pikepdf.Stream(pdf, glyphless_ttf()),
    )
    cid_font = pikepdf.Dictionary(
        Type=pikepdf.Name.Font, Subtype=pikepdf.Name.CIDFontType2, BaseFont=pikepdf.Name(FONT_NAME),
        CIDSystemInfo=pikepdf.Dictionary(Registry=pikepdf.String("Adobe"), Ordering=pikepdf.String("Identity"),
                                         Supplement=0),
        FontDescriptor=pdf.make_indirect(descriptor), DW=int(ADVANCE * 1000), CIDToGIDMap=every_code_to_glyph_1,
    )
    return pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type0, BaseFont=pikepdf.Name(FONT_NAME),
        Encoding=pikepdf.Name("/Identity-H"), DescendantFonts=[pdf.make_indirect(cid_font)],
        ToUnicode=pikepdf.Stream(pdf, TO_UNICODE),
    ))


def display_matrix(box: tuple, rotate: int) -> tuple:
    """The `cm` that maps the displayed page (points, origin at its bottom-left) onto user space, for a
    page whose crop box is `box` and which a reader turns clockwise by /Rotate `rotate`."""
    x0, y0, x1, y1 = box
    width, height = x1 - x0, y1 - y0
    return {0: (1, 0, 0, 1, x0, y0), 90: (0, 1, -1, 0, x0 + width, y0),
            180: (-1, 0, 0, -1, x0 + width, y0 + height), 270: (0, -1, 1, 0, x0, y0 + height)}[rotate % 360]


def layer_content(layout: PageLayout, display_width: float, display_height: float, font: str) -> bytes:
    """The operators that draw the page's words invisibly, in displayed points (before `display_matrix`)."""
    sx, sy = display_width / max(layout.width, 1), display_height / max(layout.height, 1)
    ops = ["BT", "3 Tr"]
    for word in _placed_words(layout, display_width, display_height, sx, sy):
        ops.append(_word_ops(*word, font=font))
    ops.append("ET")
    return ("\n".join(ops) + "\n").encode("ascii")


def _placed_words(layout: PageLayout, width: float, height: float, sx: float, sy: float):
    """(text, box in displayed points with y up, direction in degrees) for every word to draw."""
    if layout.lines:
        for line in layout.lines:
            for text, (x0, y0, x1, y1) in _with_spaces(_apart(line.words, layout.rotation), layout.rotation):
                yield text, (x0 * sx, height - y1 * sy, x1 * sx, height - y0 * sy), layout.rotation
        return
    rows = [row.strip() for row in layout.text.splitlines() if row.strip()]
    if not rows:
        return
    top, usable = height * (1 - TEXT_ONLY_MARGIN), height * (1 - 2 * TEXT_ONLY_MARGIN)
    step = usable / len(rows)
    left, right = width * TEXT_ONLY_MARGIN, width * (1 - TEXT_ONLY_MARGIN)
    size = min(step * 0.8, 12.0)
    for index, row in enumerate(rows):  # no positions: rows down the page at their natural width, to be found
        y1 = top - index * step
        natural = len(row.encode("utf-16-be")) // 2 * ADVANCE * size
        yield row, (left, y1 - size, left + min(natural, right - left), y1), 0


def _apart(words: list, rotation: int) -> list:
    """(text, box) of a line's words, each ending at least WORD_GAP of its height before the next begins.

    An engine's word boxes may touch; a reader joins touching words into one (pdftotext reads
    "MASAI" and "JOHOR" as "MASAIJOHOR"), so a word is shortened at its end to leave the gap a reader
    takes for a space. `rotation` says which way the line runs on the page as uploaded.
    """
    placed = [(w.text, list(w.bbox)) for w in words]
    # (the box's end along the line, the next box's start, which way the line runs): x0 y0 x1 y1 = 0 1 2 3
    end, start, forward = {0: (2, 0, 1), 90: (1, 3, -1), 180: (0, 2, -1), 270: (3, 1, 1)}[rotation % 360]
    across = 3 if rotation % 180 == 0 else 2  # the word's height runs across the line
    for (_, box), (_, following) in zip(placed, placed[1:]):
        height = box[across] - box[across - 2]
        room = (following[start] - box[end]) * forward
        if room < WORD_GAP * height:
            length = (box[end] - box[start]) * forward
            shortened = max(length - (WORD_GAP * height - room), length / 2)
            box[end] = box[start] + forward * shortened
    return [(text, tuple(box)) for text, box in placed]


def _with_spaces(placed: list, rotation: int) -> list:
    """The words with a real space drawn in the gap between each two of a line: a reader that does not
    infer spaces from gaps (pypdf, most indexers) reads words, not one run of letters. A line's end is
    where the next line's text matrix starts elsewhere, which readers take for a line break."""
    end, start, _ = {0: (2, 0, 1), 90: (1, 3, -1), 180: (0, 2, -1), 270: (3, 1, 1)}[rotation % 360]
    spaced = []
    for (text, box), following in zip(placed, placed[1:] + [None]):
        spaced.append((text, box))
        if following is not None:
            gap = list(box)
            gap[start], gap[end] = box[end], following[1][start]
            if gap[2] > gap[0] and gap[3] > gap[1]:
                spaced.append((" ", tuple(gap)))
    return spaced


def _word_ops(text: str, box: tuple, direction: int, font: str) -> str:
    a0, b0, a1, b1 = box
    width, height = a1 - a0, b1 - b0
    # The corner the word starts from and how long it runs, for text turned `direction` degrees
    # anticlockwise on the displayed page (the orientation step's clockwise turn undone).
    origin, run, size = {0: ((a0, b0), width, height), 90: ((a1, b0), height, width),
                         180: ((a1, b1), width, height), 270: ((a0, b1), height, width)}[direction % 360]
    code = text.encode("utf-16-be")
    units = len(code) // 2
    if size <= 0 or run <= 0 or units == 0:
        return ""
    angle = math.radians(direction)
    cos, sin = round(math.cos(angle), 6), round(math.sin(angle), 6)
    x, y = origin[0] - sin * DESCENT * size, origin[1] + cos * DESCENT * size
    stretch = 100 * run / (units * ADVANCE * size)
    return (f"{font} {size:.3f} Tf {stretch:.3f} Tz {cos:g} {sin:g} {-sin:g} {cos:g} {x:.3f} {y:.3f} Tm "
            f"<{code.hex()}> Tj")
