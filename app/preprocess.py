"""The CPU preprocessing deployment: uploaded bytes in, engine-sized PNG pages out.

It streams: each page is yielded as soon as it is decoded or rendered, so the
ingress sends page 1 to the OCR replicas while page 2 is still rasterising.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import AsyncIterator, Optional

from ray import serve

from app.config import Settings
from app.documents import DecodedPage, encode_png, fit_to_budget, iter_pages
from app.engines import input_budget
from app.schemas import PagePayload


def to_payload(page: DecodedPage, index: int, request_id: str, max_side: int, max_pixels: int) -> PagePayload:
    start = time.perf_counter()
    image, scale = fit_to_budget(page.image, max_side, max_pixels)
    png = encode_png(image)
    return PagePayload(
        request_id=request_id,
        index=index,
        page_number=page.page_number,
        png=png,
        width=image.width,
        height=image.height,
        source_width=page.image.width,
        source_height=page.image.height,
        scale=scale,
        dpi=page.dpi,
        timings_ms={"resize_encode": round((time.perf_counter() - start) * 1000, 1)},
    )


@serve.deployment(ray_actor_options={"num_cpus": 0.15}, max_ongoing_requests=16)
class Preprocessor:
    def __init__(self, settings: Settings):
        self._limits = settings.limits
        self._budget = input_budget(settings)

    async def prepare(
        self, request_id: str, data: bytes, content_type: Optional[str], pages: Optional[str]
    ) -> AsyncIterator[PagePayload]:
        """Yield one payload per page, in document order. Bad input raises a 4xx error before any page."""
        pages_iter = iter_pages(data, content_type, pages, self._limits)
        try:
            for index in itertools.count():
                start = time.perf_counter()
                page = await asyncio.to_thread(next, pages_iter, None)
                if page is None:
                    return
                decode_ms = round((time.perf_counter() - start) * 1000, 1)
                payload = await asyncio.to_thread(
                    to_payload, page, index, request_id, self._budget.max_side, self._budget.max_pixels
                )
                payload.timings_ms["decode"] = decode_ms
                yield payload
        finally:
            pages_iter.close()  # releases the PDF even when the client went away mid-document
