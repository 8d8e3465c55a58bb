"""ALTO v4.4 (https://www.loc.gov/standards/alto/), valid against app/formats/schemas/alto-4-4.xsd.

Measurements are pixels of each page as uploaded. Each line is a TextLine of Strings with their word
confidence (WC, 0-1) and SP between them. A page without boxes (a VLM's Markdown) has TextLines without
positions, and its Page says so in QUALITY_DETAIL; a
failed page of a partial job is an empty Page with QUALITY="Missing".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from app import __version__
from app.formats.pages import PageLayout, page_layouts, union

NAMESPACE = "http://www.loc.gov/standards/alto/ns-v4#"
SCHEMA_LOCATION = f"{NAMESPACE} http://www.loc.gov/standards/alto/v4/alto-4-4.xsd"


def render_alto(pages: list, engine: str, file_name: str = "") -> bytes:
    alto = ET.Element("alto", {"xmlns": NAMESPACE, "xmlns:xsi": "http://www.w3.org/2001/XMLSchema-instance",
                               "xsi:schemaLocation": SCHEMA_LOCATION})
    description = ET.SubElement(alto, "Description")
    ET.SubElement(description, "MeasurementUnit").text = "pixel"
    source = ET.SubElement(description, "sourceImageInformation")
    ET.SubElement(source, "fileName").text = file_name
    processing = ET.SubElement(description, "Processing", {"ID": "OCR_0"})
    software = ET.SubElement(processing, "processingSoftware")
    ET.SubElement(software, "softwareName").text = "offline-ocr-serve"
    ET.SubElement(software, "softwareVersion").text = f"{__version__} ({engine})"
    layout = ET.SubElement(alto, "Layout")
    for index, page in enumerate(page_layouts(pages)):
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
        block = ET.SubElement(space, "TextBlock", {"ID": f"block_{n}_1", **_position(union([line.bbox for line in page.lines]))})
        for i, line in enumerate(page.lines, 1):
            text_line = ET.SubElement(block, "TextLine", {"ID": f"line_{n}_{i}", **_position(line.bbox)})
            for j, word in enumerate(line.words, 1):
                if j > 1:
                    ET.SubElement(text_line, "SP")
                ET.SubElement(text_line, "String", {"ID": f"string_{n}_{i}_{j}", "CONTENT": word.text,
                                                    "WC": f"{min(max(word.confidence, 0.0), 1.0):.4f}",
                                                    **_position(word.bbox)})
        return
    text_lines = [line for line in page.text.splitlines() if line.strip()]
    if text_lines:
        block = ET.SubElement(space, "TextBlock", {"ID": f"block_{n}_1"})
        for i, text in enumerate(text_lines, 1):
            text_line = ET.SubElement(block, "TextLine", {"ID": f"line_{n}_{i}"})
            for j, token in enumerate(text.split(), 1):
                if j > 1:
                    ET.SubElement(text_line, "SP")
                ET.SubElement(text_line, "String", {"ID": f"string_{n}_{i}_{j}", "CONTENT": token})


def _position(box) -> dict:
    x0, y0, x1, y1 = box
    return {"HPOS": f"{x0:g}", "VPOS": f"{y0:g}", "WIDTH": f"{x1 - x0:g}", "HEIGHT": f"{y1 - y0:g}"}
