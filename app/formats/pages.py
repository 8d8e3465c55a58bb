"""The JSON page results (app/pipeline/postprocess.py) as lines of words, for every output format.

Coordinates stay as the JSON gives them: pixels of the page as uploaded (the decoded image after its
EXIF turn, or the PDF page rendered at `dpi`), before the orientation step's turn, which `rotation` names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Word:
    text: str
    bbox: tuple  # (x0, y0, x1, y1), pixels of the page as uploaded
    confidence: float


@dataclass
class TextLine:
    words: list

    @property
    def bbox(self) -> tuple:
        return union([w.bbox for w in self.words])

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)


@dataclass
class Region:
    type: str  # text, title, table, figure, figure_caption, table_caption, header, footer, reference, equation
    bbox: Optional[tuple]  # None where the engine gave no positions (a VLM's Markdown)
    lines: list = field(default_factory=list)  # list[TextLine], in reading order
    text: str = ""


@dataclass
class PageLayout:
    page_number: int  # 1-based, in the source document
    width: int
    height: int
    dpi: Optional[float]
    rotation: int  # clockwise degrees the orientation step turned the page to read it
    lines: list = field(default_factory=list)  # list[TextLine], in reading order
    text: str = ""  # the page's text; for a page without boxes (a VLM's Markdown) the only thing there is
    failed: bool = False  # a page of a partial job that could not be read
    regions: list = field(default_factory=list)  # list[Region], in reading order: the lines, typed

    @property
    def boxed(self) -> bool:
        """False for a page whose engine wrote text without saying where: page-level text only."""
        return bool(self.lines)


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def clean(text: str) -> str:
    """Text as XML 1.0 can carry it: control characters (a file name's, a VLM's) become U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def union(boxes: list) -> tuple:
    """The smallest (x0, y0, x1, y1) holding every box."""
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def page_layouts(pages: list) -> list:
    return [page_layout(page) for page in pages]


def page_layout(page: dict) -> PageLayout:
    if page.get("error"):  # a failed page of a partial job: its number and size, nothing read
        return PageLayout(page["page_number"], page.get("width") or 0, page.get("height") or 0, page.get("dpi"),
                          0, failed=True)
    by_line: dict = {}
    region_of: dict = {}
    for block in page.get("blocks", []):
        by_line.setdefault(block["line"], []).extend(_words(block))
        region_of.setdefault(block["line"], block.get("region"))
    lines = {number: TextLine(words) for number, words in sorted(by_line.items()) if words}
    return PageLayout(page["page_number"], page["width"], page["height"], page.get("dpi"), page.get("rotation", 0),
                      list(lines.values()), page.get("text", ""), regions=_regions(page, lines, region_of))


def _regions(page: dict, lines: dict, region_of: dict) -> list:
    """The page's regions with their lines; a result without regions (from before them) is one text region."""
    found = page.get("regions")
    if not found:
        return [Region("text", union([line.bbox for line in lines.values()]), list(lines.values()))] if lines else []
    regions = [Region(r["type"], tuple(r["bbox"]) if r.get("bbox") else None, [], r.get("text", "")) for r in found]
    for number, line in lines.items():
        index = region_of.get(number)
        if isinstance(index, int) and 0 <= index < len(regions):
            regions[index].lines.append(line)
    return regions


def _words(block: dict) -> list:
    if block.get("words"):
        return [Word(w["text"], tuple(w["bbox"]), w["confidence"]) for w in block["words"] if w["text"].strip()]
    if block["text"].strip():  # an engine that boxes lines only: the line is its one word
        return [Word(block["text"].strip(), tuple(block["bbox"]), block["confidence"])]
    return []
