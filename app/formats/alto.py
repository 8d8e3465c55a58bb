"""ALTO v4.4 (https://www.loc.gov/standards/alto/), valid against app/formats/schemas/alto-4-4.xsd.

Measurements are pixels of each page as uploaded. Each region of the page (app/structure) is a TextBlock
whose TAGREFS name its type (a LayoutTag per type in Tags: title, text, caption, header, footer, ...);
a table is a ComposedBlock of TYPE "table" holding its lines' TextBlock, and a figure a ComposedBlock of
TYPE "figure" holding an Illustration and whatever text was read in it. Each line is a TextLine of
Strings with their word confidence (WC, 0-1) and SP between them. A page without boxes (a VLM's Markdown) has TextLines without
positions, and its Page says so in QUALITY_DETAIL; a
failed page of a partial job is an empty Page with QUALITY="Missing".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from app import __version__
from app.formats.pages import PageLayout, clean, page_layouts, union

NAMESPACE = "http://www.loc.gov/standards/alto/ns-v4#"
SCHEMA_LOCATION = f"{NAMESPACE} http://www.loc.gov/standards/alto/v4/alto-4-4.xsd"


def render_alto(pages: list, engine: str, file_name: str = "") -> bytes:
    alto = ET.Element("alto", {"xmlns": NAMESPACE, "xmlns:xsi": "http://www.w3.org/2001/XMLSchema-instance",
                               "xsi:schemaLocation": SCHEMA_LOCATION})
    description = ET.SubElement(alto, "Description")
    ET.SubElement(description, "MeasurementUnit").text = "pixel"
    source = ET.SubElement(description, "sourceImageInformation")
    ET.SubElement(source, "fileName").text = clean(file_name)
    processing = ET.SubElement(description, "Processing", {"ID": "OCR_0"})
    software = ET.SubElement(processing, "processingSoftware")
    ET.SubElement(software, "softwareName").text = "offline-ocr-serve"
    ET.SubElement(software, "softwareVersion").text = f"{__version__} ({engine})"
    layouts = page_layouts(pages)
    kinds = sorted({region.type for page in layouts for region in page.regions})
    if kinds:
        tags = ET.SubElement(alto, "Tags")
        for kind in kinds:
            ET.SubElement(tags, "LayoutTag", {"ID": f"TAG_{kind}", "LABEL": kind})
    layout = ET.SubElement(alto, "Layout")
    for index, page in enumerate(layouts):
        _page(layout, index, page)
    ET.indent(alto, space=" ")
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(alto, encoding="utf-8") + b"\n"


def _page(layout: ET.Element, index: int, page: PageLayout) -> None:
    n = page.page_number
    attributes = {"ID": f"page_{n}", "PHYSICAL_IMG_NR": str(n), "WIDTH": str(page.width), "HEIGHT": str(page.height),
                  "PROCESSINGREFS": "OCR_0"}
    if page.failed:
        attributes.update(QUALITY="Missing", QUALITY_DETAIL="the page could not be read")
    elif not page.boxed and page.text.strip():
        attributes["QUALITY_DETAIL"] = "text only: the engine gave no positions"
    element = ET.SubElement(layout, "Page", attributes)
    space = ET.SubElement(element, "PrintSpace", {"HPOS": "0", "VPOS": "0", "WIDTH": str(page.width),
                                                  "HEIGHT": str(page.height)})
    if page.failed:
        return
    if page.lines:
        line_number = 1
        for k, region in enumerate(page.regions, 1):
            line_number = _region(space, n, k, region, line_number)
        return
    text_lines = [line for line in page.text.splitlines() if line.strip()]
    if text_lines:
        block = ET.SubElement(space, "TextBlock", {"ID": f"block_{n}_1"})
        for i, text in enumerate(text_lines, 1):
            text_line = ET.SubElement(block, "TextLine", {"ID": f"line_{n}_{i}"})
            for j, token in enumerate(text.split(), 1):
                if j > 1:
                    ET.SubElement(text_line, "SP")
                ET.SubElement(text_line, "String", {"ID": f"string_{n}_{i}_{j}", "CONTENT": clean(token)})


def _region(space: ET.Element, n: int, k: int, region, line_number: int) -> int:
    """One region: a TextBlock tagged with its type, inside a ComposedBlock for a table or a figure."""
    boxes = [line.bbox for line in region.lines] + ([region.bbox] if region.bbox else [])
    if not boxes:
        return line_number
    parent, tag = space, {"TAGREFS": f"TAG_{region.type}"}
    if region.type in ("table", "figure"):
        parent = ET.SubElement(space, "ComposedBlock", {"ID": f"composed_{n}_{k}", "TYPE": region.type, **tag,
                                                        **_position(union(boxes))})
        if region.type == "figure":
            ET.SubElement(parent, "Illustration", {"ID": f"illustration_{n}_{k}", "TYPE": "figure",
                                                   **_position(region.bbox or union(boxes))})
    if not region.lines:
        return line_number
    block = ET.SubElement(parent, "TextBlock", {"ID": f"block_{n}_{k}", **tag,
                                                **_position(union([line.bbox for line in region.lines]))})
    for line in region.lines:
        text_line = ET.SubElement(block, "TextLine", {"ID": f"line_{n}_{line_number}", **_position(line.bbox)})
        for j, word in enumerate(line.words, 1):
            if j > 1:
                ET.SubElement(text_line, "SP")
            ET.SubElement(text_line, "String", {"ID": f"string_{n}_{line_number}_{j}", "CONTENT": clean(word.text),
                                                "WC": f"{min(max(word.confidence, 0.0), 1.0):.4f}",
                                                **_position(word.bbox)})
        line_number += 1
    return line_number


def _position(box) -> dict:
    x0, y0, x1, y1 = box
    return {"HPOS": f"{x0:g}", "VPOS": f"{y0:g}", "WIDTH": f"{x1 - x0:g}", "HEIGHT": f"{y1 - y0:g}"}
