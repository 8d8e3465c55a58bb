"""One page through the stages after the Preprocessor, for synchronous requests and jobs alike:
OCR, then postprocess, under the one retry rule (app/pipeline/retry.py).

The OCR response goes to the Postprocessor unawaited (a DeploymentResponse), so the page's
image never comes back through the caller. A cancelled page (another page failed for good,
the client left) cancels both calls.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional

from ray.serve.handle import DeploymentHandle

from app.pipeline.retry import retry_page
from app.schemas import PagePayload


async def read_page(ocr: DeploymentHandle, post: DeploymentHandle, page: PagePayload, retries: int,
                    on_retry: Callable[[], None] = lambda: None) -> dict:
    """The page's postprocessed result; raises the last error once the retries are spent."""
    return await retry_page(lambda: _through_stages(ocr, post, page), retries,
                            f"request {page.request_id} page {page.page_number}", on_retry=on_retry)


async def _through_stages(ocr: DeploymentHandle, post: DeploymentHandle, page: PagePayload) -> dict:
    ocr_response = ocr.infer.remote(page)
    response = post.process.remote(ocr_response)  # the OCR result goes on unawaited
    try:
        return await response
    except asyncio.CancelledError:
        ocr_response.cancel()
        response.cancel()
        raise


class EngineIdentity:
    """The engine's name and version, as results report them: asked of an OCR replica once, then kept."""

    def __init__(self, ocr: DeploymentHandle):
        self._ocr = ocr
        self._value: Optional[dict] = None
        self.token_cap: Optional[int] = None  # a generating engine's most tokens per page; None: it writes none

    async def get(self) -> dict:
        if self._value is None:
            info = await self._ocr.info.remote()
            details = info.get("details") or {}
            self.token_cap = details.get("max_tokens") or details.get("max_new_tokens")
            self._value = {"name": info["name"], "version": info["version"]}
        return self._value
