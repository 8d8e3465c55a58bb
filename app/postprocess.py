"""The CPU postprocessing deployment: engine lines in, the page's JSON result out."""

from __future__ import annotations

import asyncio
import time

from ray import serve

from app.layout import box_from_quad, page_markdown, page_text, paragraphs, reading_order
from app.schemas import PageOCR


def build_page_result(ocr: PageOCR) -> dict:
    """Boxes are returned in source pixels: the decoded image, or the PDF page rendered at `dpi`."""
    start = time.perf_counter()
    page = ocr.page
    boxes = [box_from_quad(line.quad, page.scale, line.text, line.confidence) for line in ocr.lines]
    lines = reading_order(boxes)
    groups = paragraphs(lines)
    blocks = [
        {
            "bbox": [round(b.x0, 1), round(b.y0, 1), round(b.x1, 1), round(b.y1, 1)],
            "text": b.text,
            "confidence": round(b.confidence, 4),
            "line": line_index,
        }
        for line_index, line in enumerate(lines)
        for b in line.boxes
    ]
    timings = {**page.timings_ms, **ocr.timings_ms, "postprocess": round((time.perf_counter() - start) * 1000, 1)}
    return {
        "index": page.index,
        "page_number": page.page_number,
        "width": page.source_width,
        "height": page.source_height,
        "dpi": round(page.dpi, 2) if page.dpi else None,
        "text": page_text(groups),
        "markdown": page_markdown(groups),
        "blocks": blocks,
        "batch": {"size": ocr.batch_size, "pixels": ocr.batch_pixels},
        "timings_ms": timings,
    }


@serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
class Postprocessor:
    async def process(self, ocr: PageOCR) -> dict:
        return await asyncio.to_thread(build_page_result, ocr)
