"""The CPU postprocessing deployment: engine lines in, the page's JSON result out."""

from __future__ import annotations

import asyncio
import time

from ray import serve

from app.ops import metrics
from app.pipeline.layout import Box, box_from_quad, page_markdown, page_text, paragraphs, reading_order
from app.orientation.geometry import unturn_point
from app.schemas import PageOCR, PagePayload


def build_page_result(ocr: PageOCR) -> dict:
    """Boxes are returned in source pixels of the page as uploaded (the decoded image, or the PDF
    page rendered at `dpi`), before any turn; reading order is worked out on the upright page."""
    start = time.perf_counter()
    page, result = ocr.page, ocr.result
    boxes = [box_from_quad(line.quad, page.scale, line.text, line.confidence, line.words) for line in result.lines]
    lines = reading_order(boxes)
    groups = paragraphs(lines)
    if result.markdown is not None:  # the engine wrote the page itself: keep its structure
        text = markdown = clean_engine_markdown(result.markdown)
    else:
        text, markdown = page_text(groups), page_markdown(groups)
    blocks = [
        {
            "bbox": uploaded_bbox(b, page),
            "text": b.text,
            "confidence": round(b.confidence, 4),
            "line": line_index,
            "words": [{"text": w.text, "bbox": uploaded_bbox(w, page), "confidence": round(w.confidence, 4)}
                      for w in b.words],
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
        "rotation": page.rotation,
        "rotation_confidence": page.rotation_confidence,
        "text": text,
        "markdown": markdown,
        "blocks": blocks,
        "valid": result.valid,
        "finish_reason": result.finish_reason,
        "generated_tokens": result.generated_tokens,  # a VLM engine's tokens for the page; null for ppocr
        "prompt_tokens": result.prompt_tokens,  # its prompt's, image included, where the engine says (vllm)
        "notes": ([page.rotation_note] if page.rotation_note else []) + list(result.notes),
        "batch": {"size": ocr.batch_size, "pixels": ocr.batch_pixels},
        "timings_ms": timings,
    }


def uploaded_bbox(box: Box, page: PagePayload) -> list[float]:
    """A box on the upright page, as [x0, y0, x1, y1] on the page as uploaded, within the page: a detector's
    quad may reach past the edge of a tight crop (a text line 39 pixels high boxed to 49)."""
    corners = [unturn_point(x, y, page.rotation, page.source_width, page.source_height)
               for x, y in ((box.x0, box.y0), (box.x1, box.y1))]
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
    async def process(self, ocr: PageOCR) -> dict:
        result = await asyncio.to_thread(build_page_result, ocr)
        metrics.stage("postprocess", result["timings_ms"]["postprocess"] / 1000)
        return result
