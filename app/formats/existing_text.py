"""The text a PDF page already has, as the searchable PDF must respect it (app/formats/searchable_pdf.py):
`format=pdf` never doubles a text layer.

- Visible text is kept as it is, and no word of ours is drawn over it: a page read from its own layer
  gets no layer of ours, and on a page with a picture beside real text, only the words read in the
  picture are added.
- Invisible text (render mode 3) is an earlier OCR's layer: it is taken out and ours replaces it, as
  OCRmyPDF's --redo-ocr does. (Text inside Form XObjects is left alone.)
"""

from __future__ import annotations

import pikepdf

_COVERED = 0.5  # a word of ours is dropped where visible text covers this share of its box
_SHOW_TEXT = ("Tj", "TJ", "'", '"')


def strip_invisible_text(pdf: pikepdf.Pdf, page: pikepdf.Page) -> int:
    """Take out the page's text drawn in render mode 3; returns how many text-showing operators went."""
    kept, mode, saved, removed = [], 0, [], 0
    for operands, operator in pikepdf.parse_content_stream(page):
        name = str(operator)
        if name == "q":
            saved.append(mode)
        elif name == "Q":
            mode = saved.pop() if saved else 0
        elif name == "Tr" and operands:
            mode = int(operands[0])
        elif name in _SHOW_TEXT and mode == 3:
            removed += 1
            if name == "'":  # moves to the next line, then shows: keep the move
                kept.append(([], pikepdf.Operator("T*")))
            elif name == '"':
                kept += [([operands[0]], pikepdf.Operator("Tw")), ([operands[1]], pikepdf.Operator("Tc")),
                         ([], pikepdf.Operator("T*"))]
            continue
        kept.append((operands, operator))
    if removed:
        page.obj.Contents = pdf.make_stream(pikepdf.unparse_content_stream(kept))
    return removed


def visible_text_boxes(document, page_number: int, size: tuple[int, int], visible_lines) -> list:
    """Line boxes of the page's visible, mapped text, in pixels of the page at `size` (its dpi's);
    `document` is the PDF opened once with PDFium for all its pages, `visible_lines` the decoder's reader
    of a page's text (app/sandbox/pdf_text.py)."""
    page = document[page_number - 1]
    try:
        return [line.box for line in visible_lines(page, size)]
    finally:
        page.close()


def uncovered(words: list, boxes: list) -> list:
    """The words (with .bbox) that no visible text covers: neither their centre lies in a line of it, nor
    does it cover half their box (an OCR box is padded; a typeset line's box is the font's)."""
    return [w for w in words if not _centre_inside(w.bbox, boxes) and _covered_share(w.bbox, boxes) < _COVERED]


def _centre_inside(box, boxes: list) -> bool:
    x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in boxes)


def _covered_share(box, boxes: list) -> float:
    area = max(1e-9, (box[2] - box[0]) * (box[3] - box[1]))
    covered = sum(max(0.0, min(box[2], b[2]) - max(box[0], b[0])) * max(0.0, min(box[3], b[3]) - max(box[1], b[1]))
                  for b in boxes)
    return min(1.0, covered / area)
