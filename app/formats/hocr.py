"""hOCR 1.2 (http://kba.github.io/hocr-spec/1.2/): pages, their regions, lines, words.

Each region of the page (app/structure) is an element of its own class, as the spec names them, with one
paragraph of its lines: text and references `ocr_carea`, a title `ocr_title`, a table `ocr_table`, a caption `ocr_caption`, a page header `ocr_header` and footer `ocr_footer`, a
figure `ocr_float` (`ocr_image` where nothing was read in it), an equation `ocr_display`.

Every element's `bbox` is in pixels of the page as uploaded; words carry `x_wconf` (0-100). A page whose
engine wrote text without saying where (a VLM's Markdown) has its lines with the page's bbox and no
words, and the head names such pages in `<meta name="text-only-pages">`. A failed page of a partial job
is an empty `ocr_page`, named in `<meta name="failed-pages">`. (Not `ocr-` names: hOCR reserves those
for its own metadata fields, and a validator refuses others.)
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from app import __version__
from app.formats.pages import PageLayout, clean, page_layouts, union

XHTML = "http://www.w3.org/1999/xhtml"
CAPABILITIES = ("ocr_page ocr_carea ocr_par ocr_line ocrx_word ocrp_wconf ocr_title ocr_table ocr_caption "
                "ocr_header ocr_footer ocr_float ocr_image ocr_display")
REGION_CLASS = {"title": "ocr_title", "table": "ocr_table", "figure_caption": "ocr_caption", "table_caption": "ocr_caption",
                "header": "ocr_header", "footer": "ocr_footer", "figure": "ocr_float", "equation": "ocr_display"}


def render_hocr(pages: list, engine: str) -> bytes:
    layouts = page_layouts(pages)
    html = ET.Element("html", {"xmlns": XHTML, "xml:lang": "en", "lang": "en"})
    head = ET.SubElement(html, "head")
    ET.SubElement(head, "title").text = "OCR"
    ET.SubElement(head, "meta", {"http-equiv": "Content-Type", "content": "text/html;charset=utf-8"})
    ET.SubElement(head, "meta", {"name": "ocr-system", "content": f"offline-ocr-serve {__version__} ({engine})"})
    ET.SubElement(head, "meta", {"name": "ocr-capabilities", "content": CAPABILITIES})
    ET.SubElement(head, "meta", {"name": "ocr-number-of-pages", "content": str(len(layouts))})
    for name, chosen in (("text-only-pages", [p for p in layouts if not p.failed and not p.boxed and p.text]),
                         ("failed-pages", [p for p in layouts if p.failed])):
        if chosen:
            ET.SubElement(head, "meta", {"name": name, "content": " ".join(str(p.page_number) for p in chosen)})
    body = ET.SubElement(html, "body")
    for index, page in enumerate(layouts):
        _page(body, index, page)
    ET.indent(html, space=" ")
    return (b'<?xml version="1.0" encoding="UTF-8"?>\n'
            b'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" '
            b'"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
            + ET.tostring(html, encoding="utf-8") + b"\n")


def _page(body: ET.Element, index: int, page: PageLayout) -> None:
    n = page.page_number
    title = f"{_bbox((0, 0, page.width, page.height))}; ppageno {index}"
    if page.dpi:
        title += f"; scan_res {round(page.dpi)} {round(page.dpi)}"
    element = ET.SubElement(body, "div", {"class": "ocr_page", "id": f"page_{n}", "title": title})
    if page.failed or not (page.lines or page.text.strip()):
        element.text = " "  # <div/> is no empty div to an HTML parser
        return
    if page.lines:
        line_number = 1
        for k, region in enumerate(page.regions, 1):
            line_number = _region(element, n, k, region, line_number)
        return
    area = _bbox((0, 0, page.width, page.height))
    carea = ET.SubElement(element, "div", {"class": "ocr_carea", "id": f"block_{n}_1", "title": area})
    par = ET.SubElement(carea, "p", {"class": "ocr_par", "id": f"par_{n}_1", "title": area})
    for i, text in enumerate([line for line in page.text.splitlines() if line.strip()], 1):  # no boxes: page-level text, line by line
        span = ET.SubElement(par, "span", {"class": "ocr_line", "id": f"line_{n}_{i}", "title": area})
        span.text = clean(text)


def _region(page: ET.Element, n: int, k: int, region, line_number: int) -> int:
    """One region and its paragraph of lines; returns the next line's number."""
    boxes = [line.bbox for line in region.lines] + ([region.bbox] if region.bbox else [])
    if not boxes:
        return line_number
    area = _bbox(union(boxes))
    kind = REGION_CLASS.get(region.type, "ocr_carea")
    if region.type == "figure" and not region.lines:
        kind = "ocr_image"
    container = ET.SubElement(page, "div", {"class": kind, "id": f"block_{n}_{k}", "title": area})
    if not region.lines:
        container.text = " "
        return line_number
    par_area = _bbox(union([line.bbox for line in region.lines]))
    par = ET.SubElement(container, "p", {"class": "ocr_par", "id": f"par_{n}_{k}", "title": par_area})
    for line in region.lines:
        span = ET.SubElement(par, "span", {"class": "ocr_line", "id": f"line_{n}_{line_number}", "title": _bbox(line.bbox)})
        for j, word in enumerate(line.words, 1):
            w = ET.SubElement(span, "span", {"class": "ocrx_word", "id": f"word_{n}_{line_number}_{j}",
                                             "title": f"{_bbox(word.bbox)}; x_wconf {round(word.confidence * 100)}"})
            w.text = clean(word.text)
            w.tail = " "
        line_number += 1
    return line_number


def _bbox(box) -> str:
    x0, y0, x1, y1 = box
    return f"bbox {int(x0)} {int(y0)} {int(round(x1))} {int(round(y1))}"
