"""What hocr-spec does not check of an hOCR document, by the hOCR 1.2 spec (kba.github.io/hocr-spec/1.2/):
it accepts an unknown class, a word without a bbox, or a line outside its paragraph. Here:
- every `ocr*` class is one the spec defines, and is declared in `ocr-capabilities`;
- the layout nests as the spec says: ocrx_word in ocr_line, ocr_line in ocr_par, ocr_par in a content
  area (ocr_carea) or a float or logical block the spec names (ocr_title, ocr_table, ocr_caption, ocr_header,
  ocr_footer, ocr_float, ocr_display, as ABBYY's hOCR puts ocr_par in ocr_footer), those in ocr_page;
- every such element has a bbox of four integers, inside its parent's bbox and inside the page;
- x_wconf, where given, is a number from 0 to 100.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

XHTML = "{http://www.w3.org/1999/xhtml}"
# The classes of the spec's "Logical structure", "Typesetting" and "Engine-specific" sections we may meet
KNOWN = {"ocr_document", "ocr_title", "ocr_author", "ocr_abstract", "ocr_part", "ocr_chapter", "ocr_section",
         "ocr_subsection", "ocr_subsubsection", "ocr_display", "ocr_blockquote", "ocr_par", "ocr_linear",
         "ocr_caption", "ocr_page", "ocr_column", "ocr_carea", "ocr_line", "ocr_separator", "ocr_noise",
         "ocr_float", "ocr_textfloat", "ocr_textimage", "ocr_image", "ocr_photo", "ocr_header", "ocr_footer",
         "ocr_pageno", "ocr_table", "ocr_glyph", "ocr_glyphs", "ocr_dropcap", "ocr_chem", "ocr_math",
         "ocr_cinfo", "ocrx_block", "ocrx_line", "ocrx_word"}
AREAS = ("ocr_carea", "ocr_title", "ocr_table", "ocr_caption", "ocr_header", "ocr_footer", "ocr_float", "ocr_display")
PARENT = {"ocrx_word": ("ocr_line",), "ocr_line": ("ocr_par",), "ocr_par": AREAS,
          **{area: ("ocr_page",) for area in AREAS + ("ocr_image",)}}
BBOX = re.compile(r"(?:^|;)\s*bbox (-?\d+) (-?\d+) (-?\d+) (-?\d+)\s*(?:;|$)")
WCONF = re.compile(r"(?:^|;)\s*x_wconf (\S+)\s*(?:;|$)")


def hocr_problems(document: bytes) -> list[str]:
    root = ET.fromstring(document)
    declared = set()
    for meta in root.iter(f"{XHTML}meta"):
        if meta.get("name") == "ocr-capabilities":
            declared = set(meta.get("content", "").split())
    problems: list[str] = []
    _walk(root, None, None, declared, problems)
    return problems


def _walk(element, ocr_parent, parent_box, declared: set, problems: list) -> None:
    classes = [c for c in (element.get("class") or "").split() if c.startswith("ocr")]
    box = parent_box
    owner = ocr_parent
    for name in classes:
        where = f"{name} {element.get('id')!r}"
        if name not in KNOWN:
            problems.append(f"{where}: not a class of the hOCR spec")
        if name not in declared:
            problems.append(f"{where}: not declared in ocr-capabilities")
        if name in PARENT and ocr_parent not in PARENT[name]:
            problems.append(f"{where}: inside {ocr_parent}, where the spec puts it in {' or '.join(PARENT[name])}")
        title = element.get("title") or ""
        found = BBOX.search(title)
        if found is None:
            problems.append(f"{where}: no bbox")
        else:
            box = tuple(int(v) for v in found.groups())
            if box[0] > box[2] or box[1] > box[3]:
                problems.append(f"{where}: bbox {box} is inverted")
            if parent_box and not (parent_box[0] <= box[0] and parent_box[1] <= box[1]
                                   and box[2] <= parent_box[2] and box[3] <= parent_box[3]):
                problems.append(f"{where}: bbox {box} is outside its parent's {parent_box}")
        confidence = WCONF.search(title)
        if confidence and not 0 <= float(confidence.group(1)) <= 100:
            problems.append(f"{where}: x_wconf {confidence.group(1)} is not 0-100")
        owner = name
    for child in element:
        _walk(child, owner, box, declared, problems)
