"""How an OCR replica batches pages: a batch's cost in page slots, a page waiting in the
batcher, and what one engine call records. Pure, apart from the metrics it records."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

from app.ops import metrics
from app.schemas import PageOCR, PagePayload


def batch_cost(pages: list, max_batch_size: int, max_batch_pixels: int) -> int:
    """Batch size in page slots, counting pixels too: fits iff pages <= max and pixels <= budget.

    `@serve.batch` compares this with `max_batch_size`. A page's pixels are capped at the
    budget so one page alone always fits. It must never raise (an exception here hangs
    the batch queue, ray-project/ray#66140), so anything odd counts as one full slot.
    """
    try:
        pixels = sum(min(page.pixels, max_batch_pixels) for page in pages)
        by_pixels = math.ceil(pixels * max_batch_size / max_batch_pixels)
        return max(len(pages), by_pixels)
    except Exception:
        return len(pages)


@dataclasses.dataclass
class Queued:
    """A page in the batcher, with when it arrived: its wait is the `queue_wait` stage."""

    page: PagePayload
    since: float = dataclasses.field(default_factory=time.perf_counter)
    started: bool = False

    @property
    def pixels(self) -> int:
        return self.page.pixels


def record_batch_metrics(engine: str, pages: list[PagePayload], outcomes: list, engine_ms: float,
                         max_batch_pixels: int, gpu: Optional[dict]) -> None:
    """Page outcomes, invalid reasons, error codes, batch size and fill of one engine call."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            metrics.inc("ocr_pages_total", engine=engine, outcome="failed")
            metrics.inc("ocr_engine_errors_total", code=getattr(outcome, "code", "internal_error"))
        elif not outcome.result.valid:
            metrics.inc("ocr_pages_total", engine=engine, outcome="invalid")
            metrics.inc("ocr_invalid_pages_total",
                        reason=metrics.invalid_reason(outcome.result.notes, outcome.result.finish_reason))
        else:
            metrics.inc("ocr_pages_total", engine=engine, outcome="ok")
    metrics.stage("engine", engine_ms / 1000)
    metrics.observe("ocr_batch_pages", len(pages))
    metrics.observe("ocr_batch_fill_ratio", min(1.0, sum(p.pixels for p in pages) / max_batch_pixels))
    metrics.gpu_gauges(gpu)


def read_outcome(page: PagePayload, result, batch_size: int, batch_pixels: int, wait_ms: float, decode_ms: float,
                 engine_ms: float) -> PageOCR:
    """What the OCR replica hands on for a page it read; the image is not needed downstream."""
    return PageOCR(page=dataclasses.replace(page, image=None), result=result, batch_size=batch_size,
                   batch_pixels=batch_pixels, timings_ms={"queue_wait": wait_ms, "ocr_decode": round(decode_ms, 1),
                                                          "engine_batch": round(engine_ms, 1)})
