"""The CPU postprocessing deployment: engine lines in, the page's JSON result out."""

from __future__ import annotations

import asyncio
import time
from typing import Optional

from ray import serve

from app.ops import metrics
from app.structure.layout import box_from_quad
from app.orientation.geometry import unturn_point
from app.schemas import PageOCR, PagePayload, PageStructure
from app.structure.join import structured_blocks
from app.structure.markdown_blocks import markdown_blocks
from app.structure.render import blocks_markdown, blocks_text
from app.ops.replica import harden_process


def build_page_result(ocr: PageOCR, structure: Optional[PageStructure] = None) -> dict:
    """Boxes are returned in source pixels of the page as uploaded (the decoded image, or the PDF
    page rendered at `dpi`), before any turn; reading order is worked out on the upright page.

    `blocks` are the page's lines (each engine box, with its words) in reading order, each naming
    its `region`; `regions` are the typed blocks those lines make (title, text, table, ...), and
    `tables` the table regions' cells. A VLM's page has regions and tables parsed from its own
    Markdown, without boxes."""
    start = time.perf_counter()
    page, result = ocr.page, ocr.result
    if result.markdown is not None:  # the engine wrote the page itself: keep its structure
        text = markdown = clean_engine_markdown(result.markdown)
        blocks, regions, tables = [], *_written_regions(markdown)
    else:
        boxes = [box_from_quad(line.quad, page.scale, line.text, line.confidence, line.words) for line in result.lines]
        typed = structured_blocks(boxes, structure, page.scale)
        text, markdown = blocks_text(typed), blocks_markdown(typed)
        blocks, regions, tables = _located_regions(typed, page)
    timings = {**page.timings_ms, **ocr.timings_ms, **_structure_timings(structure),
               "postprocess": round((time.perf_counter() - start) * 1000, 1)}
    notes = [note for note in (page.rotation_note, page.text_note) if note] + list(result.notes)
    if structure is not None and structure.note:
        notes.append(structure.note)
    return {
        "index": page.index,
        "page_number": page.page_number,
        "width": page.source_width,
        "height": page.source_height,
        "dpi": round(page.dpi, 2) if page.dpi else None,
        "rotation": page.rotation,
        "rotation_confidence": page.rotation_confidence,
        "text": text,
        "markdown": markdown,
        "text_source": page.text_source,
        "blocks": blocks,
        "regions": regions,
        "tables": tables,
        "valid": result.valid,
        "finish_reason": result.finish_reason,
        "generated_tokens": result.generated_tokens,  # a VLM engine's tokens for the page; null for ppocr
        "prompt_tokens": result.prompt_tokens,  # its prompt's, image included, where the engine says (vllm)
        "notes": notes,
        "batch": {"size": ocr.batch_size, "pixels": ocr.batch_pixels},
        "timings_ms": timings,
    }


def _located_regions(typed: list, page: PagePayload) -> tuple[list, list, list]:
    """The lines (`blocks`), the typed regions and the tables, every box on the page as uploaded."""
    blocks, regions, tables = [], [], []
    line_index = 0
    for region_index, block in enumerate(typed):
        table_index = None
        if block.table is not None:
            table_index = len(tables)
            table = block.table.as_json()
            for cell in table["cells"]:
                cell["bbox"] = None if cell["bbox"] is None else uploaded_bbox(cell["bbox"], page)
            tables.append({"region": region_index, "bbox": uploaded_bbox(block.bbox, page), **table})
        regions.append({"type": block.type, "bbox": uploaded_bbox(block.bbox, page), "text": block.text,
                        "table": table_index})
        for line in block.lines:
            for b in line.boxes:
                blocks.append({
                    "bbox": uploaded_bbox(b, page), "text": b.text, "confidence": round(b.confidence, 4),
                    "line": line_index, "type": block.type, "region": region_index,
                    "words": [{"text": w.text, "bbox": uploaded_bbox(w, page), "confidence": round(w.confidence, 4)}
                              for w in b.words],
                })
            line_index += 1
    return blocks, regions, tables


def _written_regions(markdown: str) -> tuple[list, list]:
    """A VLM's regions and tables from its own Markdown: the same shape, without boxes."""
    regions, tables = [], []
    for index, block in enumerate(markdown_blocks(markdown)):
        table_index = None
        if block.table is not None:
            table_index = len(tables)
            tables.append({"region": index, "bbox": None, **block.table.as_json()})
        regions.append({"type": block.type, "bbox": None, "text": block.text, "table": table_index})
    return regions, tables


def _structure_timings(structure: Optional[PageStructure]) -> dict:
    if structure is None:
        return {}
    return {f"structure_{stage}": ms for stage, ms in structure.timings_ms.items()}


def uploaded_bbox(box, page: PagePayload) -> list[float]:
    """A box on the upright page (a Box, or an (x0, y0, x1, y1)), as [x0, y0, x1, y1] on the page as uploaded,
    within the page: a detector's quad may reach past the edge of a tight crop (a text line 39 pixels high
    boxed to 49)."""
    x0, y0, x1, y1 = (box.x0, box.y0, box.x1, box.y1) if hasattr(box, "x0") else box
    corners = [unturn_point(x, y, page.rotation, page.source_width, page.source_height)
               for x, y in ((x0, y0), (x1, y1))]
    xs = [min(max(x, 0.0), page.source_width) for x, _ in corners]
    ys = [min(max(y, 0.0), page.source_height) for _, y in corners]
    return [round(min(xs), 1), round(min(ys), 1), round(max(xs), 1), round(max(ys), 1)]


def clean_engine_markdown(markdown: str) -> str:
    """Trim trailing spaces on each line and runs of more than one blank line."""
    lines = [line.rstrip() for line in markdown.strip().splitlines()]
    cleaned: list[str] = []
    for line in lines:
        if line or (cleaned and cleaned[-1]):
            cleaned.append(line)
    return "\n".join(cleaned)


@serve.deployment  # its options: app/serve/builder.py (defaults) and serve_config.yaml (the fleet)
class Postprocessor:
    def __init__(self):
        harden_process()  # first: nothing below may leave a secret readable through /proc

    async def process(self, ocr: PageOCR, structure: Optional[PageStructure] = None) -> dict:
        result = await asyncio.to_thread(build_page_result, ocr, structure)
        metrics.stage("postprocess", result["timings_ms"]["postprocess"] / 1000)
        return result
